#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Cost of meta__pid_labels (cached, rebuilt, cold). Build first: make -j2.
set -euo pipefail
cd "$(dirname "$0")/../.."
out=.output/bench/bench_meta
mkdir -p "$(dirname "$out")"
gcc -O2 -g -std=gnu11 -D_GNU_SOURCE -Isrc -I.output -o "$out" bench/meta/bench_meta.c src/agent/meta/relabel.c \
	src/agent/labels.c src/agent/procs/procfs.c src/agent/procs/tracker.c src/agent/procs/maps.c \
	.output/libgpuscope_common.a -lcurl -ljansson -lpthread
for i in 1 2 3; do "$out"; done
# Instructions per cached call (repeatable under load): 100000 calls minus 1 call.
if command -v valgrind >/dev/null; then
	ir() { valgrind --tool=callgrind --callgrind-out-file=/dev/null "$out" "$1" 2>&1 |
		sed -n 's/.*Collected : \([0-9]*\).*/\1/p'; }
	a=$(ir 1) b=$(ir 100001)
	echo "cached:  $(( (b - a) / 100000 )) instructions/call (callgrind)"
fi
