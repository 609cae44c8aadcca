# SPDX-License-Identifier: Apache-2.0
"""GPU workloads for the CUPTI checks and benchmark (tests/device/cupti_device.sh).

Runs, in one process, the phases named on the command line, each as `MODE:WORKLOAD` where MODE
is `plain` (no profiler in this process; gpuscope may be injected) or `prof` (torch.profiler
recording CPU + CUDA activities) and WORKLOAD is `train` (training steps of a small
transformer), `tiny` (a loop of tiny elementwise kernels at the highest launch rate) or `graph`
(the same loop captured in a CUDA graph and replayed). Each phase prints one JSON line: wall
window (Unix ns, after a synchronize on both sides), elapsed seconds, kernels launched, and for
`prof` the kernels torch.profiler recorded. `coexist` runs torch.profiler in a process where
gpuscope holds CUPTI, then a tiny loop after it, and reports what each side saw.
"""
import json
import os
import sys
import time

import torch

TRAIN_STEPS = int(os.environ.get("TRAIN_STEPS", "40"))
TINY_N = int(os.environ.get("TINY_N", "30000"))
GRAPH_NODES = int(os.environ.get("GRAPH_NODES", "300"))
GRAPH_REPLAYS = int(os.environ.get("GRAPH_REPLAYS", "100"))
OUT = os.environ.get("OUT_DIR", ".")

dev = torch.device("cuda")
torch.backends.cuda.matmul.allow_tf32 = True


def emit(rec):
    rec["pid"] = os.getpid()
    print(json.dumps(rec), flush=True)


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        layer = torch.nn.TransformerEncoderLayer(d_model=512, nhead=8, dim_feedforward=2048,
                                                 batch_first=True, dropout=0.0)
        self.enc = torch.nn.TransformerEncoder(layer, num_layers=4, enable_nested_tensor=False)
        self.head = torch.nn.Linear(512, 1000)

    def forward(self, x):
        return self.head(self.enc(x).mean(dim=1))


torch.manual_seed(0)
model = Model().to(dev)
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
xb = torch.randn(32, 128, 512, device=dev)
yb = torch.randint(0, 1000, (32,), device=dev)
tiny = torch.zeros(16, device=dev)


def train_step():
    opt.zero_grad(set_to_none=True)
    loss = torch.nn.functional.cross_entropy(model(xb), yb)
    loss.backward()
    opt.step()


def tiny_loop(n):
    for _ in range(n):
        tiny.add_(1.0)


graph = None


def make_graph():
    global graph
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        tiny_loop(3)
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        tiny_loop(GRAPH_NODES)


def run(workload):
    """Runs one workload, returns kernels launched (None when not known in advance)."""
    if workload == "train":
        for _ in range(TRAIN_STEPS):
            train_step()
        return None
    if workload == "tiny":
        tiny_loop(TINY_N)
        return TINY_N
    if workload == "graph":
        for _ in range(GRAPH_REPLAYS):
            graph.replay()
        return GRAPH_NODES * GRAPH_REPLAYS
    raise SystemExit("unknown workload " + workload)


def warm():
    for _ in range(5):
        train_step()
    tiny_loop(2000)
    make_graph()
    for _ in range(5):
        graph.replay()
    torch.cuda.synchronize()


def phase(mode, workload, tag):
    from torch.profiler import ProfilerActivity, profile
    prof = None
    if mode == "prof":
        prof = profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA])
        prof.__enter__()
    torch.cuda.synchronize()
    t0 = time.time_ns()
    c0 = time.perf_counter()
    launched = run(workload)
    torch.cuda.synchronize()
    el = time.perf_counter() - c0
    t1 = time.time_ns()
    rec = {"mode": mode, "workload": workload, "tag": tag, "t0": t0, "t1": t1, "elapsed": el,
           "launched": launched}
    if prof is not None:
        p0 = time.perf_counter()
        prof.__exit__(None, None, None)
        kernels = []
        for e in prof.events():
            if e.device_type == torch.autograd.DeviceType.CUDA:
                kernels.append((e.name, e.time_range.elapsed_us()))
        rec["prof_post_s"] = time.perf_counter() - p0
        rec["prof_kernels"] = len(kernels)
        if workload == "train":
            path = os.path.join(OUT, "prof_train_%d.json" % os.getpid())
            with open(path, "w") as f:
                json.dump(kernels, f)
            rec["prof_file"] = path
    emit(rec)


def coexist():
    """torch.profiler while gpuscope holds CUPTI, then plain work again."""
    from torch.profiler import ProfilerActivity, profile
    torch.cuda.synchronize()
    t0 = time.time_ns()
    err = None
    n = -1
    try:
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            tiny_loop(1000)
            torch.cuda.synchronize()
        n = sum(1 for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA)
    except Exception as e:  # noqa: BLE001 - we report whatever happens
        err = repr(e)
    torch.cuda.synchronize()
    t1 = time.time_ns()
    time.sleep(0.5)
    tiny_loop(1000)
    torch.cuda.synchronize()
    t2 = time.time_ns()
    emit({"mode": "coexist", "t0": t0, "t1": t1, "t2": t2, "prof_kernels": n, "error": err,
          "launched_during": 1000, "launched_after": 1000})


def main():
    warm()
    for i, spec in enumerate(sys.argv[1:]):
        if spec == "coexist":
            coexist()
            continue
        mode, workload = spec.split(":")
        phase(mode, workload, i)
    time.sleep(0.3)   # let CUPTI's flush period deliver the last buffers before exit


if __name__ == "__main__":
    main()
