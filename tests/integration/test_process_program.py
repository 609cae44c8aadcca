#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Processes by what they run (issue 35 item 2): a live agent (cpu-sampler, meta) and three
Python processes that all look like `python3`: `python3 work.py --lr 3e-4`, `python3 -m spinmod`
and `python3 -c ...`, each with a secret in its environment. The picker's answer
(/api/v1/processes) finds each by its program (work.py, spinmod) and command line; the
selector {program="work.py"} selects that process's samples only; the pprof of it carries the
labels; `gpuscope top --processes` lists it by program and command line; no label value
anywhere holds the environment."""
import gzip
import os
import subprocess
import sys
import time
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pushlib import (CLI, Scratch, Server, check, finish, http,  # noqa: E402
                     need_root_and_binaries, wait_until)
from lib import AGENT  # noqa: E402

need_root_and_binaries()

SPIN = "import time\nt = time.time()\nwhile time.time() - t < 3:\n    pass\n"
SECRET = "s3cr3t-env-value-9f1c"


def main():
    tmp = Scratch("process-program")
    server = Server(tmp.path("data"), log=tmp.path("server.log"))
    server.start()
    open(tmp.path("work.py"), "w").write(SPIN)
    os.makedirs(tmp.path("spinmod"), exist_ok=True)
    open(tmp.path("spinmod/__main__.py"), "w").write(SPIN)
    open(tmp.path("spinmod/__init__.py"), "w").write("")
    log = tmp.path("agent.log")
    env = dict(os.environ)
    env.pop("GPUSCOPE_AGENT_MODULES_OFF", None)
    t0 = time.time_ns()
    agent = subprocess.Popen([AGENT, "run", "--server", server.url, "--metrics-listen",
                              "127.0.0.1:0", "--modules", "meta,cpu-sampler", "--node",
                              "process-program", "--push-interval", "1s"],
                             stdout=open(log, "wb"), stderr=subprocess.STDOUT, env=env)
    procs = []
    try:
        wait_until(lambda: agent.poll() is not None or
                   "metrics: http" in open(log, errors="replace").read(), 60)
        check(agent.poll() is None, "agent runs: " + open(log, errors="replace").read()[-2000:])
        wenv = dict(os.environ, GPUSCOPE_TEST_SECRET=SECRET)
        for argv in (["python3", "work.py", "--lr", "3e-4"], ["python3", "-m", "spinmod"],
                     ["python3", "-c", SPIN]):
            procs.append(subprocess.Popen(argv, cwd=tmp.path(""), env=wenv))
        for p in procs:
            p.wait(60)
        time.sleep(2.5)  # their last samples pushed
        agent.terminate()
        rc = agent.wait(60)
    finally:
        if agent.poll() is None:
            agent.kill()
        for p in procs:
            if p.poll() is None:
                p.kill()
    check(rc == 0, f"agent stopped cleanly ({rc}): {open(log, errors='replace').read()[-2000:]}")
    work, mod, code = (str(p.pid) for p in procs)
    rng = {"from": f"{t0 / 1e9 - 5:.3f}", "to": f"{time.time() + 5:.3f}"}
    # this agent's node only
    rows = {p["pid"]: p for p in server.query("processes", kind="cpu", limit="1000",
                                              selector='{node="process-program"}',
                                              **rng)["processes"]}
    w, m, c = rows.get(work, {}), rows.get(mod, {}), rows.get(code, {})
    check(w.get("comm") == "python3" and w.get("program") == "work.py" and
          w.get("cmdline") == "python3 work.py --lr 3e-4",
          f"the picker's row of `python3 work.py --lr 3e-4`: {w}")
    check(m.get("program") == "spinmod" and m.get("cmdline") == "python3 -m spinmod",
          f"`python3 -m spinmod` by its module: {m}")
    check(c.get("program") == "python3" and c.get("cmdline", "").startswith("python3 -c import"),
          f"`python3 -c ...`: the interpreter, the code in the command line: {c}")
    # what the picker's search matches: the script's name finds exactly that process
    # (the agent samples the whole machine: another test's pystacks_work.py may be there too)
    found = [p for p, r in rows.items() if "work.py" in r.get("program", "") + r.get("cmdline", "")]
    check(work in found and [p for p in found if rows[p].get("program") == "work.py"] == [work],
          f"searching 'work.py' finds pid {work}: {found}")
    fg = server.query("flamegraph", kind="cpu",
                      selector='{node="process-program",program="work.py"}', **rng)
    own = server.query("flamegraph", kind="cpu", selector='{pid="%s"}' % work, **rng)
    check(fg["total"] >= 20 and fg["total"] == own["total"],
          f'{{program="work.py"}} selects that process: {fg["total"]} samples, '
          f'pid {work} has {own["total"]}')
    st, body = http("%s/api/v1/pprof?%s" % (server.url, urllib.parse.urlencode(
        dict(rng, kind="cpu", selector='{node="process-program",program="work.py"}'))))
    raw = gzip.decompress(body) if st == 200 else b""
    check(b"program" in raw and b"work.py" in raw and b"cmdline" in raw,
          f"pprof carries program and cmdline (HTTP {st}, {len(raw)} bytes)")
    r = subprocess.run([CLI, "top", "--processes", "--server", server.url, "--from", rng["from"],
                        "--to", rng["to"], "--selector", '{node="process-program",comm="python3"}'],
                       capture_output=True, text=True, timeout=60)
    row = [ln for ln in r.stdout.splitlines() if f" {work} " in ln]
    check(r.returncode == 0 and row and row[0].split()[3:] ==
          ["python3", "work.py", "python3", "work.py", "--lr", "3e-4"],
          f"gpuscope top --processes lists pid {work} by program and command line:\n{r.stdout}"
          f"{r.stderr}")
    vals = []
    for name in ("cmdline", "program", "comm"):
        vals += server.query("label/%s/values" % name, **rng).get("values", [])
    check(vals and not any(SECRET in v for v in vals),
          f"no label value holds the environment ({len(vals)} values)")
    print(f"work.py pid {work}: {w}; -m spinmod pid {mod}: {m.get('program')}; "
          f"{{program=\"work.py\"}}: {fg['total']} samples")
    relabeled(tmp, server)
    server.stop()
    finish()


def relabeled(tmp, server):
    """The relabel rules see program and cmdline: a labeldrop of cmdline (arguments may hold
    secrets) and a drop of a program."""
    rules = tmp.path("relabel.yaml")
    with open(rules, "w") as f:
        f.write("- action: labeldrop\n  regex: cmdline\n"
                "- source_labels: [program]\n  regex: spinmod\n  action: drop\n")
    env = dict(os.environ)
    env.pop("GPUSCOPE_AGENT_MODULES_OFF", None)
    log = tmp.path("agent-relabel.log")
    t0 = time.time_ns()
    agent = subprocess.Popen([AGENT, "run", "--server", server.url, "--metrics-listen",
                              "127.0.0.1:0", "--modules", "meta,cpu-sampler", "--node",
                              "process-relabel", "--push-interval", "1s",
                              "--relabel-config", rules],
                             stdout=open(log, "wb"), stderr=subprocess.STDOUT, env=env)
    procs = []
    try:
        wait_until(lambda: agent.poll() is not None or
                   "metrics: http" in open(log, errors="replace").read(), 60)
        for argv in (["python3", "work.py", "--lr", "1e-3"], ["python3", "-m", "spinmod"]):
            procs.append(subprocess.Popen(argv, cwd=tmp.path("")))
        for p in procs:
            p.wait(60)
        time.sleep(2.5)
        agent.terminate()
        rc = agent.wait(60)
    finally:
        if agent.poll() is None:
            agent.kill()
        for p in procs:
            if p.poll() is None:
                p.kill()
    check(rc == 0, f"relabel: agent stopped cleanly ({rc}): "
          f"{open(log, errors='replace').read()[-2000:]}")
    rng = {"from": f"{t0 / 1e9 - 5:.3f}", "to": f"{time.time() + 5:.3f}",
           "selector": '{node="process-relabel"}'}
    rows = {p["pid"]: p for p in server.query("processes", kind="cpu", limit="1000",
                                              **rng)["processes"]}
    w, m = rows.get(str(procs[0].pid), {}), rows.get(str(procs[1].pid))
    check(w.get("program") == "work.py" and "cmdline" not in w,
          f"relabel: labeldrop cmdline keeps program, drops the command line: {w}")
    check(m is None, f"relabel: the program spinmod dropped: {m}")


if __name__ == "__main__":
    main()
