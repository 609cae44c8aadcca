# SPDX-License-Identifier: Apache-2.0
"""DistributedDataParallel training loop for the multi-GPU node run (issue #9): one process per
GPU, NCCL all-reduce. Rank 0 does extra CPU work before each step, so the other ranks wait on
the all-reduce: the GPU-idle flame graph of the rank that waits longest should show it.
Run with: python3 -m torch.distributed.run --nproc_per_node=N tests/device/ddp_train.py STEPS"""
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn


def slow_cpu_step(ms):
    """Plain CPU work on rank 0 (a stand-in for a slow data loader)."""
    end = time.perf_counter() + ms / 1000.0
    x = 0
    while time.perf_counter() < end:
        x += 1
    return x


def main():
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 50
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)))
    model = nn.Sequential(nn.Linear(4096, 8192), nn.ReLU(), nn.Linear(8192, 4096)).cuda()
    ddp = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=1e-3)
    x = torch.randn(256, 4096, device="cuda")
    t0 = time.time()
    for _ in range(steps):
        if rank == 0:
            slow_cpu_step(20)
        opt.zero_grad(set_to_none=True)
        loss = ddp(x).square().mean()
        loss.backward()
        opt.step()
    torch.cuda.synchronize()
    print("rank %d/%d pid %d: %d steps in %.2f s" % (rank, world, os.getpid(), steps, time.time() - t0),
          flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
