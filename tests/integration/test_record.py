#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""`gpuscope-agent record` against real eBPF: shares of a known workload within 3 points, full
call chains through a PIE binary and a shared library, kernel frames, pprof read back by Go's
pprof with totals equal to the agent's summary, and clear errors for bad input."""
import os
import re
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(__file__))
from lib import AGENT, PROGS, Recording, check, finish, go_tool, run, skip, start_workload  # noqa: E402

if os.geteuid() != 0:
    skip("needs root for eBPF")
tmp = tempfile.mkdtemp(prefix="gpuscope-record-")
pb = os.path.join(tmp, "cpu.pb.gz")
folded = os.path.join(tmp, "cpu.folded")

# --- shares, chains, pprof ------------------------------------------------------------------
# the workloads outlast the recording, however long the agent takes to start (held stopped
# until it samples)
burn = start_workload(os.path.join(PROGS, "burn"), "120", "2")
r = Recording([AGENT, "record", "--duration", "5s", "--frequency", "999", "--pid", str(burn.pid),
               "--output", pb, "--folded", folded, "--top", "10"], hold=[burn]).wait()
burn.kill()
burn.wait()
print(r.stdout[-3000:], r.stderr[-2000:])
check(r.returncode == 0, "record exits 0")
m = re.search(r"recorded (\d+) samples", r.stdout)
total = int(m.group(1)) if m else 0
check(total > 500, "enough samples (%d)" % total)
check(re.search(r"\b0 lost", r.stdout) is not None, "no samples lost")

stacks = {}
for line in open(folded, errors="replace"):
    stack, n = line.rsplit(" ", 1)
    stacks[stack] = stacks.get(stack, 0) + int(n)
fold_total = sum(stacks.values())
check(fold_total == total, "folded total %d == summary %d" % (fold_total, total))


def share(leaf):
    return 100.0 * sum(n for s, n in stacks.items() if (";" + leaf + ";") in s + ";") / max(fold_total, 1)


for leaf, want in (("leaf_alpha", 50), ("leaf_beta", 30), ("burnlib_leaf", 20)):
    got = share(leaf)
    check(abs(got - want) <= 3, "%s share %.1f%% within 3 points of %d%%" % (leaf, got, want))
for chain in ("main;burn_loop;phase_alpha;leaf_alpha", "main;burn_loop;phase_lib;burnlib_leaf",
              "worker;burn_loop;phase_beta;leaf_beta"):
    check(any(chain in s for s in stacks), "full chain %s" % chain)

go = go_tool()
if check(go is not None, "go tool available (golang-go)"):
    env = {"HOME": tmp, "GOCACHE": os.path.join(tmp, "gocache"), "PPROF_TMPDIR": tmp}
    t = run([go, "tool", "pprof", "-symbolize=none", "-sample_index=samples", "-top",
             "-nodecount=200", pb], env=env)
    print(t.stdout[:2500], t.stderr[:500])
    check(t.returncode == 0, "go tool pprof reads the profile")
    mt = re.search(r"of ([\d.]+) total", t.stdout)
    check(mt is not None and int(float(mt.group(1))) == total,
          "pprof total %s == summary %d" % (mt and mt.group(1), total))
    # cum%: samples with the function anywhere on the stack (the timer interrupt's kernel
    # frames sit on top of some leaf samples, so flat% would undercount).
    cum = {}
    for line in t.stdout.splitlines():
        f = line.split()
        if len(f) >= 6 and f[4].endswith("%"):
            cum[f[5]] = float(f[4][:-1])
    for leaf, want in (("leaf_alpha", 50), ("leaf_beta", 30), ("burnlib_leaf", 20)):
        check(abs(cum.get(leaf, 0) - want) <= 3,
              "pprof cum %s %.1f%% within 3 of %d%%" % (leaf, cum.get(leaf, 0), want))
    tr = run([go, "tool", "pprof", "-symbolize=none", "-traces", pb], env=env)
    check("burnlib_leaf" in tr.stdout, "pprof traces show the shared-library frame")
    tg = run([go, "tool", "pprof", "-symbolize=none", "-tags", pb], env=env)
    check("burn-w1" in tg.stdout and "timestamp" in tg.stdout and "pid" in tg.stdout,
          "pprof labels: thread, timestamp, pid")

# --- kernel frames ----------------------------------------------------------------------------
sc = start_workload(os.path.join(PROGS, "syscalls"), "120")
r = Recording([AGENT, "record", "--duration", "2s", "--frequency", "499", "--pid", str(sc.pid),
               "--folded", folded, "--top", "0"], hold=[sc]).wait()
