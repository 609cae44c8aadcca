#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Records MINUTES of this machine's real load (issue #16) as the agent's own batches, for
# bench/store/replay.sh to store into any server version: gpuscope-agent run (the same modules
# and rates as run.sh) pushing to a port where nothing listens, so every batch goes to its
# on-disk spool byte for byte (zstd protobuf, one file per 10 s push, in order).
# Usage: [AGENT_ARGS="..."] bench/store/record.sh SPOOL_DIR [MINUTES=30]
# (AGENT_ARGS: more options for the agent, e.g. --relabel-config FILE to keep one load alone)
set -eu
cd "$(dirname "$0")/../.."
dir=${1:?usage: record.sh SPOOL_DIR [MINUTES]}
mins=${2:-30}
make -s -j2 .output/gpuscope-agent
mkdir -p "$dir"
GPUSCOPE_AGENT_MODULES_OFF=${MODULES_OFF-cuda_probe,cupti} .output/gpuscope-agent run \
	--server http://127.0.0.1:9 --spool-dir "$dir" --spool-max 8GiB --push-interval 10s \
	--frequency 99 --node bench-store --metrics-listen off --duration "${mins}m" ${AGENT_ARGS:-}
echo "$(ls "$dir" | wc -l) batches, $(du -sh "$dir" | cut -f1) in $dir"
