# SPDX-License-Identifier: Apache-2.0
"""Six PyTorch workloads for the findings engine on the GPU machine
(tests/device/insights_workloads.sh, docs/insights.md), each a realistic instance of one pattern
of waste, and one without any:

  item      a training step of an MLP with loss.item() every step  -> host_sync_per_step
  tokenize  the training thread tokenizes its text batch in Python  -> input_on_launch_thread
  starved   a DataLoader with one worker whose __getitem__ is slow  -> starved_dataloader
  decode    a token-by-token decode loop of small ops, no sync      -> launch_bound
  pageable  each step copies 256 MB from pageable host memory       -> sync_copies
  healthy   large bf16 matmuls, a sync every 50 steps               -> (none)

Usage: python3 insights_workloads.py MODE; runs RUN_S seconds (default 25) after its set-up and
prints `started <CLOCK_REALTIME> <pid>` before the measured part and `ended <CLOCK_REALTIME>`."""
import os
import sys
import time

import torch

RUN_S = float(os.environ.get("RUN_S", "25"))
MODE = sys.argv[1] if len(sys.argv) > 1 else "healthy"
dev = "cuda"


def mlp(width, depth):
    torch.manual_seed(0)
    layers = []
    for _ in range(depth):
        layers += [torch.nn.Linear(width, width), torch.nn.GELU()]
    m = torch.nn.Sequential(*layers).to(dev)
    return m, torch.optim.SGD(m.parameters(), lr=1e-3)


def loop(step):
    print("started %.6f %d" % (time.time(), os.getpid()), file=sys.stderr, flush=True)
    t_end = time.monotonic() + RUN_S
    n = 0
    while time.monotonic() < t_end:
        step(n)
        n += 1
    torch.cuda.synchronize()
    print("ended %.6f steps %d" % (time.time(), n), file=sys.stderr, flush=True)


def train_step(m, opt, x):
    loss = m(x).float().pow(2).mean()
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    return loss


def run_item():
    m, opt = mlp(1024, 6)
    x = torch.randn(512, 1024, device=dev)

    def step(n):
        loss = train_step(m, opt, x)
        losses.append(loss.item())	# the per-step host sync
    losses = []
    loop(step)


WORDS = ("the quick brown fox jumps over the lazy dog while gpus wait for the data " * 4).split()


def tokenize(texts, vocab):
    out = []
    for t in texts:
        ids = []
        for w in t.split():
            h = 0
            for ch in w:
                h = (h * 31 + ord(ch)) % 50021
            ids.append(vocab.setdefault(h, len(vocab) % 32000))
        out.append(ids[:128] + [0] * (128 - len(ids[:128])))
    return out


def run_tokenize():
    emb = torch.nn.Embedding(32000, 1024).to(dev)
    m, opt = mlp(1024, 4)
    opt.add_param_group({"params": emb.parameters()})
    vocab = {}
    texts = [" ".join(WORDS[i % 7:] + WORDS[:i % 7]) for i in range(256)]

    def step(n):
        ids = torch.tensor(tokenize(texts, vocab), device=dev)	# on the training thread
        loss = train_step(m, opt, emb(ids).mean(1))
        if n % 20 == 0:
            loss.item()
    loop(step)


class SlowSet(torch.utils.data.Dataset):
    def __len__(self):
        return 1 << 30

    def __getitem__(self, i):
        s = 0.0
        for k in range(20000):	# decoding/augmenting one sample in Python
            s += (k * i) % 7
        return torch.full((1024,), s % 3, dtype=torch.float32)


def run_starved():
    m, opt = mlp(1024, 4)
    dl = torch.utils.data.DataLoader(SlowSet(), batch_size=64, num_workers=1)
    it = iter(dl)
    next(it)

    def step(n):
        x = next(it).to(dev, non_blocking=True)
        train_step(m, opt, x)
    loop(step)


def run_decode():
    torch.manual_seed(0)
    ws = [torch.randn(256, 256, device=dev) * 0.05 for _ in range(24)]
    h = torch.randn(1, 256, device=dev)

    @torch.no_grad()
    def step(n):
        nonlocal h
        for w in ws:	# one small kernel launch after another, tiny ones in between
            h = torch.tanh(h @ w) + h * 0.5
        if n % 200 == 0:
            h = h / (h.norm() + 1)
    loop(step)


def run_pageable():
    m, opt = mlp(2048, 2)
    host = torch.randn(64, 1024, 1024)	# 256 MB of pageable memory
    small = torch.randn(256, 2048, device=dev)

    def step(n):
        dev_x = host.to(dev)	# pageable and blocking
        train_step(m, opt, small + dev_x[0, :256, :1].mean())
    loop(step)


def run_healthy():
    a = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)

    def step(n):
        nonlocal a
        a = (a @ b) * 1e-4
        if n % 50 == 0:
            a.sum().item()
    loop(step)


if __name__ == "__main__":
    {"item": run_item, "tokenize": run_tokenize, "starved": run_starved, "decode": run_decode,
     "pageable": run_pageable, "healthy": run_healthy}[MODE]()