sc.kill()
sc.wait()
lines = open(folded, errors="replace").read().splitlines()
kstacks = [line for line in lines if "_[k]" in line]
ktotal = sum(int(l.rsplit(" ", 1)[1]) for l in kstacks)
alltotal = sum(int(l.rsplit(" ", 1)[1]) for l in lines)
check(alltotal > 0 and ktotal / alltotal > 0.5,
      "syscall workload: %d of %d samples have kernel frames" % (ktotal, alltotal))
# libc's read() has no frame pointer, so its caller is skipped by the frame-pointer unwinder:
# the user part ends in main;...;read and the kernel part follows.
check(any(";main;" in l and "vfs_read_[k]" in l for l in kstacks), "kernel read path (vfs_read) under main")

# --- a process that execs and then exits mid-run ------------------------------------------------
# (by pid: other jobs on this machine may run the same workloads at the same time)
import subprocess  # noqa: E402
# the shell execs burn once the recording runs (a line on its stdin)
sh = subprocess.Popen(["/bin/sh", "-c", "read go; sleep 0.5; exec %s 2 >/dev/null" %
                       os.path.join(PROGS, "burn")], stdin=subprocess.PIPE)
rec = Recording([AGENT, "record", "--duration", "4s", "--frequency", "199", "--pid", str(sh.pid),
                 "--folded", folded, "--top", "0"])
sh.stdin.write(b"go\n")
sh.stdin.close()
r = rec.wait()
sh.wait()
check(r.returncode == 0, "record across exec and exit exits 0")
lines = open(folded, errors="replace").read().splitlines()
if not check(any(l.startswith("burn;") and "main;burn_loop;phase_alpha;leaf_alpha" in l for l in lines),
             "exec'd then exited process resolves (burn;...;leaf_alpha)"):
    print("\n".join(lines[:20]), r.stdout[-500:])

# --- processes gone before their maps were read (the kernel's mmap records) ---------------------
# A shell loop of 30-ms processes under a name of this run's own (a link to burn: other jobs may
# run burn meanwhile), the whole machine recorded: each is gone long before the agent would
# read its /proc/PID/maps; its frames resolve from the mmap records (src/agent/sym/mmapwatch.h).
name = "sl%d" % (os.getpid() % 100000)
os.symlink(os.path.join(PROGS, "burn"), os.path.join(tmp, name))
loop = subprocess.Popen(["/bin/sh", "-c", "read go; end=$(($(date +%%s) + 4)); "
                         "while [ $(date +%%s) -lt $end ]; do ./%s 0.03 >/dev/null; done" % name],
                        cwd=tmp, stdin=subprocess.PIPE)
rec = Recording([AGENT, "record", "--duration", "4s", "--frequency", "499", "--folded", folded,
                 "--top", "0"])
loop.stdin.write(b"go\n")
loop.stdin.close()
r = rec.wait()
loop.wait()
short = [l for l in open(folded, errors="replace").read().splitlines() if l.startswith(name + ";")]
n_all = sum(int(l.rsplit(" ", 1)[1]) for l in short)
n_named = sum(int(l.rsplit(" ", 1)[1]) for l in short if ";leaf_alpha" in l or
              ";leaf_beta" in l or ";burnlib_leaf" in l or ";burn_loop" in l)
n_unknown = sum(int(l.rsplit(" ", 1)[1]) for l in short if "[unknown]" in l)
print("short-lived processes: %d samples, %d in burn's functions, %d with [unknown]" %
      (n_all, n_named, n_unknown))
if check(n_all >= 50, "short-lived processes sampled (%d samples)" % n_all):
    # the rest: their start (exec, the dynamic linker) and exit, named too
    check(n_named >= 0.5 * n_all, "short-lived processes' samples in their functions: %d of %d" %
          (n_named, n_all))
    check(n_unknown <= 0.1 * n_all, "short-lived processes: %d of %d samples with [unknown]" %
          (n_unknown, n_all))

# --- bad input ----------------------------------------------------------------------------------
for args, what in ((["--duration", "soon"], "bad duration"), (["--frequency", "0"], "bad frequency"),
                   (["--bogus"], "unknown flag"), (["--pid", "x"], "bad pid")):
    r = run([AGENT, "record"] + args)
    check(r.returncode == 2 and r.stderr.strip() != "", "%s: exit 2 with a message" % what)
if shutil.which("setpriv"):
    r = run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all",
             AGENT, "record", "--duration", "1s", "--top", "0"])
    check(r.returncode == 2 and "root" in r.stderr and len(r.stderr.strip().splitlines()) == 1,
          "unprivileged: exit 2 with one line naming root (%r)" % r.stderr.strip())
shutil.rmtree(tmp, ignore_errors=True)
finish()
