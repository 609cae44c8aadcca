# SPDX-License-Identifier: Apache-2.0
"""A PyTorch loop for the unwinder's device run: a pure-Python CPU phase, then bf16 matmuls on
the GPU, for SECONDS. Prints its pid first."""
import os
import sys
import time

import torch

print("pid", os.getpid(), flush=True)
end = time.time() + float(sys.argv[1] if len(sys.argv) > 1 else 20)
a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)


def python_phase(n):
    s = 0
    for i in range(n):
        s += i * i % 7
    return s


while time.time() < end:
    python_phase(200000)
    for _ in range(20):
        a = (a @ a).clamp_(-1, 1)
    torch.cuda.synchronize()
