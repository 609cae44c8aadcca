#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Store bytes per sample on a live machine (issue #16): gpuscope-server (SQLite) and
# gpuscope-agent run (CPU samples of every process at 99 Hz, 10 s pushes; every module but
# cuda_probe and cupti, which would attach to the test suites' stand-in CUDA processes:
# MODULES_OFF=cuda_probe keeps cupti) for MINUTES while the machine does whatever it does
# (builds, tests: short-lived processes). Every minute: samples held, label sets, stacks,
# locations, store bytes and gpuscope_server_store_bytes_per_sample from the server's /metrics;
# at the end, SQLite's dbstat per table and bytes per sample with and without intervals.
# Usage: bench/store/run.sh [MINUTES=60]
set -eu
cd "$(dirname "$0")/../.."
mins=${1:-60}
make -s -j2 .output/gpuscope-server .output/gpuscope-agent
. bench/lib.sh
bench_tmp store
bench_server
GPUSCOPE_AGENT_MODULES_OFF=${MODULES_OFF-cuda_probe,cupti} .output/gpuscope-agent run --server "$url" \
	--push-interval 10s --frequency 99 --node bench-store >"$tmp/agent.out" 2>"$tmp/agent.err" &
apid=$!
bench_pids="$bench_pids $apid"
metric() { awk -v n="$1" '$1 == n {print $2}' "$tmp/m"; }
printf '%-6s %12s %10s %9s %10s %9s %14s\n' min samples label_sets stacks locations store_MB \
	bytes/sample
for m in $(seq "$mins"); do
	sleep 60
	curl -s "$url/metrics" >"$tmp/m"
	printf '%-6s %12s %10s %9s %10s %9.1f %14s\n' "$m" "$(metric gpuscope_server_store_samples_held)" \
		"$(metric gpuscope_server_label_sets)" "$(metric gpuscope_server_stacks)" \
		"$(metric gpuscope_server_locations)" \
		"$(awk "BEGIN{print $(metric gpuscope_server_store_bytes)/1e6}")" \
		"$(metric gpuscope_server_store_bytes_per_sample)"
done
kill $apid; wait $apid 2>/dev/null || true
db=$(ls "$tmp"/data/*.db 2>/dev/null | head -1)
samples=$(metric gpuscope_server_store_samples_held)
echo "dbstat of $db (bytes per table with its indexes, per raw sample held: $samples)"
sqlite3 -readonly "$db" "SELECT coalesce(m.tbl_name, s.name), sum(s.pgsize)
	FROM dbstat s LEFT JOIN sqlite_master m ON m.name = s.name GROUP BY 1 ORDER BY 2 DESC" |
	awk -F'|' -v n="$samples" '{t += $2; if ($1 !~ /interval|ivchunk/) ni += $2;
		printf "  %-28s %10.1f MB %8.2f B/sample\n", $1, $2 / 1e6, $2 / n}
		END {printf "  all %.1f MB = %.2f B/sample; without intervals %.1f MB = %.2f B/sample\n",
			t / 1e6, t / n, ni / 1e6, ni / n}'
