#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Multi-GPU node run (issue #9), on the GPU machine: gpuscope-server + gpuscope-agent run (CPU
# sampler, thread states, CUDA probes, CUPTI, NVML) around a DDP training loop with one process
# per GPU and the CUPTI library injected; then the checks of tests/device/ddp_analyze.py against
# the server's API. Works for any number of GPUs (1 on nvidia-h200).
# Needs .dev/agent from tests/device/pack-agent.sh (bin/, lib/, libgpuscope_cupti.so).
# Usage there: tests/device/ddp_node.sh [STEPS]
set -u
D=$PWD/.dev/agent
RET=${OUT:-/tmp/ddp-node}
W=$(mktemp -d /tmp/ddp.XXXX)
mkdir -p "$RET"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
ours() { LD_LIBRARY_PATH=$D/lib exec "$@"; }	# background only: $! is then our binary
ngpu=$(nvidia-smi -L | wc -l)
echo "== $ngpu GPU(s)"; nvidia-smi -L
cupti_dir=$(python3 -c "import glob,os,nvidia; p=[q for d in nvidia.__path__ for q in glob.glob(d+'/**/libcupti.so*', recursive=True)]; print(os.path.dirname(sorted(p)[0]) if p else '')" 2>/dev/null)

ours "$D/bin/gpuscope-server" --data "$W/store" --listen 127.0.0.1:0 > "$W/server.out" 2> "$W/server.log" &
spid=$!
for _ in $(seq 100); do grep -q listening "$W/server.out" && break; sleep 0.1; done
url=$(grep -o 'http://[0-9.:]*' "$W/server.out" | head -1)
echo "server $url"
ours "$D/bin/gpuscope-agent" run --server "$url" --push-interval 2s --metrics-listen 127.0.0.1:9400 \
	> "$W/agent.out" 2> "$W/agent.log" &
apid=$!
sleep 4
t0=$(date +%s.%N)
read -r a_ut a_st < <(awk '{print $14, $15}' /proc/$apid/stat)
CUDA_INJECTION64_PATH=$D/libgpuscope_cupti.so LD_LIBRARY_PATH="$cupti_dir" \
	timeout 300 python3 -m torch.distributed.run --nproc_per_node="$ngpu" tests/device/ddp_train.py "${1:-60}" \
	2>&1 | tee "$W/train.log" | grep -E "rank|Error|error" | head -20
read -r b_ut b_st < <(awk '{print $14, $15}' /proc/$apid/stat)
t1=$(date +%s.%N)
curl -s http://127.0.0.1:9400/metrics > "$RET/agent-metrics.txt"
sleep 3
kill -TERM $apid; wait $apid
tail -5 "$W/agent.log"
python3 - "$a_ut" "$a_st" "$b_ut" "$b_st" "$t0" "$t1" "$ngpu" <<'PY' | tee "$RET/agent-cpu.txt"
import os, sys
a_ut, a_st, b_ut, b_st, t0, t1 = map(float, sys.argv[1:7])
tck = os.sysconf("SC_CLK_TCK")
cpu = ((b_ut + b_st) - (a_ut + a_st)) / tck
print("agent CPU during training: %.2f s over %.1f s = %.2f %% of one core for %s GPU(s)"
      % (cpu, t1 - t0, 100 * cpu / (t1 - t0), sys.argv[7]))
PY
python3 tests/device/ddp_analyze.py "$url" "$W/train.log" | tee "$RET/ddp-analysis.txt"
cp "$W/agent.log" "$W/server.log" "$W/train.log" "$RET/" 2>/dev/null
kill -TERM $spid; wait $spid
