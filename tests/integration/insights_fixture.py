# SPDX-License-Identifier: Apache-2.0
"""The findings fixture (docs/insights.md): one node per workload over [T, T+D), each holding
GPU 0 and showing one detector's pattern, plus a healthy compute-bound workload that must get
no finding. As tests/tools/batchgen scripts (one per node: a script's `node` line starts a new
batch). Sampling period 100 ms. Known answer in expected(); at $3.60 a GPU-hour one GPU-second
costs $0.001.

- ns-input   (n-in): GPU busy 5 s of every 10; the main thread (the only one launching) runs
  all the time; its GPU-idle samples: 30 % tokenize (train.py:42)... 60 %, collate 30 %, a CUDA
  launch 10 %. -> input_on_launch_thread, 300 s idle x on-CPU 1 x 0.9 outside CUDA = 270 s.
- ns-starved (n-st): busy 5 s of 10; the main thread runs while the GPU is busy and blocks on a
  futex (in _get_data, dataloader.py:1295) while it is idle; the loader thread runs then.
  -> starved_dataloader, 300 s.
- ns-sync    (n-sy): 100 ms steps, busy 80 ms, idle 20 ms; each step a cuStreamSynchronize from
  train_step (train.py:88) returns as the GPU drains; the thread then launches (framework code).
  -> host_sync_per_step, 120 s, 70.05 ms a step.
- ns-launch  (n-lb): NVML utilization 50 % every second; ten 0.1 s budget trace windows with
  20 us kernels every 40 us; the thread is on a CPU all the time in launch code.
  -> launch_bound, 300 s, estimated (windows stand for the undecided time).
- ns-copies  (n-cp): busy 5 s of 10; in the idle 5 s the thread spends 4 s in cuMemcpyAsync of
  400 MB (train.py:30). -> sync_copies, 300 s x 0.8 = 240 s.
- ns-idle    (n-id): busy 5 s of 10; in the idle 5 s the thread blocks on io (recv, dist.py:12)
  and nothing else on the node runs. -> node_idle, 300 s.
- ns-held    (n-hd): memory held, utilization 0 the whole range. -> held_unused, 600 s.
- ns-throttle (n-th): utilization 100; from 60 s on, thermal slowdown (0x20) with the SM clock
  at 1485 MHz of 1980. -> throttled, 600 x (540 x 0.25) / 599 s.
- ns-healthy (n-ok): busy 9.6 s of 10, a sync per cycle, SW power cap (0x4, not a fault) with
  lower clocks. -> nothing.
- ns-item    (n-it): the H100's per-step .item() (tests/device/insights_workloads.py run_item) as
  the default agent records it, for the first 60 s: 20 ms steps, kernels 9.5 ms of each (busy
  47.5 %); the main thread launches the forward pass and the optimizer, blocks 35 % of the time
  while autograd's device thread (tid +1, pt_autograd_0, more launches than the main thread's)
  runs 32.5 % launching the backward pass, then cuStreamSynchronize at train.py:95 waits 2 ms
  until the step's last kernel ends and returns 10 us after it, then Python bookkeeping (both
  threads in summary states: they block too often for states of their own). The GPU's time:
  GPM sm_active 0.475 every 100 ms, NVML utilization every second, two 0.6 s duty-cycle windows
  of kernels (2 % of the time). -> host_sync_per_step, 60 s x 52.5 % idle x every gap in the
  steps of the 60 syncs seen, which all drained the GPU = 31.5 s, estimated (the windows saw
  2 % of the idle time); not starved_dataloader (the device thread launches for the blocked
  main thread: before, it counted as an input worker running 0.33 thread-s per idle s).
"""

MS = 1_000_000
US = 1_000
S = 1_000_000_000
PERIOD = 100 * MS
PRICE = 3.60

WORKLOADS = ["input", "starved", "sync", "launch", "copies", "idle", "held", "throttle", "healthy",
             "item"]
NODES = {"input": "n-in", "starved": "n-st", "sync": "n-sy", "launch": "n-lb", "copies": "n-cp",
         "idle": "n-id", "held": "n-hd", "throttle": "n-th", "healthy": "n-ok", "item": "n-it"}
ITEM_S = 60                       # the .item() workload's seconds (from the range's start)
ITEM_STEP = 20 * MS
ITEM_BUSY = [(500, 2500), (3500, 5000), (5500, 7000), (7500, 9000), (10000, 13000)]  # us

