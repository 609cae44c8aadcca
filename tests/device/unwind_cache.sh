#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The agent's CPU per new PyTorch process on the GPU machine (issue #33 item 3: <= 0.5
# core-seconds when its libraries were seen before). `gpuscope-agent run` of the whole machine
# (every module, default budget) with its unwind-table cache in a fresh folder; a new Python +
# torch process (import, CUDA matmuls for SECONDS) started four times: first (every table built),
# second (same agent: tables in memory), after an agent restart (tables from the on-disk cache),
# after a restart with --unwind-cache-dir off (built again: the control). Per run: the agent's CPU
# while the process ran and until its builds settled, less the agent's idle rate over the same
# time; the unwind builder's, the unwind worker's and the main thread's (samples, symbolizer)
# CPU; tables built and read from the cache; build and cache-read
# seconds. Needs $D (default .dev/agent, from tests/device/pack-agent.sh).
# Results in $OUT: summary.txt (the table, each agent's peak RSS), log.txt, agent-*.log.
# Usage (repository root, as root): tests/device/unwind_cache.sh [SECONDS=15] [ROUNDS=1]
set -u
calc() { python3 -c "import sys; print(eval(sys.stdin.read()))"; }	# no bc on the GPU machine
D=${D:-$PWD/.dev/agent}
RET=${OUT:-/tmp/unwind-cache}
SECS=${1:-15}
ROUNDS=${2:-1}
W=$(mktemp -d /tmp/unwind-cache.XXXX)
mkdir -p "$RET"
exec > >(tee "$RET/log.txt") 2>&1
. "$(dirname "$0")/lib.sh"
PORT=9431
hz=$(getconf CLK_TCK)
nvidia-smi -L 2>/dev/null; uname -r; nproc
python3 -c "import sys, torch; print('python', sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.cuda.is_available())"
WORK=${WORK:-$W/work.py}	# (another Python program to try the script where torch is not)
cat > "$W/work.py" <<'PY'
import sys, time
import torch
dev = "cuda" if torch.cuda.is_available() else "cpu"
a = torch.randn(2048, 2048, device=dev)
end = time.time() + float(sys.argv[1])
while time.time() < end:
    for _ in range(20):
        b = a @ a
    b.sum().item()
