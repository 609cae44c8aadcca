#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The GPU-idle estimator on the GPU machine (issue 31): the same training job
# (tests/device/idle_workload.py: start-up, a Python CPU phase with the GPU idle in every step,
# stalls, a change half-way) run twice in a row, once under the agent's defaults (1 % budget:
# windows, GPM between them) and once under continuous tracing (--gpu-trace-budget 100%: the
# truth); each run's GPU-idle answer over the job's whole life (start-up included) is compared:
# the shares of its Python functions and of the top-5 functions, and the total GPU-idle samples.
# Needs $D (default .dev/agent) from tests/device/pack-agent.sh with libgpuscope_cupti.so.
# MODES="default" or "continuous" runs one of the two (the 5-minute benchmark needs a device call
# for each): each run's answer is kept as answers-MODE.json, and tests/device/idle_estimate.py
# compares the two files wherever they were made.
# Results in $OUT: summary.txt, answers-default.json, answers-continuous.json.
# PROFILE_S=N (default mode only): the agent's own CPU profiled meanwhile for N s from 60 s after
# the job started (a second agent's `record --pid`, 499 Hz) with /metrics scraped at both ends:
# profile-agent.txt (top functions), agent.folded, selftable.txt (CPU per activity; issue 33).
# Usage (repository root, as root): tests/device/idle_estimate.sh [RUN_S=150]
set -u
D=${D:-$PWD/.dev/agent}
RET=${OUT:-/tmp/idle-estimate}
run_s=${1:-150}
W=$(mktemp -d /tmp/idle.XXXX)
mkdir -p "$RET"
. "$(dirname "$0")/lib.sh"
nvidia-smi -L
cupti_dir=$(cupti_lib_dir)
export GPUSCOPE_CUPTI_LIBRARY=$D/libgpuscope_cupti.so
start_server
echo "server $url"
: > "$W/runs"
for mode in ${MODES:-default continuous}; do
	extra=
	[ $mode = continuous ] && extra="--gpu-trace-budget 100%"
	[ -n "${PROFILE_S:-}" ] && [ $mode = default ] && extra="--bpf-stats"
	ours "$D/bin/gpuscope-agent" run --server "$url" --node "$mode" --push-interval 2s \
		--metrics-listen 127.0.0.1:9400 $extra > "$W/agent-$mode.out" 2> "$W/agent-$mode.log" &
	apid=$!
	wait_agent_metrics $apid 9400 || { echo "agent $mode did not start"; tail "$W/agent-$mode.log"; exit 1; }
	sleep 2
	t_launch=$(date +%s.%N)
	if [ -n "${PROFILE_S:-}" ] && [ $mode = default ]; then
		(sleep 60
		 curl -s http://127.0.0.1:9400/metrics > "$W/self-0.txt"
		 ( ours "$D/bin/gpuscope-agent" record --pid $apid -F 499 -d "$PROFILE_S" \
			-f "$RET/agent.folded" --top 60 > "$RET/profile-agent.txt" 2>&1 )
		 curl -s http://127.0.0.1:9400/metrics > "$W/self-1.txt"
		 python3 bench/agent_self/selftable.py --files "$W/self-0.txt" "$W/self-1.txt" "$PROFILE_S" \
			> "$RET/selftable.txt" 2>&1) &
	fi
	CUDA_INJECTION64_PATH=$D/libgpuscope_cupti.so LD_LIBRARY_PATH="$cupti_dir" RUN_S=$run_s \
		python3 tests/device/idle_workload.py 2> "$W/$mode.err"
	t_end=$(date +%s.%N)
	cat "$W/$mode.err" | grep -E '^(started|ended)'
	pid=$(awk '/^started/ {print $3}' "$W/$mode.err")
	echo "$mode $pid $t_launch $t_end" >> "$W/runs"
	sleep 5	# the last push
	curl -s http://127.0.0.1:9400/metrics | grep -E 'cupti_window|windows_(total|refused)' > "$W/metrics-$mode.txt"
	kill -INT $apid; wait $apid
	echo "$mode: pid $pid, $(awk '{printf "%.0f s", $4 - $3}' <(tail -1 "$W/runs"))"
done
python3 - "$url" "$W/runs" "$RET" <<'PY'
import json, sys, urllib.parse, urllib.request
url, runs, ret = sys.argv[1], sys.argv[2], sys.argv[3]
def get(path, **q):
    return json.load(urllib.request.urlopen(url + path + "?" + urllib.parse.urlencode(q), timeout=300))
ans = {}
for line in open(runs):
    mode, pid, t0, t1 = line.split()
    rng = {"from": "%.3f" % float(t0), "to": "%.3f" % float(t1)}
    sel = '{node="%s",pid="%s"}' % (mode, pid)
    top = get("/api/v1/top", gpu_idle="0", limit="2000", selector=sel, **rng)
    allcpu = get("/api/v1/top", limit="1", selector=sel, **rng)
    fg = get("/api/v1/flamegraph", gpu_idle="0", selector=sel, **rng)
    ans[mode] = {"top": top, "all_total": allcpu["total"], "sources": fg.get("gpu_sources"),
                 "span_s": float(t1) - float(t0)}
for m, a in ans.items():
    json.dump({m: a}, open("%s/answers-%s.json" % (ret, m), "w"))
PY
python3 "$(dirname "$0")/idle_estimate.py" "$RET"/answers-*.json | tee "$RET/summary.txt"
for m in ${MODES:-default continuous}; do echo "== $m"; cat "$W/metrics-$m.txt"; done >> "$RET/summary.txt"
kill $spid 2>/dev/null
