#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The agent's peak RSS (VmHWM) with every module on while a PyTorch training loop with a Python
# CPU phase runs on this machine's CPU (issue 13's memory target, short of a GPU): Debian's
# python3-torch (apt-get install python3-torch; not a test dependency). Prints VmHWM and VmRSS at
# the end of the loop, the resident memory by mapping, and the agent's cache gauges.
# Usage: bench/unwind/agent_rss.sh [SECONDS=25]
set -eu
cd "$(dirname "$0")/../.."
secs=${1:-25}
/usr/bin/python3 -c 'import torch' 2>/dev/null || { echo "needs Debian's python3-torch"; exit 77; }
make -s -j2 .output/gpuscope-server .output/gpuscope-agent
. bench/lib.sh
bench_tmp agent-rss
bench_server
.output/gpuscope-agent run --server "$url" --push-interval 2s --metrics-listen off \
	>"$tmp/agent.out" 2>"$tmp/agent.err" &
apid=$!
bench_pids="$bench_pids $apid"
cat > "$tmp/work.py" <<'PY'
import sys, time, torch
def py_phase(ms):
    end = time.perf_counter() + ms / 1000; x = 0
    while time.perf_counter() < end:
        for i in range(500):
            x += i * i
def step(m, opt, x):
    loss = m(x).pow(2).mean(); opt.zero_grad(); loss.backward(); opt.step()
m = torch.nn.Sequential(torch.nn.Linear(512, 1024), torch.nn.GELU(), torch.nn.Linear(1024, 512))
opt = torch.optim.AdamW(m.parameters()); x = torch.randn(64, 512)
d = time.monotonic() + float(sys.argv[1])
while time.monotonic() < d:
    py_phase(50); [step(m, opt, x) for _ in range(4)]
PY
sleep 3
/usr/bin/python3 "$tmp/work.py" "$secs" &
wpid=$!
sleep $((secs - 3))
grep -E 'VmHWM|VmRSS' /proc/$apid/status
awk '/^[0-9a-f]+-[0-9a-f]+ /{n = NF >= 6 ? $6 : "[anon]"; if (n ~ /^anon_inode:bpf/) n = "bpf:" $NF}
	/^Rss:/{r[n] += $2} END{for (k in r) if (r[k] >= 1024) printf "%8.1f MB  %s\n", r[k] / 1024, k}' \
	/proc/$apid/smaps | sort -rn | head -8
wait $wpid
