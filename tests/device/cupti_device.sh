#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# CUPTI path on the GPU machine: correctness against torch.profiler and the benchmark of issue #6.
# Expects, in .dev/cupti/ (built on the CI machine, `make`): libgpuscope_cupti.so, cupti_dump
# (the agent's cupti module, static), cupti_launch_bench + libgpuscope_cupti_fake.so (launch
# probe cost) and optionally libcupti.so.13 (used when pip's is absent).
# Rounds, each in a rotating order: A = bare then torch.profiler phases in one process,
# C = library injected without agent (CUPTI's own cost), B = library + agent (cupti_dump).
# Results in $OUT (the device tool's return folder; /tmp/cupti-device by default): summary.txt and
# results.json (tests/device/cupti_analyze.py), log.txt, and all.tar.gz with every raw file.
# Usage (repository root, as root): tests/device/cupti_device.sh [ROUNDS]
set -u
rounds=${1:-3}
D=$PWD/.dev/cupti
RET=${OUT:-/tmp/cupti-device}
OUT=$(mktemp -d /tmp/cupti-work.XXXX)
mkdir -p "$RET"
exec > >(tee "$RET/log.txt") 2>&1

echo "== machine"
nvidia-smi -L 2>&1 | head -4
uname -r
python3 -c "import torch, sys; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'python', sys.version.split()[0])"
cupti_dir=$(python3 - <<'EOF'
import glob, os
try:
    import nvidia
    paths = [p for d in nvidia.__path__ for p in glob.glob(d + "/**/libcupti.so*", recursive=True)]
except Exception:
    paths = []
print(os.path.dirname(sorted(paths)[0]) if paths else "")
EOF
)
echo "libcupti (pip): ${cupti_dir:-none; using the carried copy next to the library}"
inj=(env CUDA_INJECTION64_PATH="$D/libgpuscope_cupti.so"
     LD_LIBRARY_PATH="${cupti_dir}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}")
export PYTHONPERFSUPPORT=1 OUT_DIR="$OUT"
W=tests/device/cupti_workload.py
phases=(plain:train plain:tiny plain:graph)
phases_a=(plain:train plain:tiny plain:graph prof:train prof:tiny prof:graph)

run_a() { timeout 240 python3 $W "${phases_a[@]}" > "$OUT/A$1.jsonl" || echo "A$1 failed: $?"; }
run_c() { timeout 120 "${inj[@]}" GPUSCOPE_CUPTI_DEBUG=1 python3 $W "${phases[@]}" \
		> "$OUT/C$1.jsonl" 2> "$OUT/C$1.err" || echo "C$1 failed: $?"; }
run_b() {
	local extra=()
	[ "$1" = "$rounds" ] && extra=(coexist)
	mkdir -p "$OUT/dump$1"
	"$D/cupti_dump" "$OUT/dump$1" > "$OUT/dump$1/log.txt" 2>&1 &
	local dpid=$!
	for _ in $(seq 100); do grep -q running "$OUT/dump$1/log.txt" && break; sleep 0.05; done
	timeout 120 "${inj[@]}" GPUSCOPE_CUPTI_DEBUG=1 python3 $W "${phases[@]}" "${extra[@]}" \
		> "$OUT/B$1.jsonl" 2> "$OUT/B$1.err" || echo "B$1 failed: $?"
	sleep 1.5	# the agent drains the last buffers
	kill -TERM $dpid; wait $dpid
	cat "$OUT/dump$1/log.txt"
}

echo "== launch probe cost (bench/cupti/launch_cost.sh, no GPU involved)"
CUPTI_BIN=$D bench/cupti/launch_cost.sh 200000 5 2>&1 | tee "$OUT/launch_cost.txt"

for r in $(seq "$rounds"); do
	echo "== round $r"
	case $((r % 3)) in
	1) run_a $r; run_c $r; run_b $r ;;
	2) run_b $r; run_a $r; run_c $r ;;
	0) run_c $r; run_b $r; run_a $r ;;
	esac
done
tail -3 "$OUT"/B*.err "$OUT"/C*.err
python3 tests/device/cupti_analyze.py "$OUT" "$rounds" | tee "$RET/summary.txt"
cp "$OUT/results.json" "$RET/" 2>/dev/null
tar -C "$OUT" -czf "$RET/all.tar.gz" .
ls -la "$RET"
