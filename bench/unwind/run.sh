#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# BPF cost per user stack, frame pointers vs unwind tables (issue #13): kernel bpf_stats
# (run_time_ns / run_cnt of the on-CPU sampler) while `gpuscope-agent record --no-kernel` samples
# a workload, interleaved rounds. Workloads: the no-frame-pointer C program (tables walk the
# whole chain, frame pointers stop after a frame or two) and the frame-pointer one (both walk
# the whole chain). Then the table build figures (tablebench) for libc and libpython.
# Usage (repository root, as root, after make): bench/unwind/run.sh [ROUNDS]
set -u
cd "$(dirname "$0")/../.."
A=.output/gpuscope-agent
rounds=${1:-3}
old=$(cat /proc/sys/kernel/bpf_stats_enabled)
echo 1 > /proc/sys/kernel/bpf_stats_enabled
trap 'echo $old > /proc/sys/kernel/bpf_stats_enabled' EXIT
one() {	# workload-args... -- record-args...: prints "ns_per_run runs frames_per_stack"
	local wl=() rec=()
	while [ "$1" != "--" ]; do wl+=("$1"); shift; done; shift; rec=("$@")
	local ids
	ids=$(bpftool prog show -j 2>/dev/null | python3 -c '
import json,sys
print(" ".join(str(x["id"]) for x in json.load(sys.stdin) if x.get("name")=="on_sample"))')
	"${wl[@]}" > /dev/null & local wp=$!
	sleep 0.5
	$A record --duration 4s --frequency 999 --no-kernel --pid $wp --top 0 "${rec[@]}" \
		> /tmp/unwind-bench.out 2>&1 & local ap=$!
	local t=0 s0="" s1="" pid="" cur
	while [ $t -lt 60 ] && kill -0 $ap 2>/dev/null; do	# stats of our on_sample program
		cur=$(bpftool prog show -j 2>/dev/null | python3 -c '
import json,sys
before, want = set(sys.argv[1].split()), sys.argv[2]
# ours: the one on_sample that appeared after we started (other agents may run here), then
# that same id
p=[x for x in json.load(sys.stdin) if x.get("name")=="on_sample" and
   (str(x["id"])==want if want else str(x["id"]) not in before)]
print(p[0]["id"], p[0].get("run_time_ns",0), p[0].get("run_cnt",0)) if len(p)==1 else print("")' "$ids" "$pid")
		if [ -n "$cur" ]; then
			s1=$cur
			pid=${s1%% *}
			[ -z "$s0" ] && s0=${s1#* }
		fi
		sleep 0.5; t=$((t + 1))
	done
	s1=${s1#* }
	wait $ap; kill $wp 2>/dev/null; wait $wp 2>/dev/null
	python3 - "$s0" "$s1" <<'PY'
import re, sys
a, b = (sys.argv[1] or "0 0").split(), (sys.argv[2] or "0 0").split()
dt, dn = int(b[0]) - int(a[0]), int(b[1]) - int(a[1])
out = open("/tmp/unwind-bench.out").read()
m = re.search(r"unwind: (\d+) walks, (\d+) frames", out)
r = re.search(r"recorded (\d+) samples", out)
print("%.0f %d %s" % (dt / dn if dn else 0, dn, "%.1f" % (int(m.group(2)) / max(int(m.group(1)), 1)) if m else "-"))
PY
}
printf '%-10s %-16s %12s %8s %14s\n' round config ns/stack stacks frames/stack
for r in $(seq "$rounds"); do
	for cfg in nofp-tables nofp-fp fp-tables fp-fp; do
		case $cfg in
		nofp-*) wl=(.output/tests/fixtures/unwind/nofp_burn 30) ;;
		fp-*) wl=(.output/tests/progs/burn 30) ;;
		esac
		case $cfg in *-fp) extra=(--frame-pointers) ;; *) extra=() ;; esac
		read -r ns n fr < <(one "${wl[@]}" -- "${extra[@]}")
		printf '%-10s %-16s %12s %8s %14s\n' "$r" "$cfg" "$ns" "$n" "$fr"
	done
done
echo
.output/bench/unwind/tablebench /lib/x86_64-linux-gnu/libc.so.6 \
	$(ls /usr/lib/x86_64-linux-gnu/libpython3*.so.1.0 2>/dev/null | head -1) \
	$(readlink -f /usr/bin/python3)
