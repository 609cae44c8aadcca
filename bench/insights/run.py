#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Findings benchmark (docs/insights.md): /api/v1/insights over the last 24 h of a 16-GPU fleet
(2 nodes x 8 H100). Per node: pod a holds GPUs 0-3 busy 9.5 s of every 10 s (healthy), pod b GPUs
4-5 busy 4 s of 10 (its main thread blocked on a futex while a loader thread runs: a starved
data loader), pod c GPU 6 busy 2 s of 10 half the time, GPU 7 unheld; kernel-traced
(gpu_observed over everything, one gpu_busy interval per 10 s cycle per held GPU), holder points
every 10 s, thermal throttle reasons on GPU 3 with a lower clock the last 2 hours, thread states
and CPU samples per cycle over the last 2 hours (the findings' CPU-side evidence reads the last
hour). The efficiency tallies come from the hourly rollup (waited for); the evidence of the idle
GPUs and the throttled one from records. Median of 5 queries on loopback, the server's CPU from
/proc. The fill is kept in DIR and reused.
Usage: bench/insights/run.py [DIR=/tmp/gpuscope-bench-insights] [NODES=2]"""
import os
import statistics
import sys
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
from gpuscope_server import Server, encode  # noqa: E402

S = 10**9
H = 3600 * S
MS = 10**6
DIR = sys.argv[1] if len(sys.argv) > 1 else "/tmp/gpuscope-bench-insights"
NODES = ["f%d" % (i + 1) for i in range(int(sys.argv[2]) if len(sys.argv) > 2 else 2)]
CHUNK_H = 2
# pod -> (gpus, busy seconds of each 10 s cycle, held share of each 10 min)
PODS = {"a": ([0, 1, 2, 3], 9.5, 1.0), "b": ([4, 5], 4, 1.0), "c": ([6], 2, 0.5)}


def chunk(node, t0, t1, detail):
    L = [f"node {node}", "period 10101010"]
    for i, (pod, (gpus, busy, held)) in enumerate(sorted(PODS.items())):
        pid = 1000 + i
        L.append(f"sample {t0 + S} cpu 1 pid={pid},comm=python,pod={node}-{pod},"
                 f"namespace=team-{pod} main;train")
    for g in range(8):
        L.append(f"interval gpu_observed gpu={g},source=kernels {t0} {t1} -")
    for i, (pod, (gpus, busy, held)) in enumerate(sorted(PODS.items())):
        pid = 1000 + i
        lab = f"pid={pid},comm=python,pod={node}-{pod},namespace=team-{pod}"
        for c in range(t0, t1, 10 * S):
            if held < 1 and (c // (600 * S)) % 2:
                continue
            for g in gpus:
                gl = f"gpu={g},gpu_uuid=GPU-{node}-{g},gpu_model=NVIDIA%20H100"
                L.append(f"interval gpu_busy gpu={g},source=kernels {c} {c + int(busy * S)} -")
                L.append(f"metric gpu_process_memory_bytes {gl},pid={pid},comm=python "
                         f"{c + 10 * S} 8000000000")
            if not detail:
                continue
            main, loader = f"{lab},tid={pid},thread=python", f"{lab},tid={pid + 1},thread=loader"
            L.append(f"interval thread_state {main} {c} {c + int(busy * S)} state=running,cpu=1")
            L.append(f"interval thread_state {main} {c + int(busy * S)} {c + 10 * S} "
                     "state=blocked,reason=futex")
            L.append(f"interval thread_state {loader} {c + int(busy * S)} {c + 10 * S} "
                     "state=running,cpu=2")
            for j in range(0, 10000, 100):
                who = main if j < busy * 1000 else loader
                fn = "train;forward;cuLaunchKernel!libcuda.so.1" if j < busy * 1000 else \
                    "loader;load_batch![python]!data.py:77"
                L.append(f"sample {c + j * MS + 5 * MS} cpu 1 {who} {fn}")
    if detail:
        gl = f"gpu=3,gpu_uuid=GPU-{node}-3,gpu_model=NVIDIA%20H100"
        for t in range(t0, t1, S):
            L.append(f"metric gpu_utilization {gl} {t} 80")
            L.append(f"metric gpu_throttle_reasons {gl} {t} 32")
            L.append(f"metric gpu_sm_clock_mhz {gl} {t} {1600 if (t // S) % 2 else 1980}")
    return "\n".join(L) + "\n"


def main():
    os.makedirs(DIR, exist_ok=True)
    data = os.path.join(DIR, "data")
    stamp = os.path.join(DIR, "filled")
    args = ["--retention", "3d", "--gpu-hour-price", "NVIDIA H100=3.00", "--settle", "5s"]
    if not os.path.exists(stamp):
        end = (time.time_ns() // H + 1) * H
        s = Server(data=data, args=args + ["--no-efficiency-rollup"]).start()
        t0, nrec = time.time(), 0
        for t in range(end - 26 * H, end, CHUNK_H * H):
            for node in NODES:
                sc = chunk(node, t, t + CHUNK_H * H, t >= end - 2 * CHUNK_H * H)
                nrec += sc.count("\n")
                code, body = s.ingest(encode(sc, "zstd"), encoding="zstd")
                assert code == 204, (code, body)
        print(f"fill: {nrec / 1e6:.2f} M records, 26 h x {8 * len(NODES)} GPUs in "
              f"{time.time() - t0:.0f} s")
        s.stop()
        with open(stamp, "w") as f:
            f.write(str(end))
    end = int(open(stamp).read())
    now = min(time.time_ns(), end)
    s = Server(data=data, args=args).start()
    try:
        hours = (time.time_ns() - 5 * S) // H - (end - 26 * H) // H
        took = s.wait_rollups(min(hours, 26))
        print(f"rollup after start: {took:.1f} s")
        ts = []
        c0 = s.cpu_seconds()
        for _ in range(5):
            t = time.time()
            j = s.get_json(f"/api/v1/insights?from={(now - 24 * H) / 1e9:.3f}"
                           f"&to={now / 1e9:.3f}&by=pod")
            ts.append(time.time() - t)
        cpu = (s.cpu_seconds() - c0) / 5
        print(f"insights over the last 24 h, {8 * len(NODES)} GPUs, by pod: {statistics.median(ts) * 1e3:.0f} ms"
              f" wall (median of 5), {cpu * 1e3:.0f} ms server CPU per query;"
              f" {j['workloads_checked']} workloads, {len(j['findings'])} findings:")
        for f in j["findings"]:
            print(f"  {f['kind']:24} {f['workload']:8} {f['gpu_seconds_at_stake']:9.0f} GPU-s"
                  f"  ${f['dollars_at_stake']}")
    finally:
        s.stop()


if __name__ == "__main__":
    main()
