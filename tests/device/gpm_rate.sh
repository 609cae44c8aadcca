#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The finest GPU busy/idle resolution between trace windows (issue 14): NVML GPM's SM-active
# share polled at 10, 20, 50 and 100 ms (`gpuscope-agent nvml-record --nvml-gpm-interval`) while
# a PyTorch process alternates 100 ms of matmuls with 100 ms idle; per interval: achieved
# period, how many points repeat the one before (the driver's own refresh), how well the points
# follow the schedule (mean SM-active in busy vs idle stretches), the poller's CPU per second.
# Needs .dev/agent from tests/device/pack-agent.sh. Usage: tests/device/gpm_rate.sh [SECONDS]
set -u
D=${D:-$PWD/.dev/agent}
RET=${OUT:-/tmp/gpm-rate}
secs=${1:-8}
W=$(mktemp -d /tmp/gpm.XXXX)
mkdir -p "$RET"
export LD_LIBRARY_PATH=$D/lib
lib=()
for p in /usr/local/nvidia/lib64/libnvidia-ml.so.1 /usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1; do
	[ -e "$p" ] && lib=(--nvml-library "$p") && break
done
cat > "$W/work.py" <<'PY'
import json, sys, time, torch
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
torch.cuda.synchronize()
print("ready", flush=True)
end = time.time() + float(sys.argv[1]); sched = []
while time.time() < end:
    t0 = time.time_ns()
    while time.time_ns() - t0 < 100_000_000:
        for _ in range(4):
            a @ a
        torch.cuda.synchronize()
    t1 = time.time_ns(); time.sleep(0.1); sched.append((t0, t1, time.time_ns()))
json.dump(sched, open(sys.argv[2], "w"))
PY
for iv in 10ms 20ms 50ms 100ms; do
	python3 "$W/work.py" "$secs" "$W/sched-$iv.json" > "$W/work-$iv.out" 2>&1 &
	wp=$!
	for _ in $(seq 300); do grep -q ready "$W/work-$iv.out" && break; sleep 0.1; done
	/usr/bin/time -f "%U %S %e" -o "$W/time-$iv.txt" "$D/bin/gpuscope-agent" nvml-record --no-record \
		--duration "$((secs - 1))s" --points "$W/p-$iv.csv" "${lib[@]}" \
		--nvml-gpm-interval "$iv" --nvml-memory-interval 0 --nvml-slow-interval 0 \
		--nvml-process-interval 0 --nvml-fields-interval 0 > "$W/rec-$iv.log" 2>&1
	wait $wp
done
python3 - "$W" <<'PY' | tee "$RET/summary.txt"
import glob, json, os, statistics, sys
w = sys.argv[1]
print("interval  points  median_period_ms  repeats  sm_active busy / idle  poller CPU ms/s")
for iv in ("10ms", "20ms", "50ms", "100ms"):
    try:
        pts = [l.rstrip().split(",") for l in open(os.path.join(w, "p-%s.csv" % iv))]
    except OSError:
        print(iv, "no points"); continue
    pts = sorted((int(p[0]), float(p[-1])) for p in pts if p[1] == "gpu_sm_active")
    sched = json.load(open(os.path.join(w, "sched-%s.json" % iv)))
    per = [(b[0] - a[0]) / 1e6 for a, b in zip(pts, pts[1:])]
    rep = sum(1 for a, b in zip(pts, pts[1:]) if a[1] == b[1])
    busy, idle = [], []
    for t, v in pts:
        for t0, t1, t2 in sched:
            if t0 <= t < t1: busy.append(v)
            elif t1 <= t < t2: idle.append(v)
    u, s, e = map(float, open(os.path.join(w, "time-%s.txt" % iv)).read().split()[-3:])
    print("%-8s  %6d  %16.2f  %7d  %10.3f / %.3f  %14.2f" % (
        iv, len(pts), statistics.median(per) if per else 0, rep,
        statistics.mean(busy) if busy else -1, statistics.mean(idle) if idle else -1,
        1000 * (u + s) / e))
PY
tail -3 "$W"/rec-10ms.log
