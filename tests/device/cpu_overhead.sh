#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# bench/cpu-overhead on the GPU machine (16 idle cores: steadier than the shared dev VM).
# Needs .dev/agent (tests/device/pack-agent.sh) with bin/work built from bench/cpu-overhead/work.c.
# Usage there: tests/device/cpu_overhead.sh [ROUNDS] [WORK_ROUNDS]
set -u
export LD_LIBRARY_PATH=$PWD/.dev/agent/lib GPUSCOPE_AGENT=$PWD/.dev/agent/bin/gpuscope-agent
export GPUSCOPE_BENCH_WORK=$PWD/.dev/agent/bin/work
nproc; uname -r
"$GPUSCOPE_AGENT" record -d 2s --top 5 2>&1 | tail -8
python3 bench/cpu-overhead/run.py "${1:-5}" "${2:-300000000}" | tee "${OUT:-/tmp}/cpu-overhead.md"
