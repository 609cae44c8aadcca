#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# `make run` was last proved on a stock Debian 12 (tests/stock/debootstrap_run.sh, `make
# stock-check`, too slow for every `make test`) with the run lists and mk/ as they are now: the
# last line of tests/stock/results.txt that passed carries the hash tests/stock/deps_hash prints.
# A change to scripts/deps/ or mk/ without a new stock run fails here.
set -uo pipefail
cd "$(dirname "$0")/../.."
res=tests/stock/results.txt
now=$(tests/stock/deps_hash) || { echo "FAIL tests/stock/deps_hash"; exit 1; }
last=$(grep ' pass ' "$res" 2>/dev/null | tail -1)
if [ -z "$last" ]; then
	echo "FAIL no stock Debian run has passed ($res): run make stock-check"
	exit 1
fi
echo "last pass: $last"
if ! grep -q " deps=$now pass " <<<"$last"; then
	echo "FAIL scripts/deps/*.txt, scripts/install-deps or mk/ changed (deps=$now) since the last"
	echo "     stock Debian run passed: run make stock-check (10-30 min) and commit $res"
	exit 1
fi
echo "ok   the last stock Debian run passed with the run lists and mk/ as they are (deps=$now)"
