# SPDX-License-Identifier: Apache-2.0
"""PyTorch loop for tests/device/pystacks_device.sh (issue #13): the main thread runs a pure-Python
function (python_cpu_phase) while the GPU is idle, then bf16 MLP training steps (train_step:
forward, backward, AdamW) and waits for them. Prints "pid PID" first, then one JSON line per
phase with Unix-ns bounds. Usage: pystacks_torch.py SECONDS"""
import json
import os
import sys
import time

import torch


def python_cpu_phase(ms):
    """Pure Python: no tensor work, no GPU."""
    end = time.perf_counter() + ms / 1000.0
    x = 0
    while time.perf_counter() < end:
        for i in range(500):
            x += i * i
    return x


def train_step(model, opt, x, y):
    out = model(x)
    loss = torch.nn.functional.mse_loss(out, y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    return loss


def main():
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 20
    print("pid %d" % os.getpid(), flush=True)
    dev = torch.device("cuda")
    model = torch.nn.Sequential(torch.nn.Linear(4096, 8192), torch.nn.GELU(),
                                torch.nn.Linear(8192, 4096)).to(dev, torch.bfloat16)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randn(8192, 4096, device=dev, dtype=torch.bfloat16)
    y = torch.randn(8192, 4096, device=dev, dtype=torch.bfloat16)
    for _ in range(3):
        train_step(model, opt, x, y)
    torch.cuda.synchronize()
    deadline = time.monotonic() + seconds
    steps = 0
    while time.monotonic() < deadline:
        t0 = time.time_ns()
        python_cpu_phase(150)
        t1 = time.time_ns()
        for _ in range(4):
            train_step(model, opt, x, y)
        torch.cuda.synchronize()
        t2 = time.time_ns()
        steps += 4
        print(json.dumps({"cpu": [t0, t1], "gpu": [t1, t2]}), flush=True)
    print(json.dumps({"steps": steps}), flush=True)


main()
