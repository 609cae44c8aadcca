#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Why a GPT-2 decode process died (SIGSEGV) under the agent's defaults and not under continuous
# tracing (issue 31 device runs, 2026-12-07): the idle_workloads.py gpt2 workload under one
# default-mode agent, with Python's faulthandler and the library's debug lines, once as built
# and then changing one thing at a time: the CUPTI hand-over's GOT interposition off
# (GPUSCOPE_CUPTI_HANDOVER=0), CUDA's lazy module loading off, GPT-2 without SDPA; the kernel's
# segfault lines (which object, which address) from dmesg after each. About 3 minutes.
# VARIANTS picks the runs (repeats allowed), among them stack256: the control thread's old
# 256-KiB stack (GPUSCOPE_CUPTI_STACK_KB=256). With GPUSCOPE_CUPTI_DEBUG the library reports a
# fault in any thread itself (src/cupti/thread.c) and prints its stack's deepest use.
# Needs $D (default .dev/agent) from tests/device/pack-agent.sh. Results: $OUT/summary.txt.
# Usage (repository root, as root): tests/device/gpt2_crash.sh [RUN_S=8]
set -u
D=${D:-$PWD/.dev/agent}
RET=${OUT:-/tmp/gpt2-crash}
export RUN_S=${1:-8}
W=$(mktemp -d /tmp/gpt2crash.XXXX)
mkdir -p "$RET"
. "$(dirname "$0")/lib.sh"
exec > >(tee "$RET/summary.txt") 2>&1
cupti_dir=$(cupti_lib_dir)
export GPUSCOPE_CUPTI_LIBRARY=$D/libgpuscope_cupti.so
start_server
ours "$D/bin/gpuscope-agent" run --server "$url" --node crash --push-interval 2s \
	--metrics-listen 127.0.0.1:9400 > "$W/agent.out" 2> "$W/agent.log" &
apid=$!
wait_agent_metrics $apid 9400 || { echo "agent did not start"; tail "$W/agent.log"; exit 1; }
# each variant changes one thing: the CUPTI hand-over's interposition off, CUDA modules loaded
# eagerly (no lazy loading while a window opens), GPT-2 without SDPA (no cuDNN attention)
n=0
for v in ${VARIANTS:-asbuilt handover0 eager sdpa0}; do
	env=()
	n=$((n + 1))
	case $v in
	stack256) env=(GPUSCOPE_CUPTI_STACK_KB=256) ;;
	handover0) env=(GPUSCOPE_CUPTI_HANDOVER=0) ;;
	eager) env=(CUDA_MODULE_LOADING=EAGER) ;;
	sdpa0) env=(GPT2_ATTN=eager) ;;
	esac
	v=$v.$n
	dmesg 2>/dev/null | tail -1 > "$W/dmesg0"
	env "${env[@]}" PYTHONFAULTHANDLER=1 GPUSCOPE_CUPTI_DEBUG=1 \
		CUDA_INJECTION64_PATH=$D/libgpuscope_cupti.so LD_LIBRARY_PATH="$cupti_dir" \
		timeout 90 python3 tests/device/idle_workloads.py gpt2 > "$W/run-$v.out" 2> "$W/run-$v.err"
	echo "== $v (${env[*]}): exit $?"
	grep -v '^ *File "/opt' "$W/run-$v.err" | grep -v 'more GOT slots' | tail -40 | cut -c1-220
	echo "-- dmesg"
	dmesg 2>/dev/null | grep -A3 -F -f "$W/dmesg0" | tail -n +2 | tail -6
	dmesg 2>/dev/null | grep -i -E "segfault|traps:" | tail -3
done
echo "-- agent"; tail -5 "$W/agent.log"
curl -s http://127.0.0.1:9400/metrics | grep -E '^gpuscope_agent_cupti_windows_(total|refused)' | grep -v ' 0$'
kill -INT $apid; wait $apid; kill $spid
tar czf "$RET/raw.tar.gz" -C "$W" --exclude store . 2>/dev/null
