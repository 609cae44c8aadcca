#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Efficiency benchmark (docs/efficiency.md): a 16-GPU fleet (2 nodes x 8 H200, 6 pods, one GPU
unheld per node) over 30 days, kernel-traced (gpu_observed over everything, one gpu_busy
interval per 10 s cycle per held GPU, holder points every 10 s): ~4 M intervals and ~4 M points.
Measures the fill, the hourly rollup's rebuild after a restart, /api/v1/efficiency latency over
the last 24 h and 30 days (median of 5, loopback) from the rollup and from records only
(--no-efficiency-rollup), and the server's CPU per /metrics scrape (15 s windows) with and
without the exporter's work. The fill is kept in DIR and reused.
Usage: bench/efficiency/run.py [DIR=/tmp/gpuscope-bench-eff] [DAYS=30]"""
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
from gpuscope_server import Server, encode  # noqa: E402

S = 10**9
H = 3600 * S
DIR = sys.argv[1] if len(sys.argv) > 1 else "/tmp/gpuscope-bench-eff"
DAYS = int(sys.argv[2]) if len(sys.argv) > 2 else 30
CHUNK_H = 6
# per node: pod -> (gpus, busy seconds of each 10 s cycle, held share of each 10 min)
PODS = {"a": ([0, 1, 2, 3], 8, 1.0), "b": ([4, 5], 4, 1.0), "c": ([6], 2, 0.5)}


def chunk(node, t0, t1):
    L = [f"node {node}"]
    for i, (pod, (gpus, busy, held)) in enumerate(sorted(PODS.items())):
        pid = 1000 + i
        L.append(f"sample {t0 + S} cpu 1 pid={pid},comm=python,pod={node}-{pod},"
                 f"namespace=team-{pod} main;train")
    for g in range(8):
        L.append(f"interval gpu_observed gpu={g},source=kernels {t0} {t1} -")
    for i, (pod, (gpus, busy, held)) in enumerate(sorted(PODS.items())):
        pid = 1000 + i
        for g in gpus:
            lab = f"gpu={g},gpu_uuid=GPU-{node}-{g},gpu_model=NVIDIA%20H200,pid={pid},comm=python"
            for c in range(t0, t1, 10 * S):
                if held < 1 and (c // (600 * S)) % 2:
                    continue
                L.append(f"interval gpu_busy gpu={g},source=kernels {c} {c + busy * S} -")
                L.append(f"metric gpu_process_memory_bytes {lab} {c + 10 * S} 8000000000")
    return "\n".join(L) + "\n"


def latency(s, frm, to, n=5):
    """Median wall seconds of n queries, the server's CPU seconds per query, the answer."""
    ts = []
    c0 = s.cpu_seconds()
    for _ in range(n):
        t = time.time()
        j = s.get_json(f"/api/v1/efficiency?from={frm / 1e9:.3f}&to={to / 1e9:.3f}&by=pod&causes=0")
        ts.append(time.time() - t)
    return statistics.median(ts), (s.cpu_seconds() - c0) / n, j


def main():
    os.makedirs(DIR, exist_ok=True)
    data = os.path.join(DIR, "data")
    stamp = os.path.join(DIR, "filled")
    args = ["--retention", f"{DAYS + 10}d", "--gpu-hour-price", "NVIDIA H200=3.50",
            "--settle", "5s"]
    if not os.path.exists(stamp):
        end = (time.time_ns() // H + 1) * H + H     # an hour ahead: live windows have data
        s = Server(data=data, args=args + ["--no-efficiency-rollup"]).start()
        t0, nrec = time.time(), 0
        for t in range(end - DAYS * 24 * H, end, CHUNK_H * H):
            for node in ("f1", "f2"):
                sc = chunk(node, t, t + CHUNK_H * H)
                nrec += sc.count("\n")
                code, body = s.ingest(encode(sc, "zstd"), encoding="zstd")
                assert code == 204, (code, body)
        print(f"fill: {nrec / 1e6:.1f} M records, {DAYS} days x 16 GPUs in {time.time() - t0:.0f} s")
        s.stop()
        with open(stamp, "w") as f:
            f.write(str(end))
    end = int(open(stamp).read())
    now = time.time_ns()
    hours = (now - 5 * S) // H - (end - DAYS * 24 * H) // H

    s = Server(data=data, args=args).start()
    try:
        c0 = s.cpu_seconds()
        took = s.wait_rollups(hours)
        print(f"rollup rebuild after start: {hours} hours x 16 GPUs in {took:.1f} s,"
              f" {s.cpu_seconds() - c0:.1f} s CPU")
        for name, span in (("24 h", 24 * H), (f"{DAYS} d", DAYS * 24 * H - 2 * H)):
            lat, cpu, j = latency(s, now - span, now)
            print(f"efficiency over the last {name} from the rollup: {lat * 1e3:.0f} ms wall,"
                  f" {cpu * 1e3:.0f} ms server CPU"
                  f" (median of 5; {j['rollup_hours']} rollup hours, {len(j['workloads'])} pods,"
                  f" held {j['totals']['held_gpu_hours']:.0f} GPU-h,"
                  f" idle ${j['totals']['idle_dollars']:.0f})")
        # /metrics: CPU per scrape of 15 s windows, the exporter's part and the whole process.
        s.request("/metrics")
        per, exp = [], []
        for _ in range(4):
            time.sleep(15)
            c0, e0 = s.cpu_seconds(), s.metric("gpuscope_server_export_cpu_seconds_total")
            t = time.time()
            s.request("/metrics")
            wall = time.time() - t
            per.append(s.cpu_seconds() - c0)
            exp.append(s.metric("gpuscope_server_export_cpu_seconds_total") - e0)
        print(f"/metrics scrape after 15 s (16 GPUs live): exporter {statistics.median(exp) * 1e3:.1f} ms"
              f" CPU, whole process {statistics.median(per) * 1e3:.0f} ms CPU"
              f" (clock ticks of 10 ms), last scrape {wall * 1e3:.0f} ms wall")
    finally:
        s.stop()
    s = Server(data=data, args=args + ["--no-efficiency-rollup"]).start()
    try:
        for name, span in (("24 h", 24 * H), (f"{DAYS} d", DAYS * 24 * H - 2 * H)):
            lat, cpu, j = latency(s, now - span, now, n=1 if span > 48 * H else 3)
            print(f"efficiency over the last {name} from records only: {lat * 1e3:.0f} ms wall,"
                  f" {cpu * 1e3:.0f} ms server CPU")
    finally:
        s.stop()


if __name__ == "__main__":
    main()
