#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Python frames spliced into native stacks, with real eBPF, on Debian's /usr/bin/python3 (3.11;
the `python3` on PATH may be another one). `record`: a script's known shares in named functions
within 3 points, <module>;main;run_stages;stage_* chains, zlib.compress's native frames (libz)
under the Python frame that called it; a generator and an async function under their callers;
recursion 300 deep cut honestly (one [truncated] frame, at the root end); code objects freed
right after they ran (named from what BPF copied); a process that exits while sampled. `run` with a real server: two Python threads, each with its own Python stack
(thread label), and the walk's counters on /metrics."""
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(__file__))
from lib import AGENT, Recording, check, finish, skip  # noqa: E402

PY = "/usr/bin/python3"
WORK = os.path.join(os.path.dirname(os.path.abspath(__file__)), "pystacks_work.py")
if os.geteuid() != 0:
    skip("needs root for eBPF")
if not os.access(PY, os.X_OK):
    skip("Debian's python3 (%s) is not installed" % PY)
tmp = tempfile.mkdtemp(prefix="gpuscope-pystacks-")
folded = os.path.join(tmp, "py.folded")


def start(mode, seconds, gated=False):
    """The workload, running; gated: its SECONDS start when a line is written to its stdin."""
    p = subprocess.Popen([PY, WORK, mode, str(seconds)], stdout=subprocess.PIPE, text=True,
                         stdin=subprocess.PIPE if gated else None,
                         env=dict(os.environ, PYWORK_GO="1") if gated else None)
    check(p.stdout.readline().strip() == "ready", "%s workload started" % mode)
    return p


def record(mode, work_seconds, rec_seconds, freq=499, comm=None):
    """Records the workload, whose work_seconds start once the recording runs (the agent's start
    takes seconds on a loaded machine); returns [(frames root first, count)] of its samples.
    comm: the whole machine is recorded and the samples of processes so named are returned
    (the workload's forked children, which a --pid recording leaves out)."""
    p = start(mode, work_seconds, gated=True)
    who = ["--pid", str(p.pid)] if comm is None else []
    rec = Recording([AGENT, "record", "--duration", "%ss" % rec_seconds, "--frequency", str(freq),
                     "--folded", folded, "--top", "0"] + who)
    p.stdin.write("go\n")
    p.stdin.close()
    r = rec.wait(timeout=rec_seconds + 60)
    p.wait()
    print("--- record %s: rc %d\n%s%s" % (mode, r.returncode, r.stdout[-1500:], r.stderr[-1500:]))
    check(r.returncode == 0, "record %s exits 0" % mode)
    out = []
    for line in open(folded, errors="replace"):
        stack, n = line.rsplit(" ", 1)
        f = stack.split(";")
        if comm is None or f[0] == comm:
            out.append((f[1:], int(n)))	# [0] is the process name
    return out


def total(stacks, pred=lambda f: True):
    return sum(n for f, n in stacks if pred(f))


def contiguous(frames, seq):
    k = len(seq)
    return any(frames[i:i + k] == seq for i in range(len(frames) - k + 1))


def below(frames, name, pattern):
    """Whether a frame after (callee of) `name` matches pattern."""
    if name not in frames:
        return False
    return any(re.search(pattern, f) for f in frames[frames.index(name) + 1:])


def show(stacks, pred, k=5):
    for f, n in sorted((s for s in stacks if pred(s[0])), key=lambda s: -s[1])[:k]:
        print("  %5d %s" % (n, ";".join(f)[-400:]))


# --- shares, chains, the C extension's native frames -------------------------------------------
st = record("shares", 14, 12, freq=999)
in_stages = total(st, lambda f: "run_stages" in f)
print("samples %d, in run_stages %d" % (total(st), in_stages))
show(st, lambda f: True, 8)
check(in_stages >= 300, "enough samples in run_stages (%d)" % in_stages)
for stage, want in (("stage_alpha", 50), ("stage_beta", 30), ("stage_zlib", 20)):
    got = 100.0 * total(st, lambda f: stage in f) / max(in_stages, 1)
    check(abs(got - want) <= 3, "%s share %.1f%% within 3 points of %d%%" % (stage, got, want))
    chained = total(st, lambda f: contiguous(f, ["<module>", "main", "run_stages", stage]))
    check(chained >= 0.95 * total(st, lambda f: stage in f),
          "%s: %d of %d samples read <module>;main;run_stages;%s" %
          (stage, chained, total(st, lambda f: stage in f), stage))
