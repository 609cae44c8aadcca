# SPDX-License-Identifier: Apache-2.0
"""Workloads for tests/device/idle_compare.sh (issue 31): each has a start-up (imports, model
build: GPU idle), a CPU phase per step in a Python function of its own, and the GPU work
dispatched from a Python function of its own (`dispatch` below), so a GPU-idle flame graph and
the kernels' launch stacks can be compared between runs.
  jax         a jitted MLP training step after a pure-Python batch builder (XLA launches the
              kernels from its own runtime threads)
  dataloader  a training loop starved by a slow DataLoader (2 worker processes decoding samples
              in Python; the training thread waits on their queue)
  gpt2        GPT-2 (random weights, 12 layers, fp16) greedy decode of 32 tokens per request,
              after a pure-Python prompt builder
  graph       a CUDA graph of an MLP's forward replayed per step, after a Python input builder
Usage: idle_workloads.py MODE (RUN_S seconds of steps after the start-up). Prints to stderr
`started T PID T_IMPORT` and `ended T PID steps N`."""
import os
import sys
import time

T_START = time.time()
MODE = sys.argv[1]
RUN_S = float(os.environ.get("RUN_S", "25"))
DISPATCH = {"jax": "run_step", "dataloader": "train_step", "gpt2": "generate_tokens",
            "graph": "replay_graph"}


def python_work(n):
    s = 0
    for i in range(n):
        s += (i * 31) % 7
    return s


def loop(step):
    for _ in range(3):
        step()
    t0 = time.time()
    print("started %.6f %d %.6f" % (t0, os.getpid(), T_START), file=sys.stderr, flush=True)
    end, steps = time.monotonic() + RUN_S, 0
    while time.monotonic() < end:
        step()
        steps += 1
    print("ended %.6f %d steps %d" % (time.time(), os.getpid(), steps), file=sys.stderr,
          flush=True)


# ---- jax ------------------------------------------------------------------------------------
def jax_main():
    import jax
    import jax.numpy as jnp
    import numpy as np

    def build_batch():
        python_work(30000)
        return np.full((512, 1024), 0.5, dtype=np.float32)

    @jax.jit
    def train_step(p, x):
        def loss(p):
            h = jnp.tanh(x @ p["w1"])
            h = jnp.tanh(h @ p["w2"])
            return jnp.mean((h @ p["w3"]) ** 2)
        g = jax.grad(loss)(p)
        return {k: p[k] - 1e-4 * g[k] for k in p}

    key = jax.random.PRNGKey(0)
    p = {"w1": jax.random.normal(key, (1024, 4096)) * 0.01,
         "w2": jax.random.normal(key, (4096, 4096)) * 0.01,
         "w3": jax.random.normal(key, (4096, 1024)) * 0.01}
    st = {"p": p}

    def run_step(x):
        st["p"] = train_step(st["p"], x)
        for _ in range(3):	# a few steps per batch, as gradient accumulation would
            st["p"] = train_step(st["p"], x)
        jax.block_until_ready(st["p"])

    loop(lambda: run_step(build_batch()))


# ---- torch ----------------------------------------------------------------------------------
def mlp(torch, width=2048, depth=4):
    layers = []
    for _ in range(depth):
        layers += [torch.nn.Linear(width, width), torch.nn.GELU()]
    return torch.nn.Sequential(*layers).to("cuda", torch.bfloat16)


class Samples:
    def __len__(self):
        return 1 << 30

    def __getitem__(self, i):
        import torch
        return torch.full((2048,), float(decode_sample(i)), dtype=torch.float32)


def decode_sample(i):
    return python_work(12000) + i % 3


def dataloader_main():
    import torch
    m = mlp(torch)
    opt = torch.optim.AdamW(m.parameters(), lr=1e-4)
    loader = iter(torch.utils.data.DataLoader(Samples(), batch_size=32, num_workers=2,
                                              prefetch_factor=2))

    def train_step(x):
        opt.zero_grad(set_to_none=True)
        loss = m(x.to("cuda", torch.bfloat16, non_blocking=True)).float().pow(2).mean()
        loss.backward()
        opt.step()
        return loss.item()

    loop(lambda: train_step(next(loader)))


def gpt2_main():
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel
    torch.manual_seed(0)
    attn = os.environ.get("GPT2_ATTN")	# "eager": no SDPA (gpt2_crash.sh bisects with it)
    cfg = GPT2Config(attn_implementation=attn) if attn else GPT2Config()
    model = GPT2LMHeadModel(cfg).to("cuda", torch.float16).eval()

    def build_prompt():
        python_work(40000)
        return torch.arange(64, device="cuda").unsqueeze(0) % 50000

    @torch.inference_mode()
    def generate_tokens(ids):
        out = model.generate(ids, max_new_tokens=32, min_new_tokens=32, do_sample=False,
                             pad_token_id=0)
        return out[0, -1].item()

    loop(lambda: generate_tokens(build_prompt()))


def graph_main():
    import torch
    m = mlp(torch, 4096, 6).eval()
    static_x = torch.zeros(256, 4096, device="cuda", dtype=torch.bfloat16)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s), torch.inference_mode():
        for _ in range(3):
            m(static_x)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g), torch.inference_mode():
        static_y = m(static_x)

    def prepare_inputs():
        python_work(30000)
        static_x.fill_(0.25)

    def replay_graph():
        for _ in range(4):
            g.replay()
        return static_y[0, 0].item()

    def step():
        prepare_inputs()
        replay_graph()

    loop(step)


if __name__ == "__main__":
    {"jax": jax_main, "dataloader": dataloader_main, "gpt2": gpt2_main,
     "graph": graph_main}[MODE]()
