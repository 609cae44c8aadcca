#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Where the agent's time goes on the GPU machine, and its steady cost per GPU (issue 33, items 1
# and 2). One training process (idle_workload.py: MLP steps with a Python CPU phase and stalls,
# CUPTI library injected) runs for the whole test; the agent at default settings (every module,
# 99 Hz, strips, NVML at its cadences, 1 % trace budget) plus --bpf-stats runs twice in turn:
# as built (NVML cadences following what changes) and with --nvml-backoff 1 (every source at
# its interval, as before). Each agent is left WARM_S seconds after its /metrics answers (its
# start, the process's unwind tables and symbols), then its /metrics is scraped twice WIN_S
# seconds apart: bench/agent_self/selftable.py prints CPU ms/s and share per activity of the
# agent's threads, BPF run time per program, and the steady CPU in % of a core per GPU; the
# agent's /proc/PID/stat over the same window is printed beside it.
# Needs $D (default .dev/agent, from tests/device/pack-agent.sh) with libgpuscope_cupti.so.
# CFGS (default "default backoff1") picks the agents run in turn; bwwalk is the default with
# every backward call's stack walked (GPUSCOPE_CUPTI_BACKWARD_REUSE_MS=0, as before the re-use
# of a thread's last walked stack): CFGS="default bwwalk" compares on_backward's us/run.
# PROFILE_S=N: after each window, the agent's own CPU profiled for N s by a second agent
# (`record --pid`, 499 Hz): $OUT/profile-CFG.txt (top functions) and agent-CFG.folded.
# Usage (repository root, as root): tests/device/agent_self.sh   (WARM_S=20 WIN_S=60)
# Prints and writes $OUT/summary.txt; the raw scrapes and logs in $OUT/raw.tar.gz.
set -u
D=${D:-$PWD/.dev/agent}
RET=${OUT:-/tmp/agent-self}
WARM_S=${WARM_S:-20}
WIN_S=${WIN_S:-60}
W=$(mktemp -d /tmp/agent-self.XXXX)
mkdir -p "$RET"
. "$(dirname "$0")/lib.sh"
sum=$RET/summary.txt
: > "$sum"
say() { echo "$*" | tee -a "$sum"; }
scrape() {	# the agent's whole /metrics into $1 (retried: a scrape can time out)
	for _ in 1 2 3 4 5; do
		curl -s -m 30 http://127.0.0.1:9400/metrics > "$1" && grep -q '^gpuscope_agent_cpu_seconds_total' "$1" && return 0
		sleep 1
	done
	return 1
}
ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
[ "$ngpu" -ge 1 ] || ngpu=1
say "agent_self $(date -u +%FT%TZ) $(uname -r), $(nproc) CPUs, $ngpu GPU(s): $(nvidia-smi -L 2>/dev/null | head -1)"
lib=()
for p in /usr/local/nvidia/lib64/libnvidia-ml.so.1 /usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1; do
	[ -e "$p" ] && lib=(--nvml-library "$p") && break
done
start_server
cdir=$(cupti_lib_dir)
CFGS=${CFGS:-default backoff1}
run_s=$(((WARM_S + WIN_S + ${PROFILE_S:-0} + 30) * $(echo $CFGS | wc -w) + 30))
RUN_S=$run_s CUDA_INJECTION64_PATH=$D/libgpuscope_cupti.so LD_LIBRARY_PATH=$cdir \
	python3 tests/device/idle_workload.py > "$W/train.out" 2> "$W/train.err" &
tpid=$!
for _ in $(seq 1200); do grep -q '^started' "$W/train.err" && break; sleep 0.1; done
grep '^started' "$W/train.err" || { say "FAIL: the training process did not start"; tail -5 "$W/train.err"; exit 1; }
rc=0
for cfg in $CFGS; do
	extra=() pre=()
	[ $cfg = backoff1 ] && extra=(--nvml-backoff 1)
	[ $cfg = bwwalk ] && pre=(env GPUSCOPE_CUPTI_BACKWARD_REUSE_MS=0)
	ours "${pre[@]}" "$D/bin/gpuscope-agent" run --server "$url" --bpf-stats --metrics-listen 127.0.0.1:9400 \
		"${lib[@]}" "${extra[@]}" > "$W/agent-$cfg.out" 2> "$W/agent-$cfg.log" &
	apid=$!
	if ! wait_agent_metrics $apid 9400; then
		say "FAIL: agent ($cfg) did not answer /metrics"; tail -20 "$W/agent-$cfg.log"; rc=1; break
	fi
	sleep "$WARM_S"
	scrape "$W/metrics-$cfg-0.txt"
	read -r ut0 st0 < <(awk '{print $14, $15}' /proc/$apid/stat)
	t0=$(date +%s.%N)
	sleep "$WIN_S"
	scrape "$W/metrics-$cfg-1.txt"
	read -r ut1 st1 < <(awk '{print $14, $15}' /proc/$apid/stat)
	t1=$(date +%s.%N)
	if [ -n "${PROFILE_S:-}" ]; then	# after the window: the profiler's own samples stay out of it
		# in a subshell: ours() execs, which would end this script here
		( ours "$D/bin/gpuscope-agent" record --pid $apid -F 499 -d "$PROFILE_S" \
			-f "$RET/agent-$cfg.folded" --top 60 > "$RET/profile-$cfg.txt" 2>&1 )
	fi
	kill -TERM $apid; wait $apid
	secs=$(python3 -c "print($t1 - $t0)")
	say ""
	say "== agent ($cfg${extra[*]:+: ${extra[*]}}), window ${secs%.*} s after ${WARM_S} s"
	python3 bench/agent_self/selftable.py --files "$W/metrics-$cfg-0.txt" "$W/metrics-$cfg-1.txt" \
		"$secs" "$ngpu" | tee -a "$sum"
	say "$(python3 -c "t=($ut1+$st1-$ut0-$st0)/$(getconf CLK_TCK); print('agent process by /proc/PID/stat: %.3f %% of a core, %.3f %% per GPU' % (100*t/$secs, 100*t/$secs/$ngpu))")"
	say "NVML sources now (interval multiple): $(grep '^gpuscope_agent_nvml_interval_multiple' "$W/metrics-$cfg-1.txt" | sed 's/gpuscope_agent_nvml_interval_multiple//' | tr '\n' ' ')"
	say "backward calls since start: $(grep -E '^gpuscope_agent_cupti_backward_(calls|stacks_[a-z_]+|kernels_lost)_total ' "$W/metrics-$cfg-1.txt" | sed 's/gpuscope_agent_cupti_backward_//; s/_total//' | tr '\n' ' ')"
	sleep 2
done
wait $tpid
say ""
say "training: $(grep '^ended' "$W/train.err")"
kill -TERM "$spid"; wait "$spid"
tar -C "$W" --exclude=store -czf "$RET/raw.tar.gz" .
exit $rc
