#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Store bytes per sample on a recorded load (issue #16): stores a spool of real batches
# (bench/store/record.sh) into a fresh gpuscope-server (SQLite), so two server versions are
# compared on the same input. Prints what /metrics reports once every chunk is rolled up (and,
# where the server recompresses in the background, recompressed), then SQLite's dbstat per table
# (with its indexes) and per index, per raw sample held.
# Usage: [SERVER=path/to/gpuscope-server] [KEEP=DIR] bench/store/replay.sh SPOOL_DIR [SERVER_ARGS...]
# (KEEP: copy the database there at the end)
# (no cardinality limit unless SERVER_ARGS sets one: the recording has no server to refuse it)
set -eu
cd "$(dirname "$0")/../.."
spool=${1:?usage: replay.sh SPOOL_DIR [SERVER_ARGS...]}
shift
server=${SERVER:-.output/gpuscope-server}
[ -n "${SERVER:-}" ] || make -s -j2 .output/gpuscope-server
tmp=$(mktemp -d /tmp/gpuscope-bench-replay.XXXXXX)
trap 'kill $pid 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$tmp"' EXIT
"$server" --data "$tmp/data" --listen 127.0.0.1:0 --max-new-label-sets-per-hour 1000000000 \
	--max-new-stacks-per-hour 1000000000 "$@" >"$tmp/out" 2>"$tmp/err" &
pid=$!
for _ in $(seq 100); do grep -q listening "$tmp/out" && break; sleep 0.1; done
url=$(sed -n 's/listening on //p' "$tmp/out")
t0=$SECONDS
python3 bench/store/replay.py "$url" "$spool"
metric() { awk -v n="$1" '$1 == n {print $2}' "$tmp/m"; }
for _ in $(seq 600); do
	curl -s "$url/metrics" >"$tmp/m"
	[ "$(metric gpuscope_server_rollup_lag_chunks)" = 0 ] && break
	sleep 0.5
done
echo "stored and rolled up in $((SECONDS - t0)) s; server CPU $(awk '{printf "%.1f s", ($14 + $15) / 100}' /proc/$pid/stat)"
for _ in $(seq 600); do	# schema 14: rows of hours the replay filled late, built 30 s after
	curl -s "$url/metrics" >"$tmp/m"
	case "$(metric gpuscope_server_rollup_rows_waiting)" in ''|0) break;; esac
	sleep 0.5
done
for _ in $(seq 1200); do	# schema 5: settled blobs recompressed in the background
	curl -s "$url/metrics" >"$tmp/m"
	case "$(metric gpuscope_server_store_recompress_lag_rows)" in ''|0) break;; esac
	sleep 0.5
done
sleep 3	# one more retention/rollup period, then a checkpoint-free look at the files
curl -s "$url/metrics" >"$tmp/m"
echo "settled in $((SECONDS - t0)) s; server CPU $(awk '{printf "%.1f s", ($14 + $15) / 100}' /proc/$pid/stat)"
[ -z "$(metric gpuscope_server_store_recompress_cpu_seconds_total)" ] ||
	printf 'recompression: %s s of CPU, %.1f -> %.1f MB\n' \
		"$(metric gpuscope_server_store_recompress_cpu_seconds_total)" \
		"$(awk "BEGIN{print $(metric 'gpuscope_server_store_recompress_bytes_total{when="before"}')/1e6}")" \
		"$(awk "BEGIN{print $(metric 'gpuscope_server_store_recompress_bytes_total{when="after"}')/1e6}")"
samples=$(metric gpuscope_server_store_samples_held)
printf 'samples held %s, label sets %s, stacks %s, locations %s, store %.1f MB (%.1f MB free pages), %s bytes/sample (/metrics)\n' \
	"$samples" "$(metric gpuscope_server_label_sets)" "$(metric gpuscope_server_stacks)" \
	"$(metric gpuscope_server_locations)" \
	"$(awk "BEGIN{print $(metric gpuscope_server_store_bytes)/1e6}")" \
	"$(awk "BEGIN{print $(metric gpuscope_server_store_free_bytes)/1e6}")" \
	"$(metric gpuscope_server_store_bytes_per_sample)"
db="$tmp/data/gpuscope.db"
echo "dbstat per table (with its indexes), per raw sample held:"
sqlite3 -readonly "$db" "SELECT coalesce(m.tbl_name, s.name), sum(s.pgsize), count(*)
	FROM dbstat s LEFT JOIN sqlite_master m ON m.name = s.name GROUP BY 1 ORDER BY 2 DESC" |
	awk -F'|' -v n="$samples" '{t += $2; if ($1 !~ /interval|ivchunk/) ni += $2;
		printf "  %-28s %10.2f MB %8.2f B/sample\n", $1, $2 / 1e6, $2 / n}
		END {printf "  all %.1f MB = %.2f B/sample; without intervals %.1f MB = %.2f B/sample\n",
			t / 1e6, t / n, ni / 1e6, ni / n}'
echo "per index and table b-tree:"
sqlite3 -readonly "$db" "SELECT name, sum(pgsize) FROM dbstat GROUP BY 1 ORDER BY 2 DESC" |
	awk -F'|' -v n="$samples" '{printf "  %-28s %10.2f MB %8.2f B/sample\n", $1, $2 / 1e6, $2 / n}'
[ -z "${KEEP:-}" ] || { mkdir -p "$KEEP"; cp "$db" "$db-wal" "$KEEP/" 2>/dev/null || true; }
echo "rows:"
for t in $(sqlite3 -readonly "$db" "SELECT name FROM sqlite_master WHERE type = 'table'"); do
	printf '  %-20s %s\n' "$t" "$(sqlite3 -readonly "$db" "SELECT count(*) FROM $t")"
done
