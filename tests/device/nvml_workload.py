#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
# GPU workload for tests/device/nvml_h200.sh: busy stretches and idle gaps on a known schedule,
# relative to a start time written into the GO file. Writes the busy intervals it really ran
# (Unix ns) as JSON. Roles: "main" (idle, busy, bursts, then shares the GPU) and "second"
# (bursts only while sharing). Usage: nvml_workload.py ROLE READY_FILE GO_FILE OUT_JSON
import json
import os
import sys
import time

import torch

role, ready, go, out = sys.argv[1:5]
dev = torch.device("cuda")
n = 8192 if role == "main" else 4096
a = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
b = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
for _ in range(3):
    torch.mm(a, b)
torch.cuda.synchronize()
open(ready, "w").close()
while not os.path.exists(go) or os.path.getsize(go) == 0:
    time.sleep(0.001)
t0 = float(open(go).read())
busy = []


def wait_until(t):
    d = t0 + t - time.time()
    if d > 0:
        time.sleep(d)


def run_busy(t_from, t_to):
    wait_until(t_from)
    start = time.time_ns()
    while time.time() < t0 + t_to:
        for _ in range(4):
            torch.mm(a, b)
        torch.cuda.synchronize()
    busy.append([start, time.time_ns()])


extra = None
if role == "main":
    # 0-3 s idle; 3-6 s busy with 20 GiB more memory; 6-11 s five 0.4 s bursts 0.6 s apart;
    # 11-14 s busy while "second" runs bursts (two processes share the GPU); then idle.
    wait_until(3.0)
    extra = torch.empty(20 << 30, dtype=torch.uint8, device=dev)
    run_busy(3.0, 6.0)
    del extra
    torch.cuda.empty_cache()
    for k in range(5):
        run_busy(6.0 + k, 6.4 + k)
    run_busy(11.0, 14.0)
else:
    t = 11.0
    while t < 14.0 - 1e-9:
        run_busy(t, t + 0.1)
        t += 0.3
json.dump({"role": role, "pid": os.getpid(), "t0_ns": int(t0 * 1e9), "busy_ns": busy},
          open(out, "w"))