PY_MAIN = "main![python]!train.py:120"
LAUNCH = "cuLaunchKernel!libcuda.so.1"
DISPATCH = "at::native::add!libtorch_cpu.so"


class Script:
    def __init__(self, node):
        self.L = [f"node {node}", f"period {PERIOD}"]
        self.stacks = {}

    def stack(self, frames):
        """The batch index of a stack (batchgen numbers distinct stacks in order of use)."""
        if frames not in self.stacks:
            self.stacks[frames] = len(self.stacks)
            self.L.append(f"stack {frames}")
        return self.stacks[frames]

    def sample(self, t, kind, value, labels, frames):
        self.stack(frames)
        self.L.append(f"sample {t} {kind} {value} {labels} {frames}")

    def add(self, line):
        self.L.append(line)

    def text(self):
        return "\n".join(self.L) + "\n"


def gpu_labels():
    return "gpu=0,gpu_uuid=GPU-0000,gpu_model=NVIDIA%20H100"


def common(sc, t0, d_s, pid, busy_cycle_s=None, window=True):
    """Holder points, a whole-range trace window and per-cycle busy intervals."""
    g = gpu_labels()
    for s in range(1, d_s + 1):
        sc.add(f"metric gpu_process_memory_bytes {g},pid={pid},comm=train {t0 + s * S} 1000000000")
    if window:
        sc.add(f"interval gpu_observed gpu=0,source=kernels {t0} {t0 + d_s * S} -")
    if busy_cycle_s is not None:
        for k in range(d_s // 10):
            c = t0 + k * 10 * S
            sc.add(f"interval gpu_busy gpu=0,source=kernels {c} {c + int(busy_cycle_s * S)} -")


def labels(ns, pid, tid=None, thread="train"):
    base = f"pid={pid},comm=train,namespace={ns},container=main"
    return base + (f",tid={tid},thread={thread}" if tid else "")


def launches(sc, ns, pid, a, b, calls):
    st = sc.stack(f"{PY_MAIN};forward![python]!model.py:10;{LAUNCH}")
    sc.add(f"interval cuda_api {labels(ns, pid, pid)} {a} {b} "
           f"api=cuLaunchKernel,calls={calls},total_ns={calls * 5 * US},stack_id={st}")


def script(name, t0, d_s):
    node, ns, pid = NODES[name], "ns-" + name, 101 + WORKLOADS.index(name)
    sc = Script(node)
    main = labels(ns, pid, pid)
    run = "state=running,cpu=1"
    if name == "input":
        common(sc, t0, d_s, pid, 5)
        for k in range(d_s // 10):
            c = t0 + k * 10 * S
            sc.add(f"interval thread_state {main} {c} {c + 10 * S} {run}")
            launches(sc, ns, pid, c, c + 5 * S, 5000)
            for j in range(50):
                sc.sample(c + 50 * MS + j * 100 * MS, "cpu", 1, main,
                          f"{PY_MAIN};forward![python]!model.py:10;{DISPATCH};{LAUNCH}")
                t = c + 5 * S + 50 * MS + j * 100 * MS
                fr = (f"{PY_MAIN};tokenize![python]!train.py:42;_PyEval_EvalFrameDefault!libpython3.11.so"
                      if j < 30 else f"{PY_MAIN};collate![python]!train.py:57" if j < 45 else
                      f"{PY_MAIN};forward![python]!model.py:10;{LAUNCH}")
                sc.sample(t, "cpu", 1, main, fr)
            for j in range(5):
                sc.add(f"interval gpu_kernel {gpu_labels()},pid={pid},comm=train {c + j * S} "
                       f"{c + (j + 1) * S} name=gemm,stream=7")
    elif name == "starved":
        common(sc, t0, d_s, pid, 5)
        loader = labels(ns, pid, pid + 1000, "loader")
        for k in range(d_s // 10):
            c = t0 + k * 10 * S
            sc.add(f"interval thread_state {main} {c} {c + 5 * S} {run}")
            sc.add(f"interval thread_state {main} {c + 5 * S} {c + 10 * S} state=blocked,reason=futex")
            sc.add(f"interval thread_state {loader} {c} {c + 5 * S} state=blocked,reason=io")
            sc.add(f"interval thread_state {loader} {c + 5 * S} {c + 10 * S} state=running,cpu=2")
            launches(sc, ns, pid, c, c + 5 * S, 5000)
            for j in range(50):
                sc.sample(c + 50 * MS + j * 100 * MS, "cpu", 1, main,
                          f"{PY_MAIN};forward![python]!model.py:10;{LAUNCH}")
                sc.sample(c + 5 * S + 50 * MS + j * 100 * MS, "cpu", 1, loader,
                          "loader_main![python]!worker.py:300;load_batch![python]!data.py:77")
            sc.sample(c + 5 * S + 500 * MS, "offcpu_ns", 4500000000, main,
                      f"{PY_MAIN};__next__![python]!dataloader.py:631;"
                      "_get_data![python]!dataloader.py:1295;k:futex_wait_queue;k:schedule")
    elif name == "sync":
        common(sc, t0, d_s, pid)
        sync_st = sc.stack(f"{PY_MAIN};train_step![python]!train.py:88;cuStreamSynchronize!libcuda.so.1")
        for k in range(d_s // 10):
            c = t0 + k * 10 * S
            sc.add(f"interval thread_state {main} {c} {c + 10 * S} {run}")
            launches(sc, ns, pid, c, c + 10 * S, 2000)
        for st in range(d_s * 10):
            a = t0 + st * 100 * MS
            sc.add(f"interval gpu_busy gpu=0,source=kernels {a} {a + 80 * MS} -")
            sc.add(f"interval cuda_api {main} {a + 10 * MS} {a + 80 * MS + 50 * US} "
                   f"api=cuStreamSynchronize,calls=1,total_ns={70 * MS + 50 * US},stack_id={sync_st}")
            sc.sample(a + 90 * MS, "cpu", 1, main,
                      f"{PY_MAIN};train_step![python]!train.py:80;{DISPATCH}")
            sc.sample(a + 40 * MS, "cpu", 1, main,
                      f"{PY_MAIN};train_step![python]!train.py:88;cuStreamSynchronize!libcuda.so.1")
    elif name == "launch":
        g = gpu_labels()
        common(sc, t0, d_s, pid, window=False)
        for s in range(1, d_s + 1):
            sc.add(f"metric gpu_utilization {g} {t0 + s * S} 50")
        for k in range(d_s // 10):
            c = t0 + k * 10 * S
            sc.add(f"interval thread_state {main} {c} {c + 10 * S} {run}")
            launches(sc, ns, pid, c, c + 10 * S, 250000)
            for j in range(100):
                sc.sample(c + 50 * MS + j * 100 * MS, "cpu", 1, main,
                          f"{PY_MAIN};decode![python]!decode.py:21;{DISPATCH};{LAUNCH}")
        for w in range(d_s // 60):
            a = t0 + w * 60 * S + 30 * S + 500 * MS - 30 * US  # the 100 ms sample in a gap
            sc.add(f"interval gpu_observed gpu=0,source=kernels,reason=budget {a} {a + 100 * MS} -")
            for i in range(2500):
                x = a + i * 40 * US
                sc.add(f"interval gpu_busy gpu=0,source=kernels {x} {x + 20 * US} -")
                sc.add(f"interval gpu_kernel {g},pid={pid},comm=train {x} {x + 20 * US} "
                       "name=elementwise,stream=7")
    elif name == "copies":
        common(sc, t0, d_s, pid, 5)
        copy_st = sc.stack(f"{PY_MAIN};to_gpu![python]!train.py:30;cuMemcpyAsync!libcuda.so.1")
        for k in range(d_s // 10):
            c = t0 + k * 10 * S
            sc.add(f"interval thread_state {main} {c} {c + 10 * S} {run}")
            launches(sc, ns, pid, c, c + 5 * S, 5000)
            sc.add(f"interval cuda_api {main} {c + 5 * S} {c + 9 * S} "
                   f"api=cuMemcpyAsync,calls=1,total_ns={4 * S},stack_id={copy_st}")
            sc.add(f"interval memcpy {gpu_labels()},pid={pid},comm=train {c + 5100 * MS} "
                   f"{c + 8900 * MS} bytes=400000000,kind=HtoD,stream=7")
            for j in range(50):
                sc.sample(c + 50 * MS + j * 100 * MS, "cpu", 1, main,
                          f"{PY_MAIN};forward![python]!model.py:10;{LAUNCH}")
                sc.sample(c + 5 * S + 50 * MS + j * 100 * MS, "cpu", 1, main,
                          f"{PY_MAIN};to_gpu![python]!train.py:30;cuMemcpyAsync!libcuda.so.1;"
                          "__memmove_avx_unaligned!libc.so.6")
    elif name == "idle":
        common(sc, t0, d_s, pid, 5)
        for k in range(d_s // 10):
            c = t0 + k * 10 * S
            sc.add(f"interval thread_state {main} {c} {c + 5 * S} {run}")
            sc.add(f"interval thread_state {main} {c + 5 * S} {c + 10 * S} state=blocked,reason=io")
            launches(sc, ns, pid, c, c + 5 * S, 5000)
            for j in range(50):
                sc.sample(c + 50 * MS + j * 100 * MS, "cpu", 1, main,
                          f"{PY_MAIN};forward![python]!model.py:10;{LAUNCH}")
            sc.sample(c + 5 * S + 500 * MS, "offcpu_ns", 4500000000, main,
                      f"{PY_MAIN};recv![python]!dist.py:12;k:sk_wait_data;k:schedule")
    elif name == "held":
        g = gpu_labels()
        common(sc, t0, d_s, pid, window=False)
        sc.add(f"interval thread_state {main} {t0} {t0 + d_s * S} state=blocked,reason=sleep")
        for s in range(1, d_s + 1):
            sc.add(f"metric gpu_utilization {g} {t0 + s * S} 0")
    elif name == "item":
        item(sc, t0, ns, pid)
    elif name in ("throttle", "healthy"):
        g = gpu_labels()
        if name == "throttle":
            common(sc, t0, d_s, pid, window=False)
            sc.add(f"interval thread_state {main} {t0} {t0 + d_s * S} {run}")
        else:
            common(sc, t0, d_s, pid, 9.6)
        for s in range(1, d_s + 1):
            t = t0 + s * S
            if name == "throttle":
                sc.add(f"metric gpu_utilization {g} {t} 100")
                sc.add(f"metric gpu_throttle_reasons {g} {t} {32 if s > 60 else 0}")
                sc.add(f"metric gpu_sm_clock_mhz {g} {t} {1485 if s > 60 else 1980}")
            else:
                sc.add(f"metric gpu_utilization {g} {t} 96")
                sc.add(f"metric gpu_throttle_reasons {g} {t} {4 if s > 60 else 0}")
                sc.add(f"metric gpu_sm_clock_mhz {g} {t} {1500 if s > 60 else 1980}")
        if name == "healthy":
            sync_st = sc.stack(f"{PY_MAIN};train_step![python]!train.py:88;cuStreamSynchronize!libcuda.so.1")
            for k in range(d_s // 10):
                c = t0 + k * 10 * S
                sc.add(f"interval thread_state {main} {c} {c + 10 * S} {run}")
                launches(sc, ns, pid, c, c + 10 * S, 500)
                sc.add(f"interval cuda_api {main} {c + 9 * S} {c + 9600 * MS + 20 * US} "
                       f"api=cuStreamSynchronize,calls=1,total_ns={600 * MS},stack_id={sync_st}")
                for j in range(100):
                    sc.sample(c + 50 * MS + j * 100 * MS, "cpu", 1, main,
                              f"{PY_MAIN};train_step![python]!train.py:80;{DISPATCH}")
    return sc.text()


def window_kernels(sc, g, pid, a, busy, windows):
    """A step starting at a, inside one of the 0.6-s trace windows: its kernels (busy: (start,
    end) us from a), as the GPU's busy time and as kernels. False outside the windows."""
    if not any(w <= a < w + 600 * MS for w in windows):
        return False
    for b, e in busy:
        sc.add(f"interval gpu_busy gpu=0,source=kernels {a + b * US} {a + e * US} -")
        sc.add(f"interval gpu_kernel {g},pid={pid},comm=train {a + b * US} {a + e * US} "
               "name=gemm,stream=7")
    return True


def item(sc, t0, ns, pid, traced=True):
    """The per-step .item() loop as the default agent records it (module docstring); traced
    False: no trace window fell in the range, so no launch was seen (item_bare_script)."""
    g = gpu_labels()
    main, grad = labels(ns, pid, pid), labels(ns, pid, pid + 1, "pt_autograd_0")
    common(sc, t0, ITEM_S, pid, window=False)
    for j in range(1, ITEM_S * 10 + 1):
        sc.add(f"metric gpu_sm_active {g} {t0 + j * 100 * MS} 0.475")
    for s in range(1, ITEM_S + 1):
        sc.add(f"metric gpu_utilization {g} {t0 + s * S} 100")
    sync_st = sc.stack(f"{PY_MAIN};step![python]!train.py:95;"
                       "at::native::_local_scalar_dense_cuda!libtorch_cuda.so;"
                       "cuStreamSynchronize!libcuda.so.1")
    copy_st = sc.stack(f"{PY_MAIN};step![python]!train.py:95;"
                       "at::native::_local_scalar_dense_cuda!libtorch_cuda.so;"
                       "cuMemcpyDtoHAsync_v2!libcuda.so.1")
    fwd_st = sc.stack(f"{PY_MAIN};step![python]!train.py:93;forward![python]!model.py:10;{LAUNCH}")
    bwd_st = sc.stack("start_thread!libc.so.6;"
                      "torch::autograd::Engine::thread_main!libtorch_cpu.so;" + LAUNCH)
    per_s = S // ITEM_STEP
    for s in range(ITEM_S if traced else 0):
        a = t0 + s * S
        sc.add(f"interval cuda_api {main} {a} {a + S - 7 * MS} api=cuLaunchKernel,"
               f"calls={20 * per_s},total_ns={20 * per_s * 5 * US},stack_id={fwd_st}")
        sc.add(f"interval cuda_api {grad} {a + 3 * MS} {a + S - 10 * MS} api=cuLaunchKernel,"
               f"calls={30 * per_s},total_ns={30 * per_s * 5 * US},stack_id={bwd_st}")
        sc.add(f"interval cuda_api {main} {a + 11 * MS} {a + S - 9 * MS} "
               f"api=cuMemcpyDtoHAsync_v2,calls={per_s},total_ns={per_s * 4 * US},"
               f"stack_id={copy_st}")
    windows = [t0 + 10 * S, t0 + 40 * S] if traced else []
    for k in range(ITEM_S * S // ITEM_STEP):
        a = t0 + k * ITEM_STEP
        sc.add(f"interval thread_state {main} {a} {a + ITEM_STEP} "
               "summary=1,running_ns=13000000,runnable_ns=0")
        sc.add(f"interval thread_state {grad} {a} {a + ITEM_STEP} "
               "summary=1,running_ns=6500000,runnable_ns=0")
        sc.add(f"interval cuda_api {main} {a + 11 * MS} {a + 13 * MS + 10 * US} "
               f"api=cuStreamSynchronize,calls=1,total_ns={2 * MS + 10 * US},stack_id={sync_st}")
        if k % 5 == 0:  # the sampling period: bookkeeping, or the forward pass's launches
            fr = (f"{PY_MAIN};step![python]!train.py:97;log_stats![python]!train.py:70"
                  if k % 15 else f"{PY_MAIN};step![python]!train.py:93;{DISPATCH};{LAUNCH}")
            sc.sample(a + 15 * MS, "cpu", 1, main, fr)
        if not window_kernels(sc, g, pid, a, ITEM_BUSY, windows):
            continue
        sc.add(f"interval memcpy {g},pid={pid},comm=train {a + 13 * MS} {a + 13 * MS + 2 * US} "
               "bytes=4,kind=DtoH,stream=7")
    for w in windows:
        sc.add(f"interval gpu_observed gpu=0,source=kernels,reason=budget {w} {w + 600 * MS} -")


def item_bare_script(t0):
    """ns-itemb (n-ib), apart from the fixture's answer: ns-item's recording with no trace
    window in the range (the H100's 12-s run of 2026-12-07): the default agent probes no
    cuLaunch* call, so nothing says which threads launch but autograd's device thread's name
    (pt_autograd_0). -> not starved_dataloader: that thread runs 32.5 % while the main thread
    blocks 35 %, and it is the launching side, not an input worker."""
    sc = Script("n-ib")
    item(sc, t0, "ns-itemb", 130, traced=False)
    return sc.text()


def tok_script(t0):
    """ns-tok (n-tk), apart from the fixture's answer: the H100's tokenize workload's shape, a
    training thread that tokenizes 17.5 ms of each 20 ms step (GPU idle), then copies the ids
    with a blocking copy whose stream sync returns at once (nothing queued), then launches
    1.7 ms of kernels; a .item() every 20th step waits for them. Recorded as ns-item is, for
    60 s. -> input_on_launch_thread, not host_sync_per_step: of the 64 syncs seen (the 60 of
    the windows' steps, and the .item() of the step before each window, returning 90 us before
    it opens), the 2 .item() inside the windows drained the GPU. (The rule before counted every
    gap that began within 20 ms before a sync's return: every gap here.) Another process of the
    job (pid 121, holding no GPU here) launches as much, running all the time: a launching
    thread of its own GPU, neither a helper of the thread nor an input worker."""
    node, ns, pid = "n-tk", "ns-tok", 120
    sc = Script(node)
    g = gpu_labels()
    main = labels(ns, pid, pid)
    common(sc, t0, ITEM_S, pid, window=False)
    for j in range(1, ITEM_S * 10 + 1):
        sc.add(f"metric gpu_sm_active {g} {t0 + j * 100 * MS} 0.085")
    sync_st = sc.stack(f"{PY_MAIN};step![python]!train.py:80;"
                       "at::native::copy_!libtorch_cuda.so;cuStreamSynchronize!libcuda.so.1")
    item_st = sc.stack(f"{PY_MAIN};step![python]!train.py:84;"
                       "at::native::_local_scalar_dense_cuda!libtorch_cuda.so;"
                       "cuStreamSynchronize!libcuda.so.1")
    fwd_st = sc.stack(f"{PY_MAIN};step![python]!train.py:82;forward![python]!model.py:10;{LAUNCH}")
    copy_st = sc.stack(f"{PY_MAIN};step![python]!train.py:80;"
                       "at::native::copy_!libtorch_cuda.so;cuMemcpyHtoDAsync_v2!libcuda.so.1")
    busy = [(17600, 18000), (18200, 18600), (18800, 19200), (19400, 19900)]  # us
    windows = [t0 + 10 * S, t0 + 40 * S]
    sc.add(f"interval thread_state {main} {t0} {t0 + ITEM_S * S} state=running,cpu=1")
    # another process of the job launching (a rank on another GPU): not the thread's helper,
    # not an input worker
    rank = labels(ns, pid + 1, pid + 1)
    sc.add(f"interval thread_state {rank} {t0} {t0 + ITEM_S * S} state=running,cpu=2")
    for s in range(ITEM_S):
        sc.add(f"interval cuda_api {rank} {t0 + s * S} {t0 + (s + 1) * S - MS} "
               f"api=cuLaunchKernel,calls=2000,total_ns={2000 * 5 * US},stack_id={fwd_st}")
        a = t0 + s * S
        sc.add(f"interval cuda_api {main} {a + 17 * MS} {a + S - 1 * MS} api=cuLaunchKernel,"
               f"calls=2000,total_ns={2000 * 5 * US},stack_id={fwd_st}")
        sc.add(f"interval cuda_api {main} {a + 17 * MS} {a + S - 2 * MS} "
               f"api=cuMemcpyHtoDAsync_v2,calls=50,total_ns={50 * 20 * US},stack_id={copy_st}")
    for k in range(ITEM_S * S // ITEM_STEP):
        a = t0 + k * ITEM_STEP
        sc.add(f"interval cuda_api {main} {a + 17500 * US} {a + 17530 * US} "
               f"api=cuStreamSynchronize,calls=1,total_ns={30 * US},stack_id={sync_st}")
        if k % 20 == 19:
            sc.add(f"interval cuda_api {main} {a + 19850 * US} {a + 19910 * US} "
                   f"api=cuStreamSynchronize,calls=1,total_ns={60 * US},stack_id={item_st}")
        if k % 5 == 0:
            sc.sample(a + 5 * MS, "cpu", 1, main,
                      f"{PY_MAIN};step![python]!train.py:79;tokenize![python]!train.py:42")
        window_kernels(sc, g, pid, a, busy, windows)
    for w in windows:
        sc.add(f"interval gpu_observed gpu=0,source=kernels,reason=budget {w} {w + 600 * MS} -")
    return sc.text()


def expected(d_s=600):
    """(kind, workload) -> GPU-seconds at stake, in the answer's order (dollars, seconds, name)."""
    half = d_s / 2
    out = [("held_unused", "ns-held", float(d_s)),
           ("node_idle", "ns-idle", half),
           ("launch_bound", "ns-launch", half),
           ("starved_dataloader", "ns-starved", half),
           ("input_on_launch_thread", "ns-input", half * 0.9),
           ("sync_copies", "ns-copies", half * 0.8),
           ("throttled", "ns-throttle", d_s * ((d_s - 61) * 0.25) / (d_s - 2)),
           ("host_sync_per_step", "ns-sync", d_s * 0.2),
           ("host_sync_per_step", "ns-item", ITEM_S * 0.525)]
    return out
