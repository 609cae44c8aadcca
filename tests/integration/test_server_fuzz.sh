#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Runs the libFuzzer targets of the server (batch decoder, label selector parser, the SQLite
# store's chunk codec), starting from the committed corpus in tests/fuzz/corpus/; new inputs go
# to a scratch directory, so the repository stays clean. Any crash, leak or sanitizer report
# fails, as does one allocation past 64 MiB in the batch and selector targets, or a decoded
# batch larger than its scan's estimate (fuzz_batch's ratio check).
# In `make test` each target runs a fixed number of inputs from a fixed seed (about 10 s each
# on a 2-core VM), so that a run's result does not depend on the machine's load or luck: the
# same inputs every time. GPUSCOPE_FUZZ_SECONDS=N fuzzes instead for N s each from a random
# seed, to look for new findings (whose inputs then go into the corpus, as
# tests/fuzz/corpus/chunk/interval-seq-at-u64-max did).
set -u
cd "$(dirname "$0")/../.."
secs=${GPUSCOPE_FUZZ_SECONDS:-}
tmp=$(mktemp -d /tmp/gpuscope-fuzz.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
rc=0
for name in batch selector chunk; do
	bin=.output/fuzz/fuzz_$name
	if [ ! -x "$bin" ]; then
		echo "SKIP: $bin not built (clang with libFuzzer missing?)"
		exit 77
	fi
	mkdir -p "$tmp/$name"
	# Untrusted input (uploads, query strings): no allocation past 64 MiB. The chunk codec
	# reads what the server wrote itself, sized by its own headers.
	limit=-malloc_limit_mb=64
	[ "$name" = chunk ] && limit=-malloc_limit_mb=2048
	case $name in
	batch) runs=200000 ;;
	selector) runs=80000 ;;
	chunk) runs=2000 ;;
	esac
	bound="-seed=1 -runs=$runs"
	[ -z "$secs" ] || bound="-max_total_time=$secs"
	echo "fuzz_$name: ${secs:+${secs}s}${secs:-$runs inputs from seed 1} from $(ls tests/fuzz/corpus/$name | wc -l) corpus files"
	if ! "$bin" $bound -timeout=10 -rss_limit_mb=2048 "$limit" -max_len=65536 \
		-artifact_prefix="$tmp/" -print_final_stats=1 "$tmp/$name" "tests/fuzz/corpus/$name" \
		>"$tmp/$name.log" 2>&1; then
		echo "fuzz_$name FAILED:"
		tail -40 "$tmp/$name.log"
		ls "$tmp"/crash-* "$tmp"/leak-* "$tmp"/timeout-* 2>/dev/null | while read -r f; do
			echo "input $f:"; od -An -tx1 "$f" | head -8
		done
		rc=1
	else
		grep -E "stat::number_of_executed_units|cov:" "$tmp/$name.log" | tail -2
	fi
done
exit $rc
