#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Strips on the GPU machine (issue #5): strips-dump (thread states, CUDA API probes, NVML)
# records a PyTorch loop with a slow CPU loader (strips_torch.py); strips_check.py checks that
# the launch thread runs in the loader while the GPU idles and sleeps in cuStreamSynchronize
# while it works. Expects .dev/strips/{bin,lib} (tests/device/pack-agent.sh-style, with
# .output/strips-dump). Results in $OUT: summary.txt, dump.log, records.jsonl.gz.
# Usage (repository root, as root): tests/device/strips_device.sh [SECONDS]
set -u
D=$PWD/.dev/strips
R=${OUT:-/tmp/strips-device}
mkdir -p "$R"
export LD_LIBRARY_PATH=$D/lib:/usr/local/nvidia/lib64
uname -r; nvidia-smi -L 2>&1 | head -2
"$D/bin/strips-dump" "$R/records.jsonl" --nvml --duration 90 2> "$R/dump.log" &
dpid=$!
for _ in $(seq 200); do grep -q running "$R/dump.log" && break; sleep 0.1; done
timeout 150 python3 tests/device/strips_torch.py "$R/phases.jsonl" "${1:-12}" 2>&1 | tail -5
sleep 2
kill -TERM $dpid; wait $dpid
grep -v '^gpuscope_agent_cuda_call' "$R/dump.log" | tail -40
python3 tests/device/strips_check.py "$R/records.jsonl" "$R/phases.jsonl" | tee "$R/summary.txt"
rc=${PIPESTATUS[0]}
gzip -f "$R/records.jsonl"
exit "$rc"