zl = total(st, lambda f: "stage_zlib" in f)
native = total(st, lambda f: below(f, "stage_zlib", r"deflate|compress|libz"))
if not check(native >= 0.7 * zl, "zlib.compress's native frames (libz) under stage_zlib in %d of %d"
             % (native, zl)):
    show(st, lambda f: "stage_zlib" in f)
interp = total(st, lambda f: any(x.startswith("[unknown] python3") or
                                   re.match(r"python3[.0-9]*\+0x", x) for x in f))
check(interp == 0, "no unnamed interpreter frames ([unknown] python3.11, python3.11+0x...) in %d "
      "samples" % interp)
# stripped code elsewhere (libz's static functions): named after where its CFI says the
# function starts, module+0xSTART, not [unknown]
unk = total(st, lambda f: any(x.startswith("[unknown]") for x in f))
if not check(unk <= 0.05 * total(st), "samples with an [unknown] frame: %d of %d" % (unk, total(st))):
    show(st, lambda f: any(x.startswith("[unknown]") for x in f))
base = total(st, lambda f: contiguous(f, ["PyEval_EvalCode", "_PyEval_EvalFrameDefault",
                                          "<module>", "main", "run_stages"]))
check(base >= 0.95 * in_stages, "PyEval_EvalCode;_PyEval_EvalFrameDefault;<module>;main;run_stages"
      " in %d of %d samples" % (base, in_stages))
unknown_py = total(st, lambda f: "[python]" in f)
check(unknown_py <= 0.02 * max(total(st), 1), "unreadable Python frames: %d of %d samples" %
      (unknown_py, total(st)))

# --- a generator and an async function ----------------------------------------------------------
st = record("gen", 6, 4)
all_n = total(st)
g = total(st, lambda f: "gen_stage" in f)
a = total(st, lambda f: "async_stage" in f)
show(st, lambda f: "gen_stage" in f or "async_stage" in f, 4)
check(g >= 0.2 * all_n and a >= 0.2 * all_n,
      "generator (%d) and async function (%d) samples of %d" % (g, a, all_n))
gc = total(st, lambda f: "gen_stage" in f and f.index("consume_gen") < f.index("gen_stage")
           if "consume_gen" in f else False)
check(gc >= 0.95 * g, "gen_stage under consume_gen in %d of %d" % (gc, g))
ac = total(st, lambda f: "async_stage" in f and "run_gen" in f and
           f.index("run_gen") < f.index("async_stage"))
check(ac >= 0.95 * a, "async_stage under run_gen (asyncio.run) in %d of %d" % (ac, a))

# --- recursion 300 deep: cut with one [truncated] frame, at the root end --------------------------
st = record("recurse", 6, 4)
rec = total(st, lambda f: "recurse" in f)
show(st, lambda f: "recurse" in f, 2)
check(rec >= 50, "recursion samples: %d" % rec)


def cut_honestly(f):
    """[truncated] once, as the root; then only recurse frames down to spin (if sampled there)."""
    if "recurse" not in f or f.count("[truncated]") != 1 or f[0] != "[truncated]":
        return False
    py = f[1:f.index("spin")] if "spin" in f else f[1:f.index("recurse") + f.count("recurse")]
    return f.count("recurse") >= 40 and all(x == "recurse" for x in py)


honest = total(st, cut_honestly)
check(honest >= 0.9 * rec, "one [truncated] frame at the root, then >= 40 recurse frames: %d of %d"
      % (honest, rec))

# --- forked children: their Python frames from their first samples ---------------------------
# (each lives 50 ms, less than the agent takes to read a new process on a busy machine: it is
# walked with its parent's entry meanwhile, and its thread-state lookup must not be kept while
# the state still bears the parent's id)
st = record("fork", 6, 5, comm="pyw-child")
kids = total(st)
named = total(st, lambda f: contiguous(f, ["run_fork", "child_work", "spin"]))
show(st, lambda f: True, 3)
check(kids >= 50 and named >= 0.7 * kids, "forked children's samples under "
      "run_fork;child_work;spin: %d of %d" % (named, kids))

