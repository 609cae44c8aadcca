#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Steady-state cost of gpuscope's defaults on the GPU machine (issue 14: <= 1 % by default), to
# a resolution the 6-second interleaved rounds of trace_budget.sh could not give: one injected
# process per workload (launch, gpt2, train of trace_workload.py) runs for the whole test while
# the agent (every module, default --gpu-trace-budget 1%) is started and stopped around it:
# off, on, off, on, off (BLOCKS), BLOCK_S seconds each. Each on block is compared with the mean
# of the off blocks on both sides (drift of clocks and temperature cancels); the off/off ratios
# are the noise floor. The agent's first WARM_S seconds after each start (unwind tables and
# symbols of the process's libraries: a one-off burst, reported as agent CPU) are left out of
# the on blocks. Needs $D (default .dev/agent) from tests/device/pack-agent.sh with
# libgpuscope_cupti.so and the workload beside it. Results in $OUT: summary.txt, raw.tar.gz.
# Usage (repository root, as root): tests/device/overhead_long.sh [WORKLOADS...]
set -u
D=${D:-$PWD/.dev/agent}
RET=${OUT:-/tmp/overhead-long}
BLOCK_S=${BLOCK_S:-15}
WARM_S=${WARM_S:-10}
W=$(mktemp -d /tmp/overhead.XXXX)
mkdir -p "$RET"
exec > >(tee "$RET/log.txt") 2>&1
. "$(dirname "$0")/lib.sh"
mono() { python3 -c 'import time; print("%.6f" % time.monotonic())'; }
nvidia-smi -L; uname -r
cupti_dir=$(cupti_lib_dir)
export GPUSCOPE_CUPTI_LIBRARY=$D/libgpuscope_cupti.so
start_server
BLOCKS=${BLOCKS:-5}
log() { echo "$(date +%T) $*"; }
for wl in ${@:-launch gpt2 train}; do
	rm -f "$W/stop"
	log "$wl: starting"
	CUDA_INJECTION64_PATH=$D/libgpuscope_cupti.so LD_LIBRARY_PATH="$cupti_dir" STOP_FILE=$W/stop \
		timeout 400 python3 tests/device/trace_workload.py "$wl" > "$W/$wl.jsonl" 2> "$W/$wl.err" &
	wpid=$!
	for _ in $(seq 1200); do grep -q '^started' "$W/$wl.err" && break; sleep 0.1; done
	log "$wl: phase started"
	marks=$W/$wl.marks
	for b in $(seq "$BLOCKS"); do
		if [ $((b % 2)) -eq 0 ]; then
			ours "$D/bin/gpuscope-agent" run --server "$url" --push-interval 10s \
				--metrics-listen 127.0.0.1:9400 > "$W/agent-$wl-$b.out" 2> "$W/agent-$wl-$b.log" &
			apid=$!
			for _ in $(seq 300); do curl -sf -o /dev/null -m 1 http://127.0.0.1:9400/metrics && break; sleep 0.1; done
			log "$wl: agent up"
			sleep "$WARM_S"
			read -r ut0 st0 < <(awk '{print $14, $15}' /proc/$apid/stat)
			echo "on $(mono)" >> "$marks"
			sleep "$BLOCK_S"
			echo "end $(mono)" >> "$marks"
			read -r ut1 st1 < <(awk '{print $14, $15}' /proc/$apid/stat)
			echo "agent_cpu_ticks $((ut1 + st1 - ut0 - st0)) $BLOCK_S" >> "$marks"
			curl -s -m 20 http://127.0.0.1:9400/metrics > "$W/metrics-$wl-$b.txt"
			log "$wl: stopping the agent"
			kill -TERM $apid; wait $apid
			log "$wl: agent stopped"
			sleep 2
		else
			echo "off $(mono)" >> "$marks"
			sleep "$BLOCK_S"
			echo "end $(mono)" >> "$marks"
		fi
	done
	touch "$W/stop"
	wait $wpid
	log "$wl: done"
	tail -2 "$W/$wl.err"
	python3 tests/device/overhead_analyze.py "$W" "$(getconf CLK_TCK)" > "$RET/summary.txt"
	tar -C "$W" --exclude=store -czf "$RET/raw.tar.gz" .
done
kill -TERM $spid; wait $spid
grep -h 'trace_window\|closed_early\|ringbuf_full\|records_lost' "$W"/metrics-*.txt | grep -v '^#' | grep -v ' 0$' | sort | uniq -c | head -30
cat "$RET/summary.txt"
