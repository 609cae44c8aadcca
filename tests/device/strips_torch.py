# SPDX-License-Identifier: Apache-2.0
"""PyTorch loop with a deliberately slow CPU data-loading step, for the strips check on the GPU
machine (tests/device/strips_device.sh). Each step: slow_loader() burns ~100 ms of Python on
the CPU while the GPU idles, then gpu_step() queues ~100 ms of matrix products and waits in
torch.cuda.current_stream().synchronize() (cuStreamSynchronize). The primary context is made
blocking-sync first (CU_CTX_SCHED_BLOCKING_SYNC) so that the wait sleeps instead of spinning.
Writes one JSON line per phase: phase, tid, t0/t1 (Unix ns). Usage: strips_torch.py OUT SECONDS
"""
import ctypes
import json
import sys
import threading
import time

out_path, seconds = sys.argv[1], float(sys.argv[2])
cu = ctypes.CDLL("libcuda.so.1")
dev = ctypes.c_int()
assert cu.cuInit(0) == 0
assert cu.cuDeviceGet(ctypes.byref(dev), 0) == 0
setf = getattr(cu, "cuDevicePrimaryCtxSetFlags_v2", None) or cu.cuDevicePrimaryCtxSetFlags
print("set blocking sync:", setf(dev, 4), flush=True)

import torch  # noqa: E402

OFF = time.time_ns() - time.monotonic_ns()
out = open(out_path, "w")
tid = threading.get_native_id()


def now():
    return time.monotonic_ns() + OFF


def slow_loader(n):
    s = 0
    for i in range(n):
        s += i * i % 7
    return s


def gpu_step(a, b, k):
    c = None
    for _ in range(k):
        c = a @ b
    torch.cuda.current_stream().synchronize()
    return c


a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
gpu_step(a, b, 3)
t = now()
gpu_step(a, b, 20)
k = max(1, int(20 * 100e6 / (now() - t)))
t = now()
slow_loader(200000)
n = max(1000, int(200000 * 100e6 / (now() - t)))
print("matmuls per step", k, "loader iterations", n, flush=True)
time.sleep(2.0)  # the agent finds the process (it maps libcuda) and probes the library
end = now() + seconds * 1e9
steps = 0
while now() < end:
    t0 = now()
    slow_loader(n)
    t1 = now()
    gpu_step(a, b, k)
    t2 = now()
    out.write(json.dumps({"phase": "load", "tid": tid, "t0": t0, "t1": t1}) + "\n")
    out.write(json.dumps({"phase": "gpu", "tid": tid, "t0": t1, "t1": t2}) + "\n")
    steps += 1
out.close()
print("steps", steps, flush=True)