PY
start_server
metric() { curl -s "http://127.0.0.1:$PORT/metrics" | awk -v k="$1" '$1 == k {s += $2} END {print s + 0}'; }
# ticks of the agent (with threads gone), its unwind builder, its unwind worker (maps, the
# fingerprints of new files) and its main thread (samples, symbolizer, modules' ticks)
ticks() {
	echo "$(awk '{print $14 + $15}' /proc/"$apid"/stat)" "$(cat /proc/"$apid"/task/*/stat 2>/dev/null | awk '{
		c = $0; sub(/^[0-9]+ \(/, "", c); n = substr(c, 1, index(c, ") ") - 1); sub(/^.*\) /, "", c)
		split(c, f, " "); t = f[12] + f[13]
		if (n == "gs-unwind-build") b += t; else if (n == "gs-unwind") w += t; else if (n == "gpuscope-agent") m += t }
		END {print b + 0, w + 0, m + 0}')"
}
settle() {	# until no build is queued and none ran for 2 s (120 s at most)
	local b=-1 n
	for _ in $(seq 60); do
		sleep 2
		n=$(metric gpuscope_agent_unwind_build_seconds_total)
		[ "$(metric gpuscope_agent_unwind_build_queue)" = 0 ] && [ "$n" = "$b" ] && break
		b=$n
	done
}
start_agent() {	# NAME AGENT_ARGS...
	local name=$1 a0 t0
	shift
	ours "$D/bin/gpuscope-agent" run --server "$url" --push-interval 10s \
		--metrics-listen "127.0.0.1:$PORT" "$@" > "$W/agent.out" 2> "$RET/agent-$name.log" &
	apid=$!
	wait_agent_metrics $apid $PORT || { echo "agent $name did not start"; tail "$RET/agent-$name.log"; exit 1; }
	settle	# its start: BPF programs, the tables of what already runs
	read -r a0 _ _ _ < <(ticks); t0=$(date +%s.%N)
	sleep 10
	idle=$(echo "($(ticks | cut -d' ' -f1) - $a0) / $hz / ($(date +%s.%N) - $t0)" | calc)
	printf '%s: agent idle %.4f core\n' "$name" "$idle"
}
stop_agent() {	# (its peak RSS first: a table read from the cache is held in memory as a built one is)
	echo "agent $(grep VmHWM /proc/"$apid"/status | tr -s ' \t' ' ')" | tee -a "$RET/summary.txt"
	kill -INT "$apid"; wait "$apid"
}
one() {	# NAME: a new torch process, until it ended and the agent's builds settled
	local name=$1 a0 b0 w0 x0 a1 b1 w1 x1 t0 s m0 c0 bs0 cl0 m1 c1 bs1 cl1
	read -r a0 b0 w0 x0 < <(ticks); t0=$(date +%s.%N)
	m0=$(metric 'gpuscope_agent_unwind_binaries_total{result="built"}')
	c0=$(metric 'gpuscope_agent_unwind_binaries_total{result="cached"}')
	bs0=$(metric gpuscope_agent_unwind_build_seconds_total)
	cl0=$(metric gpuscope_agent_unwind_cache_load_seconds_total)
	python3 "$WORK" "$SECS" > "$W/work.out" 2>&1 || tail -3 "$W/work.out"
	settle
	read -r a1 b1 w1 x1 < <(ticks)
	s=$(echo "$(date +%s.%N) - $t0" | calc)
	m1=$(metric 'gpuscope_agent_unwind_binaries_total{result="built"}')
	c1=$(metric 'gpuscope_agent_unwind_binaries_total{result="cached"}')
	bs1=$(metric gpuscope_agent_unwind_build_seconds_total)
	cl1=$(metric gpuscope_agent_unwind_cache_load_seconds_total)
	printf '%-22s %7.2f %7.2f %7.2f %7.2f %6.1f %6d %6d %7.2f %7.3f\n' "$name" \
		"$(echo "($a1 - $a0) / $hz - $idle * $s" | calc)" "$(echo "($b1 - $b0) / $hz" | calc)" \
		"$(echo "($w1 - $w0) / $hz" | calc)" "$(echo "($x1 - $x0) / $hz" | calc)" \
		"$s" $((m1 - m0)) $((c1 - c0)) "$(echo "$bs1 - $bs0" | calc)" \
		"$(echo "$cl1 - $cl0" | calc)" | tee -a "$RET/summary.txt"
}
for r in $(seq "$ROUNDS"); do
	rm -rf "$W/cache"
	start_agent "r$r-cold" --unwind-cache-dir "$W/cache"
	printf '%-22s %7s %7s %7s %7s %6s %6s %6s %7s %7s\n' "round $r" agent_cs builder worker main \
		wall_s built cached build_s load_s | tee -a "$RET/summary.txt"
	one first
	one second
	stop_agent
	du -sh "$W/cache" | tee -a "$RET/summary.txt"
	start_agent "r$r-warm" --unwind-cache-dir "$W/cache"
	one "restart, cache warm"
	stop_agent
	start_agent "r$r-off" --unwind-cache-dir off
	one "restart, no cache"
	stop_agent
done
kill "$spid" 2>/dev/null; wait 2>/dev/null
echo "agent_cs: the agent's core-seconds for the process (less its idle rate); builder, worker,"
echo "main: core-seconds of the unwind builder, the unwind worker, the main thread (not less idle);"
echo "built/cached: unwind tables; build_s, load_s: their (wall) seconds"
rm -rf "$W"
