#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# gpuscope's default cost against a control that lives through the same host noise (issue 14:
# <= 1 % by default). On the lent GPU machine the speed of one process drifts +-20-40 % from
# block to block (overhead_long.sh: off/off ratios 0.57-1.45), so a 1 % cost cannot be read from
# one process's throughput over time. Here two identical workload processes, A and B, run side
# by side for the whole test, on disjoint CPUs (A: CPUS_A, B: CPUS_B), both with the CUPTI
# library injected; the agent (every module, default --gpu-trace-budget 1%) profiles one of
# them (--pid) at a time: blocks off, A, B, off, B, A, off (PATTERN). The host's drift moves
# both processes together and cancels in the ratio q = rate(A) / rate(B): with the agent on A,
# q = q0 (1 - c); on B, q = q0 / (1 - c); off, q0. The A/B swap cancels a difference between the
# two processes (their CPUs, who wins the GPU); the off blocks give the noise floor. The GPU is
# shared by time slicing: a slower A leaves B a little more of it, which can only make c look
# larger. The agent's first WARM_S seconds after each start (the process's unwind tables and
# symbols: a one-off burst) are left out of its block. overhead_paired.py reads the result.
# Needs $D (default .dev/agent, from tests/device/pack-agent.sh) with libgpuscope_cupti.so
# beside the binaries. Results in $OUT: summary.txt, raw.tar.gz.
# gpt2's step is a whole 64-token sequence (~0.6 s with two processes on the GPU): give it
# OFF_S=15 or more, or its off blocks hold too few steps (2026-12-07: 7-9 steps in 6 s, off/off
# noise 19-36 %).
# Usage (repository root, as root): tests/device/overhead_paired.sh [WORKLOADS...]
#   (trace_workload.py's phases: launch gpt2 train graph, default: launch gpt2 train; AGENT_ARGS: more agent options)
set -u
D=${D:-$PWD/.dev/agent}
RET=${OUT:-/tmp/overhead-paired}
ON_S=${ON_S:-35}
OFF_S=${OFF_S:-10}
WARM_S=${WARM_S:-10}
PATTERN=${PATTERN:-oABoBAo}
ncpu=$(nproc)
half=$(((ncpu - 4) / 2))	# 4 CPUs left to the agent, the server and the shell
[ "$half" -ge 1 ] || half=1
CPUS_A=${CPUS_A:-0-$((half - 1))}
CPUS_B=${CPUS_B:-$half-$((2 * half - 1))}
W=$(mktemp -d /tmp/overhead-paired.XXXX)
mkdir -p "$RET"
exec > >(tee "$RET/log.txt") 2>&1
. "$(dirname "$0")/lib.sh"
mono() { python3 -c 'import time; print("%.6f" % time.monotonic())'; }
log() { echo "$(date +%T) $*"; }
nvidia-smi -L 2>/dev/null; uname -r; echo "cpus $ncpu: A $CPUS_A, B $CPUS_B; pattern $PATTERN"
sysctl -qw kernel.bpf_stats_enabled=1 2>/dev/null || echo 1 > /proc/sys/kernel/bpf_stats_enabled
cupti_dir=$(cupti_lib_dir)
export GPUSCOPE_CUPTI_LIBRARY=$D/libgpuscope_cupti.so
start_server
for wl in ${@:-launch gpt2 train}; do
	rm -f "$W/stop"
	marks=$W/$wl.marks
	: > "$marks"
	jobs_=()
	for p in A B; do
		cpus=$CPUS_A
		[ $p = B ] && cpus=$CPUS_B
		CUDA_INJECTION64_PATH=$D/libgpuscope_cupti.so LD_LIBRARY_PATH="$cupti_dir" \
			STOP_FILE=$W/stop timeout 900 taskset -c "$cpus" \
			python3 tests/device/trace_workload.py "$wl" > "$W/$wl.$p.jsonl" 2> "$W/$wl.$p.err" &
		jobs_+=($!)
	done
	for p in A B; do	# the Python process's pid, from its "started NAME T PID" line
		for _ in $(seq 1800); do grep -q '^started' "$W/$wl.$p.err" && break; sleep 0.1; done
		eval "wpid_$p=$(awk '/^started/ {print $4}' "$W/$wl.$p.err")"
	done
	if [ -z "$wpid_A" ] || [ -z "$wpid_B" ]; then
		log "$wl: a workload did not start"; tail -5 "$W/$wl.A.err" "$W/$wl.B.err"
		touch "$W/stop"; wait "${jobs_[@]}"; continue
	fi
	log "$wl: A $wpid_A and B $wpid_B started"
	echo "pids $wpid_A $wpid_B" >> "$marks"
	for ((i = 0; i < ${#PATTERN}; i++)); do
		k=${PATTERN:i:1}
		if [ "$k" = o ]; then
			echo "off $(mono)" >> "$marks"
			sleep "$OFF_S"
			echo "end $(mono)" >> "$marks"
			continue
		fi
		pid=$wpid_A
		[ "$k" = B ] && pid=$wpid_B
		ours "$D/bin/gpuscope-agent" run --server "$url" --push-interval 10s --pid "$pid" \
			--metrics-listen 127.0.0.1:9400 ${AGENT_ARGS:-} > "$W/agent-$wl-$i.out" \
			2> "$W/agent-$wl-$i.log" &
		apid=$!
		wait_agent_metrics $apid 9400
		sleep "$WARM_S"
		if ! kill -0 $apid 2>/dev/null; then	# a dead agent measures nothing: stop here
			wait $apid
			log "$wl: the agent exited ($?) in block $k; its log:"
			tail -n 30 "$W/agent-$wl-$i.log"
			touch "$W/stop"; wait "${jobs_[@]}"
			tar -C "$W" --exclude=store -czf "$RET/raw.tar.gz" .
			exit 1
		fi
		read -r ut0 st0 < <(awk '{print $14, $15}' /proc/$apid/stat)
		echo "on$k $(mono) $pid" >> "$marks"
		sleep "$ON_S"
		echo "end $(mono)" >> "$marks"
		read -r ut1 st1 < <(awk '{print $14, $15}' /proc/$apid/stat)
		echo "agent_cpu_ticks $((ut1 + st1 - ut0 - st0)) $ON_S" >> "$marks"
		curl -s -m 20 http://127.0.0.1:9400/metrics > "$W/metrics-$wl-$i.txt"
		kill -TERM $apid; wait $apid
		log "$wl: block $k done; agent: $(grep -c warning "$W/agent-$wl-$i.log") warnings, last: $(tail -n 1 "$W/agent-$wl-$i.log" | cut -c1-160)"
		sleep 2
	done
	touch "$W/stop"
	wait "${jobs_[@]}"
	for p in A B; do
		pid=$wpid_A
		[ $p = B ] && pid=$wpid_B
		curl -s "$url/api/v1/intervals?since=1h&limit=100000&kind=gpu_trace_window&selector=%7Bpid%3D%22$pid%22%7D" \
			> "$W/$wl.$p.windows.json"
	done
	log "$wl: done"
	python3 tests/device/overhead_paired.py "$W" "$(getconf CLK_TCK)" "$wl" | tee -a "$RET/summary.txt"
	tar -C "$W" --exclude=store -czf "$RET/raw.tar.gz" .
done
kill -TERM "$spid"; wait "$spid"
