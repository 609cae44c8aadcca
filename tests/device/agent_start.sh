#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The agent's start on the GPU machine (issue #33 item 4): bench/start/run.py (every module,
# idle and beside two CPU-bound programs; first CPU sample, each module's start, the start's
# CPU), then cuda_probe's uprobe_multi links on the real libcuda: an agent with
# --cuda-launch-probes beside a PyTorch training loop, its probes and links from /metrics, the
# driver calls it counted, and how long its stop took. Expects .dev/agent
# (tests/device/pack-agent.sh); BEFORE=PATH/gpuscope-agent adds an older agent to the benchmark,
# interleaved (its libraries from .dev/agent/lib).
# Usage (repository root, as root): [BEFORE=...] tests/device/agent_start.sh [ROUNDS]
set -u
D=$PWD/.dev/agent
W=$(mktemp -d /tmp/agent-start.XXXX)
R=${OUT:-/tmp/agent-start}
mkdir -p "$R"
. tests/device/lib.sh
uname -r; nproc
# the agent's libraries for the agents only: the machine's curl does not run with them
LD_LIBRARY_PATH=$D/lib python3 bench/start/run.py "${1:-3}" ${BEFORE:-} "$D/bin/gpuscope-agent" |
	tee "$R/start.txt"

cdir=$(cupti_lib_dir)
PHASE_S=40 LD_LIBRARY_PATH=$cdir timeout 120 python3 tests/device/trace_workload.py train \
	> "$W/work.out" 2>&1 &
wpid=$!
sleep 15	# import torch, libcuda mapped
ours "$D/bin/gpuscope-agent" run --server http://127.0.0.1:9 --metrics-listen 127.0.0.1:9401 \
	--modules cuda_probe --cuda-launch-probes --pid $wpid --stop-grace 0s \
	> "$W/agent.out" 2> "$W/agent.log" &
apid=$!
wait_agent_metrics $apid 9401
for _ in $(seq 100); do grep -q "probes attached" "$W/agent.log" && break; sleep 0.1; done
sleep 5
curl -sf -m 5 http://127.0.0.1:9401/metrics > "$R/metrics.txt"
t0=$(date +%s.%N)
kill -TERM $apid; wait $apid
echo "agent stopped in $(python3 -c "print(round($(date +%s.%N) - $t0, 3))") s" | tee "$R/stop.txt"
kill $wpid 2>/dev/null; wait $wpid 2>/dev/null
grep -E "cuda:" "$W/agent.log" | tee "$R/cuda.txt"
grep -E '^gpuscope_agent_cuda_(probe_links|probes_attached|functions_absent|attach_failures_total)' \
	"$R/metrics.txt" | tee -a "$R/cuda.txt"
echo "driver calls counted: $(awk '/^gpuscope_agent_cuda_calls_total/ { n += $2 } END { print n + 0 }' "$R/metrics.txt")" |
	tee -a "$R/cuda.txt"
cp "$W/agent.log" "$R/"
