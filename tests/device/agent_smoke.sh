#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Does the packed agent start and profile on the GPU machine's kernel? (A 6.18 kernel refused the
# sched program once: the agent died at every start.) Runs the agent with every module for
# SECONDS against a PyTorch training loop (trace_workload.py), then prints the kernel, the agent's
# log, its BPF counters and what reached the server. Exit 1 when the agent died or sent nothing.
# Expects .dev/agent (tests/device/pack-agent.sh, with libgpuscope_cupti.so).
# Usage (repository root): tests/device/agent_smoke.sh [SECONDS]
# Not run yet on the GPU machine (written when the device time was spent).
set -u
D=$PWD/.dev/agent
W=$(mktemp -d /tmp/agent-smoke.XXXX)
R=${OUT:-/tmp/agent-smoke}
mkdir -p "$R"
. tests/device/lib.sh
secs=${1:-20}
uname -r
start_server
echo "server $url"
cdir=$(cupti_lib_dir)
ours "$D/bin/gpuscope-agent" run --server "$url" --push-interval 5s \
	--metrics-listen 127.0.0.1:9400 > "$W/agent.out" 2> "$W/agent.log" &
apid=$!
wait_agent_metrics $apid 9400
PHASE_S=$secs CUDA_INJECTION64_PATH=$D/libgpuscope_cupti.so LD_LIBRARY_PATH=$cdir \
	timeout $((secs + 60)) python3 tests/device/trace_workload.py train gpt2 2>&1 |
	grep summary | cut -c1-200
rc=0
kill -0 $apid 2>/dev/null || { echo "FAIL: the agent died"; rc=1; }
curl -sf -m 5 http://127.0.0.1:9400/metrics > "$R/metrics.txt"
kill -TERM $apid 2>/dev/null; wait $apid
echo "== agent log (tail)"; tail -25 "$W/agent.log"
echo "== metrics"
grep -E '^gpuscope_agent_(bpf|sched|samples|records|push|cuda|cupti)' "$R/metrics.txt" | grep -v ' 0$' | head -40
sleep 1
n=$(curl -sf -m 10 "$url/api/v1/processes?limit=5" | head -c 1500)
echo "== server: $n"
cp "$W/agent.log" "$R/"
kill $spid 2>/dev/null
exit $rc
