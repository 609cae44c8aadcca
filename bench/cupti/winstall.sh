#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# How long trace windows hold the agent's main loop (issue 14), without a GPU: cupti_window (the
# real libgpuscope_cupti.so over the libcupti stand-in, two kernels every 0.5 ms) under a real
# agent (cpu-sampler, sched, cupti; --pid) that opens a 200 ms window every second for SECS.
# /metrics then gives each module's longest tick (gpuscope_agent_module_tick_max_seconds: the
# main loop drains every ring in turn) and the switch thread's longest attach and detach.
# AGENTS: agent binaries to compare (default this tree's), interleaved ROUNDS times.
# Run as root after `make`: [AGENTS="old/gpuscope-agent new/gpuscope-agent"] bench/cupti/winstall.sh [SECS] [ROUNDS]
set -eu
cd "$(dirname "$0")/../.."
secs=${1:-20} rounds=${2:-3}
agents=${AGENTS:-.output/gpuscope-agent}
B=.output/tests/cupti
lib=$PWD/.output/libgpuscope_cupti.so
tmp=$(mktemp -d)
wpid= apid=
cleanup() {
	[ -n "$apid" ] && kill -INT "$apid" 2>/dev/null && wait "$apid" 2>/dev/null
	exec 3>&- 2>/dev/null || true
	[ -n "$wpid" ] && wait "$wpid" 2>/dev/null
	rm -rf "$tmp"
}
trap cleanup EXIT
metric() {	# name{labels} from $tmp/m, 0 if absent
	awk -v n="$1" '$1 == n { print $2; f = 1 } END { if (!f) print 0 }' "$tmp/m"
}
ms() { awk -v s="$1" 'BEGIN { printf "%.0f", s * 1000 }'; }
printf '%-40s %7s %11s %9s %9s %9s %9s\n' agent windows cupti_tick sched_tick cpu_tick attach detach
for r in $(seq "$rounds"); do
	for ag in $agents; do
		rm -f "$tmp/in" && mkfifo "$tmp/in"
		$B/cupti_window "$lib" <"$tmp/in" >"$tmp/w.out" &
		wpid=$!
		exec 3>"$tmp/in"
		for _ in $(seq 100); do grep -q ready "$tmp/w.out" && break; sleep 0.1; done
		"$ag" run --server http://127.0.0.1:9 --pid "$wpid" --no-gpu \
			--modules cpu-sampler,sched,cupti --gpu-trace-window 200ms --gpu-trace-period 1s \
			--metrics-listen 127.0.0.1:0 >"$tmp/a.log" 2>&1 &
		apid=$!
		url=
		for _ in $(seq 300); do
			url=$(sed -n 's/.*metrics: \(http[^ ]*\).*/\1/p' "$tmp/a.log" | head -1)
			[ -n "$url" ] && break
			sleep 0.1
		done
		sleep "$secs"
		curl -fsS "$url" >"$tmp/m"
		kill -INT "$apid" && wait "$apid" || true
		apid=
		exec 3>&-
		wait "$wpid" || true
		wpid=
		printf '%-40s %7s %9s ms %6s ms %6s ms %6s ms %6s ms\n' "$ag" \
			"$(metric 'gpuscope_agent_cupti_windows_total{reason="budget"}')" \
			"$(ms "$(metric 'gpuscope_agent_module_tick_max_seconds{module="cupti"}')")" \
			"$(ms "$(metric 'gpuscope_agent_module_tick_max_seconds{module="sched"}')")" \
			"$(ms "$(metric 'gpuscope_agent_module_tick_max_seconds{module="cpu-sampler"}')")" \
			"$(ms "$(metric 'gpuscope_agent_cupti_window_switch_max_seconds{op="attach"}')")" \
			"$(ms "$(metric 'gpuscope_agent_cupti_window_switch_max_seconds{op="detach"}')")"
	done
done