# --- code that dies young: module bodies run once and freed (imports), addresses reused -----------
st = record("young", 8, 6)
young = total(st, lambda f: "run_young" in f and "spin" in f)	# the exec'd code burning
show(st, lambda f: "run_young" in f, 4)
check(young >= 300, "samples of young code burning: %d" % young)


def young_named(f):
    """...;run_young;(exec's native frames);<module>;young_work_N;spin: body and function named."""
    if "run_young" not in f or "spin" not in f:
        return False
    i = f.index("spin")
    return i >= 2 and f[i - 2] == "<module>" and re.fullmatch(r"young_work_\d+", f[i - 1])


yn = total(st, young_named)
yp = total(st, lambda f: "run_young" in f and "[python]" in f)
if not check(yn >= 0.97 * young and yp <= 0.01 * young,
             "young code named (<module>;young_work_N;spin) in %d of %d samples; [python] in %d"
             % (yn, young, yp)):
    show(st, lambda f: "run_young" in f and "spin" in f and not young_named(f), 6)

# --- a process that exits while sampled ---------------------------------------------------------
st = record("shares", 5, 8)
named = total(st, lambda f: "run_stages" in f)
unreadable = total(st, lambda f: "[python]" in f)
check(named > 0 and named >= 0.9 * (named + unreadable),
      "exiting process: %d samples with its Python frames, %d with [python] (read after it "
      "exited)" % (named, unreadable))

# --- two threads, through `run` and a real server ------------------------------------------------
try:
    from pushlib import Agent, Scratch, Server, cpu_sampler_up  # noqa: E402
except ImportError:
    Agent = None
if check(Agent is not None, "push test helpers available"):
    scratch = Scratch("pystacks-run")
    server = Server(scratch.path("data"), log=scratch.path("server.log"))
    server.start()
    # the threads start burning once the agent is up (its start takes seconds on a loaded
    # machine, and two threads spinning meanwhile only slow it down)
    work = start("threads", 60, gated=True)
    node = "pystacks-%d" % os.getpid()
    agent = Agent(server.url, ["--modules", "cpu-sampler", "--pid", str(work.pid),
                               "--push-interval", "1s", "--frequency", "499", "--node", node,
                               "--spool-dir", scratch.path("spool")], scratch.path("agent.log"))
    work.stdin.write("go\n")
    work.stdin.close()

    def thread_total(name):
        return server.query("flamegraph", since="10m", selector='{node="%s",pid="%d",thread="%s"}'
                            % (node, work.pid, name))["total"]
    try:
        if cpu_sampler_up(agent):
            from pushlib import wait_until
            # what a 6 s wait gave on an idle machine: 1000 and more samples of each thread
            check(wait_until(lambda: thread_total("pyw-a") >= 1000 and
                             thread_total("pyw-b") >= 1000, 90, step=0.5),
                  "1000 samples of each thread stored")
            m = agent.metrics()
            check(m.get('gpuscope_agent_python_walk_total{event="frames"}', 0) > 0,
                  "python frames counted on /metrics")
            agent.stop()

            def presence(node_, name):
                if node_["name"] == name:
                    return node_["value"]
                return sum(presence(k, name) for k in node_.get("children") or [])

            for mine, other in (("pyw-a", "pyw-b"), ("pyw-b", "pyw-a")):
                fg = server.query("flamegraph", since="10m",
                                  selector='{node="%s",pid="%d",thread="%s"}' %
                                  (node, work.pid, mine))
                fn, other_fn = "work_" + mine[-1], "work_" + other[-1]
                check(fg["total"] >= 100, "%s: %d samples" % (mine, fg["total"]))
                check(presence(fg["root"], fn) >= 0.9 * fg["total"] and
                      presence(fg["root"], other_fn) == 0,
                      "thread %s: %d of %d samples under %s, %d under %s" %
                      (mine, presence(fg["root"], fn), fg["total"], fn,
                       presence(fg["root"], other_fn), other_fn))
        else:
            check(False, "the agent's CPU sampler is up")
    finally:
        agent.stop()
        work.kill()
        work.wait()
        server.stop()
finish()
