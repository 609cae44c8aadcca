#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Cost of the launch probe on the launching thread, without a GPU: cupti_launch_bench calls the
# library's launch probe (through libgpuscope_cupti_fake.so, the same USDT note and semaphore)
# N times from 25 frames deep, bare (no tracer: semaphore test only) and with the agent's cupti
# module attached (uprobe trap + 25-frame user stack + ring buffer), interleaved ROUNDS times.
# Prints ns per launch for each. Run as root after `make`: bench/cupti/launch_cost.sh [N] [ROUNDS]
set -eu
cd "$(dirname "$0")/../.."
n=${1:-200000} rounds=${2:-5}
B=${CUPTI_BIN:-.output/tests/cupti}	# where cupti_launch_bench, cupti_dump and the fake library are
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
bare=() traced=() bare_cpu=() traced_cpu=()
for r in $(seq "$rounds"); do
	read -r w c < <($B/cupti_launch_bench "$n")
	bare+=("$w") bare_cpu+=("$c")
	GPUSCOPE_CUPTI_LIBRARY=$PWD/$B/libgpuscope_cupti_fake.so $B/cupti_dump "$tmp" >"$tmp/log" 2>&1 &
	dpid=$!
	read -r w c < <($B/cupti_launch_bench "$n" wait)
	traced+=("$w") traced_cpu+=("$c")
	sleep 0.3
	kill -TERM $dpid; wait $dpid || true
	grep -E "^(launches|bpf_launch_hits|bpf_ringbuf_lost|bpf_ustack_fail) " "$tmp/stats.txt" | tr '\n' ' '
	echo
done
med() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
echo "launch probe, ns per launch, wall / thread CPU (median of $rounds, $n launches each):"
echo "  no tracer attached : $(med "${bare[@]}") / $(med "${bare_cpu[@]}")   (wall ${bare[*]})"
echo "  agent attached     : $(med "${traced[@]}") / $(med "${traced_cpu[@]}")   (wall ${traced[*]})"
