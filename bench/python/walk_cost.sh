#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# BPF cost of a stack with Python frames (issue #13): the on-CPU program's run time per sample
# (kernel.bpf_stats_enabled) while `gpuscope-agent record` samples, for Debian's python3
# running tests/integration/pystacks_work.py (native walk + CPython walk) and for
# tests/progs/burn (native walk only). Prints ns per sample for each. Needs root and `make`.
# Usage: bench/python/walk_cost.sh [SECONDS]
set -u
cd "$(dirname "$0")/../.."
secs=${1:-6}
agent=.output/gpuscope-agent
old=$(cat /proc/sys/kernel/bpf_stats_enabled)
echo 1 > /proc/sys/kernel/bpf_stats_enabled
trap 'echo "$old" > /proc/sys/kernel/bpf_stats_enabled' EXIT
ids() { bpftool prog show -j | python3 -c 'import json,sys; print(" ".join(str(x["id"]) for x in json.load(sys.stdin) if x.get("name")=="on_sample"))'; }
# run time and count of the on_sample programs that were not there before (this record's)
stat() { bpftool prog show -j | python3 -c 'import json,sys; old=set(map(int,sys.argv[1].split())); p=[x for x in json.load(sys.stdin) if x.get("name")=="on_sample" and x["id"] not in old]; print(sum(x.get("run_time_ns",0) for x in p), sum(x.get("run_cnt",0) for x in p))' "$1"; }
measure() {	# label, workload argv...
	local label=$1; shift
	local before; before=$(ids)
	"$@" > /dev/null & local w=$!
	sleep 0.5
	"$agent" record --duration "${secs}s" --frequency 999 --pid $w --top 0 > /tmp/walk_cost.$$ 2>&1 &
	local r=$!
	sleep $((secs / 2 + 2))	# the program is loaded and sampling by now
	local a b
	a=$(stat "$before")
	sleep 2
	b=$(stat "$before")
	wait $r; kill $w 2>/dev/null; wait $w 2>/dev/null
	set -- $a $b
	python3 -c "import sys; t0,c0,t1,c1=map(int,sys.argv[1:]); n=c1-c0; print('%-30s %6d samples in 2 s, %7.0f ns of BPF per sample' % ('$label', n, (t1-t0)/n if n else 0))" "$@"
	grep -E "^(python|unwind):" /tmp/walk_cost.$$ | sed 's/^/    /'
	rm -f /tmp/walk_cost.$$
}
measure "python3 (native + Python)" /usr/bin/python3 tests/integration/pystacks_work.py shares $((secs + 4))
measure "burn (native only)" .output/tests/progs/burn $((secs + 4)) 2
