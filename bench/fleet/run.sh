#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Fleet benchmark: N simulated agents (tests/tools/batchgen load: 16 CPUs at 99 Hz, one 10 s
# batch per push, zstd) each pushing once every 10 s on its own kept-alive connection to a real
# gpuscope-server on loopback, for S seconds, while a UI-style flame graph query over the last
# hour runs every 5 s. Reports acknowledged vs stored batches and samples, ingest latency
# (p50/p99/max), query latency during the load, and the server's RSS and open descriptors at
# the end. Usage: [CPUS=16] bench/fleet/run.sh [AGENTS=1000] [SECONDS=300] (CPUS: per simulated
# node, all sampled at 99 Hz; TRICKLE: that many slow sockets beside the agents, bench/fleet/
# trickle.py, from 20 other loopback addresses, one header byte every 8 s, reconnecting when cut)
set -eu
cd "$(dirname "$0")/../.."
agents=${1:-1000} secs=${2:-300}
make -s -j2 .output/gpuscope-server .output/tests/tools/batchgen
. bench/lib.sh
bench_tmp fleet
echo bench-token > "$tmp/token"
ulimit -n 65536 2>/dev/null || true
bench_server --token-file "$tmp/token" --max-connections-per-address $((agents + 64))
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
	conns=$(curl -s -H "$auth" "$url/metrics" | awk '/^gpuscope_server_connections / {print $2}')
	echo "$conns" >>"$tmp/conns"
	curl -s -H "$auth" "$url/metrics" |
		awk '/^gpuscope_server_inflight_body_bytes / {print $2}' >>"$tmp/inflight"
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
sort -k2 -n "$tmp/q" | awk '{ t[NR] = $2; if ($1 != 200) bad++ } END {
	printf "UI flame graph (since=1h) during the load: %d queries, %d failed, p50 %.0f ms, max %.0f ms\n",
		NR, bad, t[int((NR + 1) / 2)] * 1000, t[NR] * 1000 }'
kill -TERM $pid; wait $pid || true
