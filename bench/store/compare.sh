#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Same answers from two store versions (issue #16): stores one recording (bench/store/record.sh)
# into a fresh server of each version, then opens a copy of the older one's store with the newer
# binary (migration in place), and asks all three the questions of compare.py, byte for byte.
# Usage: [ROUNDED=1] [STACK_IDS=1] [SERVER_ARGS=...] [QUERY_TIMES=1] bench/store/compare.sh OLD_SERVER NEW_SERVER SPOOL_DIR
# (ROUNDED=1: compare.py --rounded, for a NEW_SERVER that stores times at µs and an OLD_SERVER
# that stored them at ns: schema 8's --time-resolution us, the default; or off-CPU values at µs
# against ns ones: schema 9's; STACK_IDS=1: compare.py --stack-ids, for stores that numbered
# their stacks in another order: schema 14's against older ones; SERVER_ARGS: more options for
# every server, e.g. "--time-resolution ns" to compare two versions that round differently at
# µs: schema 15's off-CPU values against older ones; NO_NAMED_ADDR=1 (with STACK_IDS=1):
# compare.py --no-named-addresses, for a NEW_SERVER that stores named frames without their
# addresses against an OLD_SERVER that kept them; QUERY_TIMES=1: then query_times.py on the
# old and the new store)
set -eu
cd "$(dirname "$0")/../.."
old=${1:?usage: compare.sh OLD_SERVER NEW_SERVER SPOOL_DIR} new=${2:?} spool=${3:?}
tmp=$(mktemp -d /tmp/gpuscope-bench-compare.XXXXXX)
pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$tmp"' EXIT
start() {	# name binary: starts a server on $tmp/name, sets url
	"$2" --data "$tmp/$1" --listen 127.0.0.1:0 --max-new-label-sets-per-hour 0 \
		--max-new-stacks-per-hour 0 ${SERVER_ARGS:-} >"$tmp/$1.out" 2>"$tmp/$1.err" &
	pids+=($!)
	for _ in $(seq 600); do grep -q listening "$tmp/$1.out" && break; sleep 0.1; done
	url=$(sed -n 's/listening on //p' "$tmp/$1.out")
	[ -n "$url" ] || { echo "$1 did not start:"; cat "$tmp/$1.err"; exit 1; }
}
settle() {	# url: waits until every chunk is rolled up (and recompressed, where a server does)
	for _ in $(seq 1200); do
		curl -s "$1/metrics" | awk '$1 == "gpuscope_server_rollup_lag_chunks" {r = $2}
			$1 == "gpuscope_server_store_recompress_lag_rows" {z = $2}
			END {exit !(r == "0" && (z == "" || z == "0"))}' && return
		sleep 0.5
	done
}
start old "$old"; a=$url
start new "$new"; b=$url
python3 bench/store/replay.py "$a" "$spool" & r1=$!
python3 bench/store/replay.py "$b" "$spool"
wait $r1
settle "$a"; settle "$b"
# the old store, copied while its server is stopped, opened by the new binary
kill "${pids[0]}"; wait "${pids[0]}" 2>/dev/null || true
cp -r "$tmp/old" "$tmp/migrated"
start old "$old"; a=$url
start migrated "$new"; c=$url
settle "$c"
grep -h "migrat" "$tmp/migrated.err" || true
for u in "$a" "$b" "$c"; do
	echo "$u: $(curl -s "$u/metrics" | awk '$1 == "gpuscope_server_store_bytes_per_sample" {print $2}') bytes/sample (/metrics)"
done
rc=0
python3 bench/store/compare.py ${ROUNDED:+--rounded} ${STACK_IDS:+--stack-ids} ${NO_NAMED_ADDR:+--no-named-addresses} "$a" "$b" "$c" || rc=$?
[ -z "${QUERY_TIMES:-}" ] || python3 bench/store/query_times.py "$a" "$b"
exit $rc
