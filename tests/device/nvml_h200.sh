#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# On the lent GPU machine (not CI): records a real NVML trace with `gpuscope-agent nvml-record`
# while a PyTorch workload runs busy stretches, idle gaps and two processes sharing the GPU;
# checks the recorded series against the schedule and `nvidia-smi dmon`; prints the achieved
# interval of every metric; measures the poller's CPU cost per GPU at default rates.
# Usage: tests/device/nvml_h200.sh DIR   (DIR holds gpuscope-agent, lib/, and gets the outputs)
set -u
here=$(cd "$(dirname "$0")" && pwd)
bin=$(cd "${1:?usage: nvml_h200.sh DIR}" && pwd)
out=${OUT:-$bin/out}
mkdir -p "$out"
work=$(mktemp -d)
export LD_LIBRARY_PATH="$bin/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export TZ=UTC
agent="$bin/gpuscope-agent"
lib=()
if ! ldconfig -p | grep -q 'libnvidia-ml.so.1 '; then
	for p in /usr/local/nvidia/lib64/libnvidia-ml.so.1 /usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1; do
		[ -e "$p" ] && lib=(--nvml-library "$p") && break
	done
fi
nvidia-smi --query-gpu=index,name,uuid,driver_version,memory.total --format=csv
"$agent" nvml-record --help >/dev/null || { echo "agent does not run here"; ldd "$agent"; exit 1; }

echo "== workload: starting two PyTorch processes (CUDA init)"
python3 "$here/nvml_workload.py" main "$work/r1" "$work/go" "$work/main.json" &
w1=$!
python3 "$here/nvml_workload.py" second "$work/r2" "$work/go" "$work/second.json" &
w2=$!
for _ in $(seq 600); do [ -e "$work/r1" ] && [ -e "$work/r2" ] && break; sleep 0.1; done
[ -e "$work/r1" ] && [ -e "$work/r2" ] || { echo "workload did not start"; exit 1; }

echo "== recording 16 s: idle 0-3, busy 3-6, 5 bursts 6-11, shared 11-14, idle 14-16"
nvidia-smi dmon -s pu -d 1 -o DT >"$out/dmon.txt" 2>&1 &
dmon=$!
"$agent" nvml-record "${lib[@]}" --out "$work/h200.trace" --points "$work/points.csv" \
	--metrics "$out/metrics.txt" --duration 16s 2>"$work/record.log" &
rec=$!
sleep 0.5
python3 -c 'import time; print(time.time() + 0.5)' >"$work/go.tmp" && mv "$work/go.tmp" "$work/go"
wait $rec
echo "record exit $?"
kill $dmon 2>/dev/null
wait $w1 $w2
cat "$work/record.log"
cp "$work/main.json" "$work/second.json" "$out/"

echo "== checks"
python3 "$here/nvml_check.py" "$work/points.csv" "$work/main.json" "$work/second.json" \
	"$out/dmon.txt" | tee "$out/check.txt"

echo "== poller CPU cost, GPU idle, no trace: defaults, then memory+GPM at 100 ms"
{
	"$agent" nvml-record "${lib[@]}" --no-record --duration 10s
	"$agent" nvml-record "${lib[@]}" --no-record --duration 5s \
		--nvml-memory-interval 100ms --nvml-gpm-interval 100ms
	"$agent" nvml-record "${lib[@]}" --no-record --duration 5s --nvml-gpm-interval 0 \
		--nvml-memory-interval 0 --nvml-process-interval 0 --nvml-slow-interval 0
} 2>&1 | tee "$out/bench.txt"

gzip -9 -c "$work/h200.trace" >"$out/h200.trace.gz"
gzip -9 -c "$work/points.csv" >"$out/points.csv.gz"
ls -la "$out"
rm -rf "$work"
