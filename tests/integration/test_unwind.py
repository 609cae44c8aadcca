#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The BPF unwinder on real eBPF: a program and a shared library built -O2 -fomit-frame-pointer
burning 50/30/20 (the last share with its leaf in the vDSO) are recovered within 3 points with
full chains main -> ... -> leaf (frame pointers alone lose them: checked too); a library
dlopen()ed after start unwinds; processes that exec and exit mid-recording cost no crash and
every cut stack ends in one [truncated] frame, counted."""
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading

sys.path.insert(0, os.path.dirname(__file__))
from lib import AGENT, OUT, Recording, check, finish, run, skip, start_workload  # noqa: E402

if os.geteuid() != 0:
    skip("needs root for eBPF")
FIX = os.path.join(OUT, "tests", "fixtures", "unwind")
BURN = os.path.join(FIX, "nofp_burn")
tmp = tempfile.mkdtemp(prefix="gpuscope-unwind-")
folded = os.path.join(tmp, "cpu.folded")


def record(w, seconds, *extra, signal_when_recording=False):
    """Records workload w (started to outlast any agent start, held stopped until the recording
    runs: it is killed after); sends it SIGUSR1 once the recording runs if asked."""
    rec = Recording([AGENT, "record", "--duration", "%ds" % seconds, "--frequency", "999", "--pid",
                     str(w.pid), "--folded", folded, "--top", "0"] + list(extra), hold=[w])
    if signal_when_recording:
        w.send_signal(signal.SIGUSR1)
    r = rec.wait()
    w.kill()
    w.wait()
    print(r.stdout[-1500:], r.stderr[-1500:])
    stacks = {}
    if os.path.exists(folded):
        for line in open(folded, errors="replace"):
            s, n = line.rsplit(" ", 1)
            stacks[s] = stacks.get(s, 0) + int(n)
    return r, stacks


def share(stacks, frag):
    total = sum(stacks.values())
    return 100.0 * sum(n for s, n in stacks.items() if frag in s) / max(total, 1)


# --- shares and chains without frame pointers -----------------------------------------------------
# (a loaded 2-core machine gives the workload a fraction of a CPU: 8 s at 999 Hz keeps the
# binomial noise of a share near 1 point, a third of the tolerance)
w = start_workload(BURN, "120")
r, stacks = record(w, 8)
total = sum(stacks.values())
check(r.returncode == 0 and total > 800, "record exits 0 with enough samples (%d)" % total)
for phase, leaf, want in (("phase_alpha", "leaf_alpha", 50), ("phase_lib", "nofp_lib_outer;nofp_lib_leaf", 30),
                          ("phase_vdso", "vdso_leaf;", 20)):
    got = share(stacks, ";main;burn_loop;%s;" % phase)
    check(abs(got - want) <= 3, "main;burn_loop;%s: %.1f%% within 3 points of %d%%" % (phase, got, want))
    check(share(stacks, ";main;burn_loop;%s;%s" % (phase, leaf)) > want - 6,
          "full chain main;burn_loop;%s;%s" % (phase, leaf))
vdso = share(stacks, ";main;burn_loop;phase_vdso;vdso_leaf;clock_gettime")
vdso_leaf = sum(n for s, n in stacks.items() if re.search(r";main;burn_loop;phase_vdso;vdso_leaf;clock_gettime[^;]*;__vdso_clock_gettime", s))
check(vdso_leaf > 0, "a vDSO leaf under main;burn_loop;phase_vdso;vdso_leaf;clock_gettime (%d samples, %.1f%%)" % (vdso_leaf, vdso))
reach = share(stacks, ";main;")
check(reach >= 95, "%.1f%% of samples reach main (>= 95)" % reach)
m = re.search(r"unwind: (\d+) walks, (\d+) frames \((\d+) by tables", r.stdout)
check(m is not None and int(m.group(3)) > int(m.group(2)) // 2, "frames walked by tables: %s" % (m and m.group(0)))
bad = [s for s in stacks if "[truncated]" in s and not s.split(";")[1] == "[truncated]"]
check(not bad, "[truncated] is only ever the outermost frame (%s)" % bad[:2])

# The same workload with frame pointers only: the callers are lost (the test above can fail).
w = start_workload(BURN, "120")
r, fp = record(w, 3, "--frame-pointers")
check(r.returncode == 0 and share(fp, ";main;") < 50,
      "frame pointers alone: only %.1f%% reach main" % share(fp, ";main;"))

# --- dlopen after start ------------------------------------------------------------------------------
w = start_workload(BURN, "120", "dlopen")
r, stacks = record(w, 5, signal_when_recording=True)
late = {s: n for s, n in stacks.items() if "nofp_late_leaf" in s}
full = sum(n for s, n in late.items() if ";main;burn_loop;phase_lib;nofp_late_outer;nofp_late_leaf" in s)
check(sum(late.values()) > 20 and full >= 0.9 * sum(late.values()),
      "library dlopen()ed after start: %d of %d samples in it have the full chain" % (full, sum(late.values())))

# --- processes that exec and exit while being walked ------------------------------------------------
loop = subprocess.Popen(["/bin/sh", "-c", "for i in $(seq 60); do %s 0.03 >/dev/null; "
                         "/bin/sh -c 'exec %s 0.03' >/dev/null; done" % (BURN, BURN)])
r = run([AGENT, "record", "--duration", "3s", "--frequency", "999", "--folded", folded, "--top", "0"])
loop.kill()
loop.wait()
print(r.stdout[-800:], r.stderr[-800:])
check(r.returncode == 0, "record across many short processes (exec, exit) exits 0")
lines = open(folded, errors="replace").read().splitlines() if os.path.exists(folded) else []
# (the workload's and the shells' stacks: the recording is of the whole machine, and a deep
# Python stack of another program can hold a gap of its own past the native cut)
cut = [l for l in lines if "[truncated]" in l and l.split(";", 1)[0] in ("nofp_burn", "sh")]
check(all(l.count("[truncated]") == 1 for l in cut),
      "each cut stack of the workload has exactly one [truncated] frame (%d cut)" % len(cut))
m = re.search(r"(\d+) truncated", r.stdout)
check(m is not None, "truncated walks are counted (%s)" % (m and m.group(0)))

# --- fork children walked with their parent's mappings until their own are read -----------------
# each child lives 30 ms: less than the agent takes to read a new process's mappings on a busy
# machine, so without its parent's it would be walked by frame pointers (none here: cut at the
# leaf) for all of its life. The parent burns alone until the agent has read its mappings and
# built their tables: on a loaded machine that can take seconds.
w = subprocess.Popen([BURN, "30", "fork"], stdout=subprocess.PIPE, text=True)
check(w.stdout.readline().strip() == "ready", "the forking workload started")
rec = Recording([AGENT, "record", "--duration", "7s", "--frequency", "999", "--folded", folded,
                 "--top", "0", "--verbose"])
# it forks once the agent has built its tables (the debug log names each of its mappings with
# "table"), which took from 0.3 s to more than the 2 s a fixed wait gave it on a loaded machine
want = {BURN + ": table", os.path.join(FIX, "libnofp.so") + ": table", "/libc.so.6: table"}
seen, tables = set(), threading.Event()


def read_log():
    for line in rec.p.stderr:	# read throughout: the debug log would fill the pipe
        if line.startswith("gpuscope-agent debug: unwind: pid %d " % w.pid):
            seen.update(x for x in want if line.rstrip().endswith(x))
            if seen == want:
                tables.set()


reader = threading.Thread(target=read_log, daemon=True)
reader.start()
check(tables.wait(60), "the agent built the forking workload's tables (%s)" % sorted(seen))
w.send_signal(signal.SIGUSR1)
rec.p.wait(120)
reader.join(10)
w.kill()
w.wait()
lines = open(folded, errors="replace").read().splitlines() if os.path.exists(folded) else []
kids = {}
for l in lines:
    s, n = l.rsplit(" ", 1)
    if s.startswith("nofp_child;"):
        kids[s] = kids.get(s, 0) + int(n)
# (the rest of a child's samples are its exit's, in the kernel: no user stack to walk)
total = sum(kids.values())
whole = sum(n for s, n in kids.items() if ";main;burn_loop;" in s and "[truncated]" not in s)
cut = sum(n for s, n in kids.items() if "[truncated]" in s)
for s, n in sorted(kids.items(), key=lambda kv: -kv[1])[:3]:
    print("  %5d  %s" % (n, s[:200]))
check(total >= 50 and whole >= 0.6 * total and cut <= 0.1 * total,
      "fork children's samples: %d of %d with the whole chain main -> burn_loop, %d cut short" %
      (whole, total, cut))
finish()
