# SPDX-License-Identifier: Apache-2.0
"""A training job for the GPU-idle estimator's benchmark (tests/device/idle_estimate.sh): its
start-up (imports, model build: GPU idle), then steps that alternate a pure-Python CPU phase
(`cpu_phase`, ~3 ms, the GPU idle) with GPU work (`gpu_phase`: an MLP's forward, backward and
optimizer step, ~10 ms, waited for with .item()), a slow batch now and then (`slow_batch`,
~150-400 ms of Python: a stalled data loader), and half-way a longer CPU phase of other
functions (`augment` beside `cpu_phase`). Distinct Python functions per phase, so the GPU-idle
flame graph's shares can be compared between runs. Runs RUN_S seconds after its start-up and
prints one line: started/ended CLOCK_REALTIME and the pid."""
import os
import random
import sys
import time

T_START = time.time()
import numpy  # noqa: E402,F401  (start-up: what a training script imports)
import torch  # noqa: E402

RUN_S = float(os.environ.get("RUN_S", "120"))
rng = random.Random(int(os.environ.get("SEED", "1")))


def build():
    torch.manual_seed(0)
    layers = []
    for _ in range(4):
        layers += [torch.nn.Linear(2048, 2048), torch.nn.GELU()]
    m = torch.nn.Sequential(*layers).to("cuda", torch.bfloat16)
    return m, torch.optim.AdamW(m.parameters(), lr=1e-4), torch.randn(192, 2048, device="cuda",
                                                                      dtype=torch.bfloat16)


def cpu_phase(n):
    s = 0
    for i in range(n):
        s += i * i
    return s


def augment(n):
    s = 1.0
    for i in range(n):
        s = (s * 1.000001 + i) % 97.0
    return s


def slow_batch():
    t = time.monotonic() + rng.uniform(0.15, 0.4)
    while time.monotonic() < t:
        cpu_phase(2000)


def gpu_phase(m, opt, x):
    opt.zero_grad(set_to_none=True)
    loss = m(x).float().pow(2).mean()
    loss.backward()
    opt.step()
    return loss.item()


def main():
    m, opt, x = build()
    for _ in range(5):
        gpu_phase(m, opt, x)
    t0 = time.time()
    print("started %.6f %d %.6f" % (t0, os.getpid(), T_START), file=sys.stderr, flush=True)
    steps, next_stall = 0, time.monotonic() + rng.expovariate(1 / 5)
    end = time.monotonic() + RUN_S
    half = time.monotonic() + RUN_S / 2
    while time.monotonic() < end:
        if time.monotonic() >= next_stall:
            slow_batch()
            next_stall = time.monotonic() + rng.expovariate(1 / 5)
        cpu_phase(20000)
        if time.monotonic() >= half:
            augment(15000)
        gpu_phase(m, opt, x)
        steps += 1
    print("ended %.6f %d steps %d" % (time.time(), os.getpid(), steps), file=sys.stderr,
          flush=True)


if __name__ == "__main__":
    main()
