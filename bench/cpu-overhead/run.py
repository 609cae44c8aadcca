#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""bench/cpu-overhead: slowdown of a CPU-bound workload on all CPUs under gpuscope-agent record
(19, 99, 999 Hz), `perf record -F 99 -a -g` and bcc's profile (99 Hz), each as a ratio to bare
runs interleaved in the same rounds; plus the agent's own CPU time and peak RSS.
Usage: bench/cpu-overhead/run.py [ROUNDS] [WORK_ROUNDS]   (run as root; installs peers)"""
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
AGENT = os.environ.get("GPUSCOPE_AGENT", os.path.join(ROOT, ".output", "gpuscope-agent"))
rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 5
work_rounds = sys.argv[2] if len(sys.argv) > 2 else "150000000"
tmp = tempfile.mkdtemp(prefix="gpuscope-bench-")
work = os.environ.get("GPUSCOPE_BENCH_WORK") or os.path.join(tmp, "work")
if not os.environ.get("GPUSCOPE_BENCH_WORK"):
    subprocess.run(["gcc", "-O2", "-pthread", "-o", work,
                    os.path.join(os.path.dirname(__file__), "work.c")], check=True)
if (not shutil.which("perf") or not os.path.exists("/usr/sbin/profile-bpfcc")) and shutil.which("apt-get"):
    subprocess.run(["apt-get", "install", "-y", "-q", "linux-perf", "bpfcc-tools"],
                   stdout=subprocess.DEVNULL, check=False)
perf = shutil.which("perf")
bcc = "/usr/sbin/profile-bpfcc" if os.path.exists("/usr/sbin/profile-bpfcc") else None

configs = {
    "bare": None,
    "gpuscope 19Hz": [AGENT, "record", "-d", "1h", "-F", "19", "--top", "0", "-o", tmp + "/a.pb.gz"],
    "gpuscope 99Hz": [AGENT, "record", "-d", "1h", "-F", "99", "--top", "0", "-o", tmp + "/a.pb.gz"],
    "gpuscope 999Hz": [AGENT, "record", "-d", "1h", "-F", "999", "--top", "0", "-o", tmp + "/a.pb.gz"],
}
if perf:
    configs["perf record 99Hz"] = [perf, "record", "-F", "99", "-a", "-g", "-o", tmp + "/perf.data"]
if bcc:
    configs["bcc profile 99Hz"] = [bcc, "-F", "99", "-f"]



def proc_usage(pid):
    """CPU seconds (user+system) so far and peak RSS in MB of a running process."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    rss = 0.0
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmHWM:"):
                rss = int(line.split()[1]) / 1024.0
    return cpu, rss


unavailable = {}
times = {k: [] for k in configs}
usage = {k: [] for k in configs}
for r in range(rounds):
    order = list(configs)
    random.shuffle(order)
    for name in order:
        prof = None
        if name in unavailable:
            continue
        if configs[name]:
            prof = subprocess.Popen(configs[name], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                    text=True)
            time.sleep(1.5 if "bcc" not in name else 6)  # let it load and attach
            if prof.poll() is not None:
                unavailable[name] = prof.stderr.read().strip().splitlines()[-1:]
                continue
        before = proc_usage(prof.pid) if prof else None
        out = subprocess.run([work, work_rounds], capture_output=True, text=True, check=True)
        wall, cpu = map(float, out.stdout.split())
        times[name].append((wall, cpu))
        if prof:
            after = proc_usage(prof.pid)
            usage[name].append((after[0] - before[0], after[1], wall))
            prof.send_signal(signal.SIGINT)
            prof.communicate()
    print("round %d/%d done" % (r + 1, rounds), file=sys.stderr)

bare_wall = statistics.median(t[0] for t in times["bare"])
bare_cpu = statistics.median(t[1] for t in times["bare"])
print("| config | workload CPU s (median) | CPU-time slowdown | wall slowdown | profiler CPU, % of one core | profiler peak RSS MB |")
print("| --- | --- | --- | --- | --- | --- |")
for name in configs:
    if name in unavailable:
        print("| %s | unavailable: %s | | | | |" % (name, " ".join(unavailable[name])[:120]))
        continue
    wall = statistics.median(t[0] for t in times[name])
    cpu = statistics.median(t[1] for t in times[name])
    own = statistics.median(100 * u[0] / u[2] for u in usage[name]) if usage[name] else None
    rss = max(u[1] for u in usage[name]) if usage[name] else None
    print("| %s | %.3f | %+.2f %% | %+.2f %% | %s | %s |" % (
        name, cpu, 100 * (cpu / bare_cpu - 1), 100 * (wall / bare_wall - 1),
        "%.2f" % own if own is not None else "-", "%.1f" % rss if rss is not None else "-"))
print("\n%d interleaved rounds, %d CPUs, bare median %.3f s wall, %.3f s CPU" % (
    rounds, os.cpu_count(), bare_wall, bare_cpu))
shutil.rmtree(tmp, ignore_errors=True)
