#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The agent's CPU for a new process (issue #33): `gpuscope-agent run --pid` of shells held
# stopped until they exec (so that nothing else the machine runs counts), in turn: a Python program importing native modules (ssl, sqlite3, ctypes, decimal, json) and a clang
# compile (libLLVM, libclang-cpp), each run twice; then the agent restarted and both run again,
# then once more with the agent restarted without its cache (the control).
# Per run: the agent's CPU (utime + stime, less its idle rate over the same time), its unwind
# tables built and loaded from the on-disk cache. ARGS go to the agent; without any, the cache
# starts empty in the scratch folder (--unwind-cache-dir off: the agent without it).
# Usage (repository root, as root): bench/unwind/newproc.sh [AGENT] [ARGS...]
set -u
cd "$(dirname "$0")/../.."
. bench/lib.sh
agent=${1:-.output/gpuscope-agent}
shift || true
bench_tmp newproc
bench_server
PY=${PY:-python3}
port=$((20000 + RANDOM % 20000))
printf 'int main(void){return 0;}\n' > "$tmp/empty.c"
python3 - "$tmp/big.c" <<'PY'
import sys
with open(sys.argv[1], "w") as f:
    for i in range(300):
        f.write("int f%d(int *a, int n) { int s = 0; for (int i = 0; i < n; i++) s += a[i] * %d ^ (s >> 3); return s; }\n" % (i, i))
PY
hz=$(getconf CLK_TCK)
cpu() { awk '{print $14+$15}' "/proc/$1/stat"; }
metric() { curl -s "http://127.0.0.1:$port/metrics" | awk -v k="$1" '$1 == k {s += $2} END {print s + 0}'; }
start_agent() {	# PIDS... -- AGENT_ARGS...
	local pids=() c0 t0
	while [ "$1" != -- ]; do pids+=(--pid "$1"); shift; done
	shift
	"$agent" run --server "$url" --metrics-listen "127.0.0.1:$port" --no-gpu "${pids[@]}" "$@" \
		> "$tmp/agent.out" 2>&1 &
	apid=$!
	bench_pids="$bench_pids $apid"
	for _ in $(seq 300); do curl -sf -o /dev/null "http://127.0.0.1:$port/metrics" && break; sleep 0.1; done
	settle	# the start's own work: BPF programs, the stopped shells' tables
	c0=$(cpu $apid); t0=$(date +%s.%N)
	sleep 4
	idle=$(echo "($(cpu $apid) - $c0) / $hz / ($(date +%s.%N) - $t0)" | bc -l)
	printf 'agent idle: %.3f core\n' "$idle"
}
# A shell stopped before it execs CMD: the agent follows its pid from its start (--pid), and
# everything CMD maps comes after the SIGCONT.
stopped() {
	sh -c 'kill -STOP $$; exec "$@"' sh "$@" > /dev/null 2>&1 &
	echo $! >> "$tmp/stopped"	# (a subshell: bench_pids would not keep it)
	for _ in $(seq 100); do [ "$(awk '{print $3}' /proc/$!/stat)" = T ] && break; sleep 0.05; done
	echo $!
}
settle() {	# until no build is queued and none ran for a second (60 s at most)
	local b=-1 n
	for _ in $(seq 60); do
		sleep 1
		n=$(metric gpuscope_agent_unwind_build_seconds_total)
		[ "$(metric gpuscope_agent_unwind_build_queue)" = 0 ] && [ "$n" = "$b" ] && break
		b=$n
	done
}
one() {	# NAME PID: lets the stopped PID go, waits for it and the agent's work on it
	local name=$1 p=$2 c0 t0 b0 h0 s
	c0=$(cpu $apid); t0=$(date +%s.%N)
	b0=$(metric 'gpuscope_agent_unwind_binaries_total{result="built"}')
	h0=$(metric 'gpuscope_agent_unwind_cache_total{result="hit"}')
	kill -CONT "$p"
	while kill -0 "$p" 2>/dev/null && [ "$(awk '{print $3}' /proc/$p/stat 2>/dev/null)" != Z ]; do sleep 0.05; done
	settle
	s=$(echo "$(date +%s.%N) - $t0" | bc -l)
	printf '%-8s %-8s agent %.2f core-s over %.1f s; tables built %d, from cache %d\n' \
		"$phase" "$name" "$(echo "($(cpu $apid) - $c0) / $hz - $idle * $s" | bc -l)" "$s" \
		"$(( $(metric 'gpuscope_agent_unwind_binaries_total{result="built"}') - b0 ))" \
		"$(( $(metric 'gpuscope_agent_unwind_cache_total{result="hit"}') - h0 ))"
}
pywork="import ssl, sqlite3, ctypes, decimal, json, time
end = time.time() + 2
while time.time() < end: json.dumps([str(decimal.Decimal(i) / 7) for i in range(2000)])"
[ $# -gt 0 ] || set -- --unwind-cache-dir "$tmp/cache"
py1=$(stopped "$PY" -c "$pywork"); cc1=$(stopped clang -O2 -c "$tmp/big.c" -o "$tmp/big1.o")
py2=$(stopped "$PY" -c "$pywork"); cc2=$(stopped clang -O2 -c "$tmp/big.c" -o "$tmp/big2.o")
start_agent $py1 $cc1 $py2 $cc2 -- "$@"
phase=first; one python $py1; one clang $cc1
phase=second; one python $py2; one clang $cc2
kill -INT $apid; wait $apid
py3=$(stopped "$PY" -c "$pywork"); cc3=$(stopped clang -O2 -c "$tmp/big.c" -o "$tmp/big3.o")
start_agent $py3 $cc3 -- "$@"
phase=restart; one python $py3; one clang $cc3
kill -INT $apid; wait $apid
py4=$(stopped "$PY" -c "$pywork"); cc4=$(stopped clang -O2 -c "$tmp/big.c" -o "$tmp/big4.o")
start_agent $py4 $cc4 -- --unwind-cache-dir off
phase=no-cache; one python $py4; one clang $cc4
kill -INT $apid; wait $apid
kill -CONT $(cat "$tmp/stopped") 2>/dev/null
