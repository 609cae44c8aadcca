#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# What one trace window costs a launch-bound process, step by step (issue 14), on the GPU machine:
# the launch loop runs ~38 s with the library injected; the agent starts ~12 s in (steps before
# it are the process's own bare reference) with a 1 s window every 8 s, closed by cuptiFinalize.
# Steps (CLOCK_MONOTONIC) and the library's window lines go straight to $OUT; analyse with
# tests/device/trace_analyze.py --transient DIR. Needs $D as for trace_budget.sh.
set -u
D=${D:-$PWD/.dev/cupti}
R=${OUT:-/tmp/trace-transient}
mkdir -p "$R"
cupti_dir=$(python3 -c "import glob,os,nvidia; p=[q for d in nvidia.__path__ for q in glob.glob(d+'/**/libcupti.so*', recursive=True)]; print(os.path.dirname(sorted(p)[0]) if p else '')" 2>/dev/null)
export GPUSCOPE_CUPTI_LIBRARY=$D/libgpuscope_cupti.so
(LD_LIBRARY_PATH=$D/lib exec "$D/bin/gpuscope-server" --data /tmp/tt-store --listen 127.0.0.1:0 > /tmp/tt-s.out 2>&1) &
spid=$!
PHASE_S=${PHASE_S:-38} CUDA_INJECTION64_PATH=$D/libgpuscope_cupti.so LD_LIBRARY_PATH="$cupti_dir" \
	GPUSCOPE_CUPTI_DEBUG=1 timeout 75 python3 "$D/trace_workload.py" launch > "$R/steps.jsonl" 2> "$R/lib.err" &
wp=$!
sleep "${AGENT_AFTER:-12}"
url=$(grep -o 'http://[0-9.:]*' /tmp/tt-s.out | head -1)
(LD_LIBRARY_PATH=$D/lib exec "$D/bin/gpuscope-agent" run --server "$url" --push-interval 1s \
	--metrics-listen 127.0.0.1:9400 --gpu-trace-period 8s --gpu-trace-window 1s 2> "$R/agent.log") &
apid=$!
wait $wp
curl -s http://127.0.0.1:9400/metrics | grep -E "^gpuscope_(cupti|agent_cpu)" > "$R/metrics.txt"
kill -TERM $apid $spid; wait
grep -c . "$R/steps.jsonl"; grep window "$R/lib.err" | head -20
