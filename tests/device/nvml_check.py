#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
# Checks what `gpuscope-agent nvml-record --points` saw on a real GPU against the workload's
# schedule (nvml_workload.py) and against `nvidia-smi dmon` over the same window; prints the
# achieved interval of every metric. Stdlib only.
# Usage: nvml_check.py POINTS.csv MAIN.json SECOND.json DMON.txt
import collections
import datetime
import gzip
import json
import statistics
import sys

points_path, main_path, second_path, dmon_path = sys.argv[1:5]
opener = gzip.open if points_path.endswith(".gz") else open
series = collections.defaultdict(list)
with opener(points_path, "rt") as f:
    for line in f:
        t, name, labels, v = line.rstrip("\n").split(",")
        series[(name, labels)].append((int(t), float(v)))
main = json.load(open(main_path))
second = json.load(open(second_path))
t0 = main["t0_ns"]
failures = []


def check(ok, what):
    print(("PASS " if ok else "FAIL ") + what)
    if not ok:
        failures.append(what)


print("== achieved interval of every series (ms between successive points)")
print(f"{'metric':34} {'labels':44} {'n':>6} {'median':>8} {'mean':>8} {'min':>7} {'max':>8}")
for (name, labels), pts in sorted(series.items()):
    ts = sorted(t for t, _ in pts)
    gaps = [(b - a) / 1e6 for a, b in zip(ts, ts[1:]) if b > a]
    if not gaps:
        print(f"{name:34} {labels[:44]:44} {len(ts):6}")
        continue
    print(f"{name:34} {labels[:44]:44} {len(ts):6} {statistics.median(gaps):8.2f} "
          f"{statistics.mean(gaps):8.2f} {min(gaps):7.2f} {max(gaps):8.2f}")


def gpu_series(name):
    for (n, labels), pts in series.items():
        if n == name and "pid=" not in labels:
            return sorted(pts)
    return []


util = gpu_series("gpu_utilization")
power = gpu_series("gpu_power_watts")
mem = gpu_series("gpu_memory_used_bytes")
sm = gpu_series("gpu_sm_active")


def mean_in(pts, a, b):
    v = [x for t, x in pts if t0 + a * 1e9 <= t < t0 + b * 1e9]
    return (sum(v) / len(v), len(v)) if v else (float("nan"), 0)


print("\n== the gaps are where the workload left them (edges trimmed by 0.3 s)")
for what, a, b, lo, hi in [("idle 0-3 s", 0.3, 2.7, 0, 5), ("busy 3-6 s", 3.3, 5.7, 90, 100),
                           ("idle 14.3-15 s", 14.4, 15.0, 0, 5)]:
    m, n = mean_in(util, a, b)
    check(n > 0 and lo <= m <= hi, f"gpu_utilization {what}: mean {m:.1f}% over {n} samples")
    m2, n2 = mean_in(sm, a, b)
    print(f"     gpu_sm_active {what}: mean {m2:.3f} over {n2} points")
# Bursts: 0.4 s busy, 0.6 s idle; the driver's utilization samples (~200 ms) and the 10 ms
# GPM windows must both show five separate busy stretches.
for name, pts, thr in [("gpu_utilization", util, 50), ("gpu_sm_active", sm, 0.3)]:
    inside = [(t, x) for t, x in pts if t0 + 5.9e9 <= t < t0 + 10.9e9]
    runs, prev = 0, False
    for _, x in inside:
        on = x >= thr
        runs += on and not prev
        prev = on
    check(runs == 5, f"{name}: {runs} busy stretches in the 5-burst phase (want 5)")
# Idle points inside the bursts' gaps: the GPM series at 10 ms must dip to ~0 in each gap.
dips = 0
for k in range(5):
    m, n = mean_in(sm, 6.6 + k, 6.9 + k)
    dips += n > 0 and m < 0.05
check(dips == 5, f"gpu_sm_active is ~0 inside {dips}/5 burst gaps")
m_busy, _ = mean_in(mem, 3.5, 5.5)
m_idle, _ = mean_in(mem, 0.5, 2.5)
check(m_busy - m_idle > 15 * 2**30,
      f"gpu_memory_used_bytes rose by {(m_busy - m_idle) / 2**30:.1f} GiB while 20 GiB extra "
      "was held")
pm_busy, _ = mean_in(power, 3.3, 5.7)
pm_idle, _ = mean_in(power, 0.3, 2.7)
check(pm_busy > pm_idle + 50, f"gpu_power_watts busy {pm_busy:.0f} W vs idle {pm_idle:.0f} W")

print("\n== two processes sharing the GPU (11-14 s): each sample labelled with its own pid")
procs = {}
for (n, labels), pts in series.items():
    if n == "gpu_process_sm_util":
        pid = dict(kv.split("=", 1) for kv in labels.split(";")).get("pid")
        procs[pid] = [(t, x) for t, x in pts if t0 + 11e9 <= t < t0 + 14.5e9]
for role in (main, second):
    pts = procs.get(str(role["pid"]), [])
    m = sum(x for _, x in pts) / len(pts) if pts else float("nan")
    check(len(pts) > 0, f"pid {role['pid']} ({role['role']}): {len(pts)} samples, mean SM "
          f"util {m:.1f}%")

print("\n== nvidia-smi dmon over the same window (1 s rows) vs the mean of our points")
rows = []
cols = None
for line in open(dmon_path):
    if line.startswith("#"):
        if cols is None:
            cols = line[1:].split()
        continue
    f = line.split()
    if cols and len(f) == len(cols):
        rows.append(dict(zip(cols, f)))
diffs_u, diffs_p = [], []
print(f"{'time':>19} {'dmon sm%':>9} {'ours util%':>11} {'dmon W':>7} {'ours W':>7}")
for r in rows:
    try:
        ts = datetime.datetime.strptime(r["Date"] + " " + r["Time"], "%Y%m%d %H:%M:%S")
    except (KeyError, ValueError):
        continue
    end = ts.replace(tzinfo=datetime.timezone.utc).timestamp() * 1e9
    sel_u = [x for t, x in util if end - 1e9 <= t < end]
    sel_p = [x for t, x in power if end - 1e9 <= t < end]
    if not sel_u or not sel_p or r.get("sm", "-") == "-":
        continue
    ou, op = sum(sel_u) / len(sel_u), sum(sel_p) / len(sel_p)
    du, dp = float(r["sm"]), float(r["pwr"])
    diffs_u.append(abs(ou - du))
    diffs_p.append(abs(op - dp))
    print(f"{r['Date'] + ' ' + r['Time']:>19} {du:9.0f} {ou:11.1f} {dp:7.0f} {op:7.1f}")
if diffs_u:
    print(f"mean |ours - dmon|: utilization {statistics.mean(diffs_u):.1f} points, power "
          f"{statistics.mean(diffs_p):.1f} W over {len(diffs_u)} seconds")
    check(statistics.median(diffs_u) < 25 and statistics.median(diffs_p) < 60,
          "per-second means agree with nvidia-smi dmon (median diff < 25 points, < 60 W)")
else:
    check(False, "no dmon rows overlapped the recording")
print(f"\n{len(failures)} check(s) failed")
sys.exit(1 if failures else 0)
