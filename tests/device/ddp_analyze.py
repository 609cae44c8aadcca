# SPDX-License-Identifier: Apache-2.0
"""Checks of the multi-GPU node run against the server's API (tests/device/ddp_node.sh):
per GPU, metric series under the right UUID and process; kernel lanes per device including the
NCCL kernels; the GPU-idle CPU flame graph of the rank that waits longest on all-reduce.
Usage: ddp_analyze.py SERVER_URL TRAIN_LOG"""
import json
import re
import sys
import urllib.parse
import urllib.request

url, train_log = sys.argv[1], sys.argv[2]


def get(path, **params):
    q = urllib.parse.urlencode(params)
    with urllib.request.urlopen("%s%s?%s" % (url, path, q), timeout=60) as r:
        return json.load(r)


ranks = {}
for line in open(train_log):
    m = re.search(r"rank (\d+)/(\d+) pid (\d+)", line)
    if m:
        ranks[int(m.group(1))] = m.group(3)
print("ranks (rank -> pid):", ranks)
print("GPU UUIDs:", get("/api/v1/label/gpu_uuid/values", since="15m").get("values"))

for name in ("gpu_utilization", "gpu_power_watts", "gpu_memory_used_bytes", "gpu_sm_active",
             "gpu_process_sm_util", "gpu_process_memory_bytes"):
    s = get("/api/v1/series", name=name, since="15m", buckets=200).get("series", [])
    for one in s:
        lb = one["labels"]
        pts = one["points"]
        print("series %-26s gpu=%s uuid=%s pid=%s comm=%s: %d points, avg of avgs %.1f" % (
            name, lb.get("gpu"), lb.get("gpu_uuid", "")[:14], lb.get("pid", "-"), lb.get("comm", "-"),
            len(pts), sum(p[2] for p in pts) / max(len(pts), 1)))
    if not s:
        print("series %s: none" % name)

iv = get("/api/v1/intervals", kind="gpu_kernel", since="15m", limit=500000)
per_gpu, nccl_ns = {}, {}
for i in iv.get("intervals", []):
    g = i["labels"].get("gpu", "?")
    pid = i["labels"].get("pid", "?")
    name = i.get("attrs", {}).get("name", "")
    per_gpu.setdefault(g, {"kernels": 0, "nccl": 0, "pids": set(), "streams": set()})
    d = per_gpu[g]
    d["kernels"] += 1
    d["pids"].add(pid)
    d["streams"].add(i.get("attrs", {}).get("stream", "?"))
    if "nccl" in name.lower():
        d["nccl"] += 1
        nccl_ns[pid] = nccl_ns.get(pid, 0) + (i["end_ms"] - i["start_ms"]) * 1e6
print("kernel intervals: %d%s" % (len(iv.get("intervals", [])), " (truncated)" if iv.get("truncated") else ""))
for g, d in sorted(per_gpu.items()):
    print("  gpu %s: %d kernels (%d NCCL) on %d streams from pids %s" % (
        g, d["kernels"], d["nccl"], len(d["streams"]), sorted(d["pids"])))

if nccl_ns:
    waiter = max(nccl_ns, key=nccl_ns.get)
    print("NCCL kernel time per pid (ms):", {p: round(v / 1e6, 1) for p, v in nccl_ns.items()})
    gpu = next((g for g, d in per_gpu.items() if waiter in d["pids"]), "0")
    print("rank that waits longest on all-reduce: pid %s (gpu %s)" % (waiter, gpu))
    fg = get("/api/v1/top", kind="cpu", since="15m", gpu_idle=gpu, selector='{pid="%s"}' % waiter)
    print("its CPU while its GPU was idle (top functions by self):")
    for f in fg.get("functions", [])[:15]:
        print("   self %6s total %6s  %s" % (f["self"], f["total"], f["name"]))
else:
    print("no NCCL kernels seen (one GPU: the all-reduce may be skipped)")
    pid = ranks.get(0)
    if pid:
        fg = get("/api/v1/top", kind="cpu", since="15m", gpu_idle="0", selector='{pid="%s"}' % pid)
        print("rank 0's CPU while GPU 0 was idle (top functions by self):")
        for f in fg.get("functions", [])[:15]:
            print("   self %6s total %6s  %s" % (f["self"], f["total"], f["name"]))
