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
# the on blocks. Each step also carries the main thread's CPU time (steal and host contention
# stretch wall time but not CPU time); the blocks carry /proc/stat's steal, the agent's BPF run
# time per program (its /metrics with kernel.bpf_stats_enabled=1), and the server's gpu_trace_window intervals put steps inside and outside windows, so
# overhead_analyze.py splits the cost into windows and the always-on rest. Needs $D (default .dev/agent) from tests/device/pack-agent.sh with
# libgpuscope_cupti.so and the workload beside it. Results in $OUT: summary.txt, raw.tar.gz.
# Usage (repository root, as root): tests/device/overhead_long.sh [WORKLOADS...]
set -u
D=${D:-$PWD/.dev/agent}
RET=${OUT:-/tmp/overhead-long}
BLOCK_S=${BLOCK_S:-15}
ON_S=${ON_S:-$BLOCK_S}	# on blocks may be longer: windows come every 5-60 s
WARM_S=${WARM_S:-10}
W=$(mktemp -d /tmp/overhead.XXXX)
mkdir -p "$RET"
exec > >(tee "$RET/log.txt") 2>&1
. "$(dirname "$0")/lib.sh"
mono() { python3 -c 'import time; print("%.6f" % time.monotonic())'; }
# a mark: its kind, the monotonic time, and /proc/stat's all-CPU line (steal is the 8th value)
mark() { echo "$1 $(mono) $(head -1 /proc/stat | cut -d' ' -f3-)" >> "$marks"; }
sysctl -qw kernel.bpf_stats_enabled=1 2>/dev/null || echo 1 > /proc/sys/kernel/bpf_stats_enabled
nvidia-smi -L; uname -r
cupti_dir=$(cupti_lib_dir)
export GPUSCOPE_CUPTI_LIBRARY=$D/libgpuscope_cupti.so
start_server
BLOCKS=${BLOCKS:-7}
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
			curl -s -m 20 http://127.0.0.1:9400/metrics > "$W/metrics-$wl-$b-start.txt"
			mark on
			sleep "$ON_S"
			mark end
			read -r ut1 st1 < <(awk '{print $14, $15}' /proc/$apid/stat)
			echo "agent_cpu_ticks $((ut1 + st1 - ut0 - st0)) $ON_S" >> "$marks"
			curl -s -m 20 http://127.0.0.1:9400/metrics > "$W/metrics-$wl-$b.txt"
			log "$wl: stopping the agent"
			kill -TERM $apid; wait $apid
			log "$wl: agent stopped"
			sleep 2
		else
			mark off
			sleep "$BLOCK_S"
			mark end
		fi
	done
	touch "$W/stop"
	wait $wpid
	log "$wl: done"
	wpy=$(python3 -c 'import json,sys; print([json.loads(l) for l in open(sys.argv[1]) if "summary" in l][0]["pid"])' "$W/$wl.jsonl")
	curl -s "$url/api/v1/intervals?since=1h&limit=100000&kind=gpu_trace_window&selector=%7Bpid%3D%22$wpy%22%7D" > "$W/$wl.windows.json"
	tail -2 "$W/$wl.err"
	python3 tests/device/overhead_analyze.py "$W" "$(getconf CLK_TCK)" > "$RET/summary.txt"
	tar -C "$W" --exclude=store -czf "$RET/raw.tar.gz" .
done
kill -TERM $spid; wait $spid
grep -h 'trace_window\|closed_early\|ringbuf_full\|records_lost' "$W"/metrics-*.txt | grep -v '^#' | grep -v ' 0$' | sort | uniq -c | head -30
cat "$RET/summary.txt"
