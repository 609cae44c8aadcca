#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Fleet benchmark: N simulated agents (tests/tools/batchgen load: 16 CPUs at 99 Hz, one 10 s
# batch per push, zstd) each pushing once every 10 s on its own kept-alive connection to a real
# gpuscope-server on loopback, for S seconds, while a UI-style flame graph query over the last
# hour runs every 5 s. Reports acknowledged vs stored batches and samples, ingest latency
# (p50/p99/max), query latency during the load, and the server's RSS and open descriptors at
# the end. Usage: [CPUS=16] bench/fleet/run.sh [AGENTS=1000] [SECONDS=300] (CPUS: per simulated
# node, all sampled at 99 Hz; TRICKLE: that many slow sockets beside the agents, bench/fleet/
# trickle.py, from 20 other loopback addresses, one header byte every 8 s, reconnecting when cut;
# the memory budgets: INFLIGHT (--max-inflight-bodies, 64MiB), SQLITE_CACHE (--sqlite-cache,
# 64MiB), LSMEM (--max-label-set-memory, 64MiB). RSS is sampled every 5 s and set against the
# memory budget of docs/server.md: start RSS + 32 KiB a connection + the three budgets + the
# dictionaries (gauge).
set -eu
cd "$(dirname "$0")/../.."
agents=${1:-1000} secs=${2:-300}
make -s -j2 .output/gpuscope-server .output/tests/tools/batchgen
. bench/lib.sh
bench_tmp fleet
echo bench-token > "$tmp/token"
ulimit -n 65536 2>/dev/null || true
inflight=${INFLIGHT:-64MiB} sqlc=${SQLITE_CACHE:-64MiB} lsmem=${LSMEM:-64MiB}
bench_server --token-file "$tmp/token" --max-connections-per-address $((agents + 64)) \
	--max-inflight-bodies "$inflight" --sqlite-cache "$sqlc" --max-label-set-memory "$lsmem"
auth="Authorization: Bearer bench-token"
rss0=$(awk '/VmRSS/ {print $2}' /proc/$pid/status)
.output/tests/tools/batchgen load --url "$url/api/v1/ingest" --token bench-token \
	--agents "$agents" --interval 10s --seconds "$secs" --encoding zstd --stacks 500 \
	--cpus "${CPUS:-16}" \
	>"$tmp/load" 2>"$tmp/load.err" &
lpid=$!
tpid=
if [ "${TRICKLE:-0}" -gt 0 ]; then
	bench/fleet/trickle.py "${url#http://}" "$TRICKLE" >"$tmp/trickle" 2>&1 &
	tpid=$!
fi
: >"$tmp/q"
sleep 5
while kill -0 $lpid 2>/dev/null; do
	curl -s -o /dev/null -w '%{http_code} %{time_total}\n' -H "$auth" \
		"$url/api/v1/flamegraph?since=1h" >>"$tmp/q" || echo "000 0" >>"$tmp/q"
	mm=$(curl -s -H "$auth" "$url/metrics")
	conns=$(echo "$mm" | awk '/^gpuscope_server_connections / {print $2}')
	echo "$conns" >>"$tmp/conns"
	echo "$mm" | awk '/^gpuscope_server_inflight_body_bytes / {print $2}' >>"$tmp/inflight"
	# RSS KiB, connections, in-flight, SQLite heap, dictionaries, label sets (bytes)
	echo "$(awk '/VmRSS/ {print $2}' /proc/$pid/status) $conns $(echo "$mm" | awk '
		/^gpuscope_server_inflight_body_bytes / {i = $2}
		/^gpuscope_server_sqlite_memory_bytes / {q = $2}
		/^gpuscope_server_dictionary_memory_bytes / {d = $2}
		/^gpuscope_server_label_set_memory_bytes / {l = $2}
		END {print i + 0, q + 0, d + 0, l + 0}')" >>"$tmp/mem"
	sleep 5
done
wait $lpid || true
if [ -n "$tpid" ]; then kill -TERM "$tpid"; wait "$tpid" || true; fi
m=$(curl -s -H "$auth" "$url/metrics")
stored_batches=$(echo "$m" | awk '/^gpuscope_server_ingest_batches_total/ {print $2}')
stored_samples=$(echo "$m" | awk '/^gpuscope_server_ingest_samples_total/ {print $2}')
rejected=$(echo "$m" | awk '/^gpuscope_server_rejected_total/ {s += $2} END {print s}')
httperr=$(echo "$m" | awk '/^gpuscope_server_http_errors_total/ {print $2}')
rss=$(awk '/VmRSS/ {print $2}' /proc/$pid/status)
hwm=$(awk '/VmHWM/ {print $2}' /proc/$pid/status)
fds=$(ls /proc/$pid/fd | wc -l)
maxconns=$(sort -n "$tmp/conns" | tail -1)
echo "load: $(cat "$tmp/load")"
[ -n "$tpid" ] && cat "$tmp/trickle"
cut_total=$(echo "$m" | awk '/^gpuscope_server_connections_cut_total/ {s += $2} END {print s}')
[ -n "$tpid" ] && echo "server: connections cut $cut_total"
grep -c . "$tmp/load.err" >/dev/null && head -3 "$tmp/load.err" | sed 's/^/load error: /'
echo "server: stored $stored_batches batches, $stored_samples samples; rejected $rejected;" \
	"connection-level errors $httperr; connections open (max seen) $maxconns"
echo "server: RSS $((rss0 / 1024)) -> $((rss / 1024)) MiB (peak $((hwm / 1024)) MiB), $fds fds at the end"
echo "server: in-flight bodies peak seen $(sort -n "$tmp/inflight" 2>/dev/null | tail -1) bytes; label sets held $(echo "$m" | awk "/^gpuscope_server_label_set_memory_bytes / {print \$2}") bytes"
# The budget of docs/server.md at each sample: start RSS + 32 KiB x connections + the configured
# --max-inflight-bodies, --sqlite-cache, --max-label-set-memory + the dictionaries held.
tobytes() { numfmt --from=iec-i "${1%B}"; }
awk -v rss0="$rss0" -v fixed="$(( $(tobytes "$inflight") + $(tobytes "$sqlc") + $(tobytes "$lsmem") ))" '
	{ b = rss0 * 1024 + $2 * 32768 + fixed + $5; r = $1 * 1024
	  if (r > pr) { pr = r; pb = b; pq = $4; pd = $5; pi = $3; pl = $6 }
	  if (r - b > worst || NR == 1) worst = r - b; n++; rs[NR] = r }
	END { printf "memory: %d samples; RSS peak %.0f MiB against a budget of %.0f MiB then (SQLite heap %.1f MiB, dictionaries %.1f MiB, in-flight %.1f MiB, label sets %.1f MiB); RSS - budget at most %.0f MiB\n",
		n, pr / 1048576, pb / 1048576, pq / 1048576, pd / 1048576, pi / 1048576, pl / 1048576, worst / 1048576
	  printf "memory: RSS by fifth of the run (MiB):"
	  for (k = 1; k <= 5; k++) printf " %.0f", rs[int(n * k / 5)] / 1048576
	  printf "\n" }' "$tmp/mem"
sort -k2 -n "$tmp/q" | awk '{ t[NR] = $2; if ($1 != 200) bad++ } END {
	printf "UI flame graph (since=1h) during the load: %d queries, %d failed, p50 %.0f ms, max %.0f ms\n",
		NR, bad, t[int((NR + 1) / 2)] * 1000, t[NR] * 1000 }'
kill -TERM $pid; wait $pid || true
