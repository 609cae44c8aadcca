#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Query benchmark: flame graph latency (HTTP round trip on loopback, median of 5) for the last
# 1 h and the last 24 h of one node with 16 CPUs at 99 Hz and 3000 distinct stacks, and for
# 30 days of a second node (sampled at 1 Hz per CPU so that the fill stays short: its hour
# rollups still hold nearly every distinct stack, which is what a 30-day query reads).
# The fill (~180 M samples) is kept in DIR and reused by later runs.
# Usage: bench/query/run.sh [DIR=/tmp/gpuscope-bench-query]
set -eu
cd "$(dirname "$0")/../.."
dir=${1:-/tmp/gpuscope-bench-query}
make -s -j2 .output/gpuscope-server .output/tests/tools/batchgen
mkdir -p "$dir"
.output/gpuscope-server --data "$dir/data" --listen 127.0.0.1:0 --retention 40d \
	>"$dir/out" 2>"$dir/err" &
pid=$!
trap 'kill $pid 2>/dev/null; true' EXIT
for _ in $(seq 100); do grep -q listening "$dir/out" && break; sleep 0.1; done
url=$(sed -n 's/listening on //p' "$dir/out")
now=$(date +%s)
if [ ! -e "$dir/filled" ]; then
	end=$((now / 3600 * 3600))
	echo "filling: 24 h of node q24 (16 CPUs x 99 Hz) ..."
	.output/tests/tools/batchgen load --url "$url/api/v1/ingest" --node q24 --agents 4 \
		--start $((end - 86400)) --span 6h --batch 60s --seconds 3000 --encoding zstd
	echo "filling: 30 days of node q30 (16 CPUs x 1 Hz) ..."
	.output/tests/tools/batchgen load --url "$url/api/v1/ingest" --node q30 --agents 4 \
		--start $((end - 30 * 86400)) --span 180h --hz 1 --batch 3600s --seconds 3000 \
		--encoding zstd
	echo "$end" >"$dir/filled"
	for _ in $(seq 600); do
		lag=$(curl -s "$url/metrics" | awk '/^gpuscope_server_rollup_lag_chunks/ {print $2}')
		[ "$lag" = 0 ] && break; sleep 1
	done
fi
end=$(cat "$dir/filled")
cpu() { awk '{print $14 + $15}' /proc/$pid/stat; }
q() {	# label, query string: median wall time of 5, and the server's CPU time per query
	local t c0 c1
	c0=$(cpu)
	t=$(for _ in 1 2 3 4 5; do
		curl -s -o "$dir/last.json" -w '%{time_total}\n' "$url/api/v1/flamegraph?$2"
	done | sort -n | sed -n 3p)
	c1=$(cpu)
	printf '%-36s %6.0f ms wall, %6.0f ms server CPU  (total %s)\n' "$1" \
		"$(python3 -c "print($t * 1000)")" \
		"$(python3 -c "print(($c1 - $c0) * 1000 / $(getconf CLK_TCK) / 5)")" \
		"$(grep -o '"total":[0-9]*' "$dir/last.json" | head -1 | cut -d: -f2)"
}
enc() { python3 -c 'import sys, urllib.parse; print(urllib.parse.quote(sys.argv[1]))' "$1"; }
sel24=$(enc '{node="q24"}')
sel30=$(enc '{node="q30"}')
echo "store: $(du -cb "$dir/data"/gpuscope.db* | tail -1 | cut -f1) bytes; load average $(cut -d' ' -f1 /proc/loadavg) on $(nproc) cores"
q "1 h, node q24" "from=$((end - 3600))&to=$end&selector=$sel24"
q "1 h, node q24, unaligned edges" "from=$((end - 3600 - 17)).5&to=$((end - 17)).5&selector=$sel24"
q "1 h, node q24, gpu_idle (raw scan)" "from=$((end - 3600))&to=$end&selector=$sel24&gpu_idle=0"
q "24 h, node q24" "from=$((end - 86400))&to=$end&selector=$sel24"
q "30 d, node q30" "from=$((end - 30 * 86400))&to=$end&selector=$sel30"
