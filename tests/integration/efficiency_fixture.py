# SPDX-License-Identifier: Apache-2.0
"""The GPU-efficiency fixture (docs/efficiency.md): node n1 with three GPUs over [T, T+D), in
10-second cycles, as a tests/tools/batchgen script. Known answer:

- GPU 0 (NVIDIA H200): held by pod train-a (namespace team-a, pid 100) the whole range; kernel
  trace window (gpu_observed source=kernels) over [T, T+D-TAIL), busy 9 s of every 10 (gpu_busy intervals); in the tail the
  kernels go on but no window or metric covers the gaps, so 1 s per cycle is *unknown*.
- GPU 1 (NVIDIA H200): held by pod train-b (team-b, pid 200); trace window the whole range, busy
  5 s of every 10; NVML utilization reads 100 throughout (the kernels source wins). While the GPU
  is idle the main thread logs for 1 s (log_metrics) and then waits on a futex, the data loader
  thread (tid 201) runs load_batch for 4 s and then blocks on io for 1 s.
- GPU 2 (NVIDIA A100): nobody holds it; NVML utilization 0 for [T, T+D-600s) (or the first
  5/6 for short fixtures), nothing after that (not observed).
"""

MS = 1_000_000
S = 1_000_000_000


def tail_s(d_s):
    return 300 if d_s >= 3600 else 10


def unobserved_s(d_s):
    return 600 if d_s >= 3600 else 10


def script(t0, d_s, node="n1"):
    """batchgen lines for [t0, t0 + d_s s); d_s a multiple of 10."""
    assert d_s % 10 == 0
    L = [f"node {node}"]
    g0 = "gpu=0,gpu_uuid=GPU-aaaa,gpu_model=NVIDIA%20H200"
    g1 = "gpu=1,gpu_uuid=GPU-bbbb,gpu_model=NVIDIA%20H200"
    g2 = "gpu=2,gpu_uuid=GPU-cccc,gpu_model=NVIDIA%20A100"
    a_cpu = "pid=100,comm=train,pod=train-a,namespace=team-a,container=main"
    b_cpu = "pid=200,comm=train,pod=train-b,namespace=team-b,container=main"
    b_main = b_cpu + ",tid=200,thread=train"
    b_loader = b_cpu + ",tid=201,thread=loader"
    end = t0 + d_s * S
    # As the cupti module writes them: the process's window, and per GPU what kernels decided.
    L.append(f"interval gpu_trace_window {a_cpu} {t0} {end - tail_s(d_s) * S} reason=budget")
    L.append(f"interval gpu_trace_window {b_cpu} {t0} {end} reason=budget")
    L.append(f"interval gpu_observed gpu=0,source=kernels {t0} {end - tail_s(d_s) * S} -")
    L.append(f"interval gpu_observed gpu=1,source=kernels {t0} {end} -")
    for k in range(d_s // 10):
        c = t0 + k * 10 * S
        L.append(f"interval gpu_busy gpu=0,source=kernels {c} {c + 9 * S} -")
        L.append(f"interval gpu_busy gpu=1,source=kernels {c} {c + 5 * S} -")
        for j in range(10):
            L.append(f"sample {c + j * S + 1 * MS} cpu 1 {a_cpu} main;train_loop;cuda_launch")
        for j in range(50):
            L.append(f"sample {c + j * 100 * MS} cpu 1 {b_main} main;train_loop;cuda_launch")
        for j in range(10):
            L.append(f"sample {c + 5 * S + j * 100 * MS} cpu 1 {b_main} main;train_loop;log_metrics")
        for j in range(40):
            L.append(f"sample {c + 5 * S + 50 * MS + j * 100 * MS} cpu 1 {b_loader} "
                     "loader_main;next_batch;load_batch")
        L.append(f"interval thread_state {b_main} {c} {c + 6 * S} state=running,cpu=1")
        L.append(f"interval thread_state {b_main} {c + 6 * S} {c + 10 * S} state=blocked,reason=futex")
        L.append(f"interval thread_state {b_loader} {c} {c + 5 * S} state=blocked,reason=io")
        L.append(f"interval thread_state {b_loader} {c + 5 * S} {c + 9 * S} state=running,cpu=2")
        L.append(f"interval thread_state {b_loader} {c + 9 * S} {c + 10 * S} state=blocked,reason=io")
    for s in range(1, d_s + 1):
        t = t0 + s * S
        L.append(f"metric gpu_process_memory_bytes {g0},pid=100,comm=train {t} 1000000000")
        L.append(f"metric gpu_process_memory_bytes {g1},pid=200,comm=train {t} 2000000000")
        L.append(f"metric gpu_utilization {g1} {t} 100")
        if s <= d_s - unobserved_s(d_s):
            L.append(f"metric gpu_utilization {g2} {t} 0")
    return "\n".join(L) + "\n"


def expected(d_s, price_h200=4.0, price_default=2.0):
    """Seconds and dollars the fixture must give, by namespace."""
    tail, unobs = tail_s(d_s), unobserved_s(d_s)
    a_busy = (d_s - tail) // 10 * 9 + tail // 10 * 9
    a_idle = (d_s - tail) // 10 * 1
    a_unknown = tail // 10 * 1
    b_busy = b_idle = d_s // 2
    return {
        "team-a": {"held": d_s, "busy": a_busy, "idle": a_idle, "unknown": a_unknown,
                   "idle_dollars": a_idle / 3600 * price_h200},
        "team-b": {"held": d_s, "busy": b_busy, "idle": b_idle, "unknown": 0,
                   "idle_dollars": b_idle / 3600 * price_h200},
        "unheld": {"held": d_s - unobs, "dollars": (d_s - unobs) / 3600 * price_default},
        # team-b's causes: idle 5 s a cycle; 40 load_batch + 10 log_metrics samples; the main
        # thread waits on a futex 4 s, the loader on io 1 s; CPU busy 4 of the 5 s.
        "causes_b": {"load_batch": 40 * d_s // 10, "log_metrics": 10 * d_s // 10,
                     "futex": 4 * d_s // 10, "io": 1 * d_s // 10, "no_cpu_share": 0.2},
    }
