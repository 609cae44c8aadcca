# SPDX-License-Identifier: Apache-2.0
"""Training loop whose DataLoader forks its workers anew every epoch (persistent_workers off, the
default), for tests/device/fork_workers.sh: 4 workers named dl_worker (their comm) run a pure
Python transform per item (~0.5 ms of CPU), the main process trains a small MLP on the GPU.
Epochs are short (64 batches), so workers are forked every second or so, as a short-epoch or
validation loader does. Prints "pid PID" first. Usage: dataloader_fork.py SECONDS"""
import os
import sys
import time

import torch
from torch.utils.data import DataLoader, Dataset


class Items(Dataset):
    def __len__(self):
        return 64 * 32

    def __getitem__(self, i):
        return transform(i)


def transform(i):
    """Pure Python work of one item, then a tensor."""
    acc = 0
    for k in range(2500):
        acc = (acc * 31 + k * i) % 1000003
    return torch.full((256,), float(acc % 7))


def name_worker(_):
    with open("/proc/self/comm", "w") as f:
        f.write("dl_worker")


def main():
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 20
    print("pid %d" % os.getpid(), flush=True)
    dev = torch.device("cuda")
    model = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.GELU(),
                                torch.nn.Linear(1024, 256)).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    end = time.monotonic() + seconds
    epochs = 0
    while time.monotonic() < end:
        loader = DataLoader(Items(), batch_size=32, num_workers=4, worker_init_fn=name_worker,
                            multiprocessing_context="fork")
        for x in loader:
            x = x.to(dev, non_blocking=True)
            loss = model(x).square().mean()
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
        epochs += 1
    torch.cuda.synchronize()
    print("epochs %d" % epochs, flush=True)


main()
