# SPDX-License-Identifier: Apache-2.0
"""Workloads of the trace-budget benchmark (issue 14; tests/device/trace_budget.sh).

Runs the phases named on the command line in one process, each PHASE_S seconds after a short
warm-up, and prints one JSON line per step: phase, CLOCK_MONOTONIC start and end (s), units done
(kernels, tokens or samples), so that steps can be placed inside or outside trace windows.
Phases: `launch` (t.add_(1) x 2000 then a synchronize: launch-bound), `gpt2` (GPT-2 small from a
config with random weights, fp16, batch 1, greedy decode of 64 new tokens with the KV cache),
`train` (bf16 MLP training step, then a Python CPU phase), `spin` (no GPU: a dry run). `prof:NAME` runs NAME inside
torch.profiler (CPU + CUDA activities); its post-processing is reported apart.
"""
import gc
import json
import os
import sys
import time

try:
    import torch
except ImportError:	# the `spin` phase: a dry run of the scripts on a machine without torch
    torch = None

PHASE_S = float(os.environ.get("PHASE_S", "8"))
dev = torch.device("cuda") if torch else None


def hw_counter(config):
    """A perf counter of this thread (user and kernel: uprobe traps and BPF programs that run in
    the thread count too), or None where the machine exposes no PMU. config: 0 cycles, 1
    instructions (PERF_TYPE_HARDWARE)."""
    import ctypes
    attr = (ctypes.c_uint8 * 128)()
    ctypes.c_uint32.from_buffer(attr, 0).value = 0	# type: PERF_TYPE_HARDWARE
    ctypes.c_uint32.from_buffer(attr, 4).value = 128	# size
    ctypes.c_uint64.from_buffer(attr, 8).value = config
    libc = ctypes.CDLL(None, use_errno=True)
    fd = libc.syscall(298, ctypes.byref(attr), 0, -1, -1, 0)	# perf_event_open(self, any cpu)
    if fd < 0:
        return None
    return lambda: int.from_bytes(os.read(fd, 8), "little")


def out(rec):
    print(json.dumps(rec), flush=True)


class Launch:
    units = 2000

    def __init__(self):
        self.t = torch.zeros(16, device=dev)

    def step(self):
        t = self.t
        for _ in range(2000):
            t.add_(1)
        torch.cuda.synchronize()


class GPT2:
    units = 64

    def __init__(self):
        from transformers import GPT2Config, GPT2LMHeadModel
        torch.manual_seed(0)
        self.m = GPT2LMHeadModel(GPT2Config()).to(dev).half().eval()
        self.ids = torch.randint(0, 50257, (1, 16), device=dev)

    @(torch.inference_mode() if torch else lambda f: f)
    def step(self):
        o = self.m(self.ids, use_cache=True)
        past = o.past_key_values
        for _ in range(64):
            nxt = o.logits[:, -1].argmax(-1, keepdim=True)
            o = self.m(nxt, past_key_values=past, use_cache=True)
            past = o.past_key_values
        torch.cuda.synchronize()


class Train:
    units = 256

    def __init__(self):
        torch.manual_seed(0)
        layers = []
        for _ in range(4):
            layers += [torch.nn.Linear(2048, 2048), torch.nn.GELU()]
        self.m = torch.nn.Sequential(*layers).to(dev, torch.bfloat16)
        self.opt = torch.optim.AdamW(self.m.parameters(), lr=1e-4)
        self.x = torch.randn(256, 2048, device=dev, dtype=torch.bfloat16)

    def step(self):
        self.opt.zero_grad(set_to_none=True)
        loss = self.m(self.x).float().pow(2).mean()
        loss.backward()
        self.opt.step()
        loss.item()
        s = 0
        for i in range(20000):  # the CPU phase: a data loader's Python work
            s += i * i


class Graph:
    """CUDA-graph replay: a captured 8-layer MLP forward replayed, a sync every 20 replays."""
    units = 20

    def __init__(self):
        torch.manual_seed(0)
        self.m = torch.nn.Sequential(*[torch.nn.Linear(1024, 1024) for _ in range(8)]).to(
            dev, torch.float16).eval()
        self.x = torch.randn(64, 1024, device=dev, dtype=torch.float16)
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s), torch.no_grad():
            for _ in range(3):
                self.m(self.x)
        torch.cuda.current_stream().wait_stream(s)
        self.g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.g), torch.no_grad():
            self.y = self.m(self.x)

    def step(self):
        for _ in range(self.units):
            self.g.replay()
        torch.cuda.synchronize()


class Spin:
    """No GPU: Python work and a short sleep a step (the scripts' dry run)."""
    units = 1

    def step(self):
        s = 0
        for i in range(20000):
            s += i * i
        time.sleep(0.001)


KINDS = {"launch": Launch, "gpt2": GPT2, "train": Train, "graph": Graph, "spin": Spin}


def run(name):
    prof = name.startswith("prof:")
    w = KINDS[name.split(":")[-1]]()
    for _ in range(3):
        w.step()
    ctx = None
    if prof:
        from torch.profiler import ProfilerActivity, profile
        ctx = profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA])
        ctx.__enter__()
    gc_s = [0.0, 0.0]	# seconds in the collector, start of the collection in progress

    def gc_cb(phase, _info):
        if phase == "start":
            gc_s[1] = time.monotonic()
        else:
            gc_s[0] += time.monotonic() - gc_s[1]
    gc.callbacks.append(gc_cb)
    ins, cyc = hw_counter(1), hw_counter(0)
    if not ins:
        print("no hardware counters: instructions not recorded", file=sys.stderr, flush=True)
    t_start = time.monotonic()
    print("started %s %.6f %d" % (name, t_start, os.getpid()), file=sys.stderr, flush=True)
    # the two clocks side by side, to put the server's windows (wall time) on the steps' clock
    out({"phase": name, "clock": 1, "mono": time.monotonic(), "wall": time.time()})
    steps = []
    stop = os.environ.get("STOP_FILE")	# run until that file exists (overhead_long.sh)
    while (not os.path.exists(stop)) if stop else time.monotonic() - t_start < PHASE_S:
        i0, y0 = ins() if ins else 0, cyc() if cyc else 0
        t0, c0, g0 = time.monotonic(), time.thread_time(), gc_s[0]
        w.step()
        steps.append((t0, time.monotonic(), time.thread_time() - c0, gc_s[0] - g0,
                      (ins() - i0) if ins else None, (cyc() - y0) if cyc else None))
    t_end = time.monotonic()
    post = 0.0
    if ctx is not None:
        p0 = time.monotonic()
        ctx.__exit__(None, None, None)
        post = time.monotonic() - p0
    gc.callbacks.remove(gc_cb)
    for a, b, c, g, i, y in steps:	# the main thread's CPU time, the collector's, instructions, cycles
        out({"phase": name, "t0": a, "t1": b, "units": w.units, "cpu": c, "gc": g, "ins": i,
             "cyc": y})
    out({"phase": name, "summary": 1, "t0": t_start, "t1": t_end, "steps": len(steps),
         "units": len(steps) * w.units, "rate": len(steps) * w.units / (t_end - t_start),
         "post_s": post, "pid": os.getpid()})


if __name__ == "__main__":
    if torch:
        torch.backends.cuda.matmul.allow_tf32 = True
    for ph in sys.argv[1:]:
        run(ph)
