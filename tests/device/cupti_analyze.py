# SPDX-License-Identifier: Apache-2.0
"""Reads what tests/device/cupti_device.sh left in DIR and prints the checks and benchmark figures:
slowdowns against bare runs (medians over rounds), kernels/s, completeness (kernels gpuscope
recorded in each phase's window / kernels launched), join rate, drops, per-kernel durations
against torch.profiler, where matmul kernels sit in the GPU-time flame graph, coexistence.
Writes DIR/results.json. Usage: cupti_analyze.py DIR ROUNDS
"""
import collections
import json
import os
import re
import statistics
import sys

d, rounds = sys.argv[1], int(sys.argv[2])
res = {"rounds": rounds}
GEMM = re.compile(r"gemm|cutlass|xmma|nvjet|matmul|sm90_", re.I)
# torch.profiler's CUDA-side events that are not kernels: copies, sets (gpuscope has them as
# memcpy/memset intervals) and GPU user annotations such as "Optimizer.step#AdamW.step".
NOT_KERNEL = re.compile(r"^(Memcpy|Memset) |^[\w.]+#[\w.]+$")


def jsonl(path):
    try:
        with open(path) as f:
            return [json.loads(l) for l in f if l.startswith("{")]
    except OSError:
        return []


def stats(path):
    out = {}
    try:
        with open(path) as f:
            for line in f:
                k, v = line.split()
                out[k] = int(v)
    except OSError:
        pass
    return out


def kernels(path):
    """pid -> list of (start, end, graph_id, has_stack, name)"""
    out = collections.defaultdict(list)
    try:
        with open(path) as f:
            for line in f:
                p = line.rstrip("\n").split("\t")
                if len(p) < 9:
                    continue
                out[int(p[0])].append((int(p[2]), int(p[3]), p[5], p[6] == "1", p[8]))
    except OSError:
        pass
    return out


elapsed = collections.defaultdict(list)     # (mode, workload) -> [s]
launched = {}
complete = collections.defaultdict(list)    # workload -> [(recorded, expected, joined)]
prof_post = collections.defaultdict(list)
drops = collections.Counter()
train_cmp = []
coexist = None
prof_train_kernels = {}

for r in range(1, rounds + 1):
    A, B, C = jsonl(f"{d}/A{r}.jsonl"), jsonl(f"{d}/B{r}.jsonl"), jsonl(f"{d}/C{r}.jsonl")
    for rec in A:
        key = ("bare" if rec["mode"] == "plain" else "torch.profiler", rec["workload"])
        elapsed[key].append(rec["elapsed"])
        if rec["mode"] == "prof":
            prof_post[rec["workload"]].append(rec.get("prof_post_s", 0))
            if rec["workload"] == "train":
                prof_train_kernels[r] = rec
        if rec.get("launched"):
            launched[rec["workload"]] = rec["launched"]
    for rec in C:
        elapsed[("library only", rec["workload"])].append(rec["elapsed"])
    st = stats(f"{d}/dump{r}/stats.txt")
    for k in ("cupti_drops", "lib_drops", "bpf_ringbuf_lost", "bpf_records_lost", "no_clock",
              "launches_evicted", "stacks_evicted", "batch_errors", "unknown_names", "kernels",
              "joined", "unjoined", "launches", "bpf_ustack_fail"):
        drops[k] += st.get(k, 0)
    ks = kernels(f"{d}/dump{r}/kernels.tsv")
    for rec in B:
        if rec["mode"] == "coexist":
            mine = ks.get(rec["pid"], [])
            coexist = dict(rec, gpuscope_during=sum(1 for k in mine if rec["t0"] <= k[0] < rec["t1"]),
                           gpuscope_after=sum(1 for k in mine if rec["t1"] <= k[0] < rec["t2"]))
            continue
        elapsed[("gpuscope", rec["workload"])].append(rec["elapsed"])
        mine = [k for k in ks.get(rec["pid"], []) if rec["t0"] <= k[0] < rec["t1"]]
        exp = rec.get("launched")
        if rec["workload"] == "train" and r in prof_train_kernels:
            try:
                with open(os.path.join(d, os.path.basename(prof_train_kernels[r]["prof_file"]))) as f:
                    theirs = [k for k in json.load(f) if not NOT_KERNEL.search(k[0])]
            except OSError:
                theirs = []
            exp = len(theirs)
            train_cmp.append((mine, theirs))
        complete[rec["workload"]].append((len(mine), exp, sum(1 for k in mine if k[3])))

lines = []
P = lines.append
P("== slowdown (median elapsed over %d rounds, ratio to bare)" % rounds)
bench = {}
for wl in ("train", "tiny", "graph"):
    base = statistics.median(elapsed[("bare", wl)]) if elapsed[("bare", wl)] else None
    for mode in ("bare", "library only", "gpuscope", "torch.profiler"):
        v = elapsed[(mode, wl)]
        if not v or not base:
            continue
        m = statistics.median(v)
        row = {"median_s": m, "ratio": m / base, "runs": v}
        if wl in launched:
            row["kernels_per_s"] = launched[wl] / m
        if mode == "torch.profiler":
            row["post_processing_s"] = statistics.median(prof_post[wl]) if prof_post[wl] else None
        bench[f"{wl}/{mode}"] = row
        P("  %-6s %-15s %8.4f s  x%.4f%s%s" % (
            wl, mode, m, m / base,
            ("  %9.0f kernels/s" % row["kernels_per_s"]) if "kernels_per_s" in row else "",
            ("  (+%.2f s post-processing)" % row["post_processing_s"])
            if row.get("post_processing_s") else ""))
res["bench"] = bench

P("== completeness (kernels gpuscope recorded in the phase window / kernels launched)")
res["completeness"] = {}
for wl, rows in complete.items():
    rec = sum(x[0] for x in rows)
    exp = sum(x[1] for x in rows if x[1])
    joined = sum(x[2] for x in rows)
    res["completeness"][wl] = {"recorded": rec, "expected": exp, "joined": joined}
    P("  %-6s %d / %d = %.4f%%, with launch stack %.2f%%" % (
        wl, rec, exp, 100.0 * rec / exp if exp else float("nan"),
        100.0 * joined / rec if rec else float("nan")))
P("== drops and counters (all rounds): " + ", ".join("%s=%d" % kv for kv in sorted(drops.items())))
res["counters"] = dict(drops)

P("== train kernels vs torch.profiler (same steps, separate processes)")
res["train_vs_profiler"] = []
for mine, theirs in train_cmp:
    a = collections.defaultdict(list)
    b = collections.defaultdict(list)
    for k in mine:
        a[k[4]].append(k[1] - k[0])
    for name, us in theirs:
        b[name].append(us * 1000.0)
    missing = [n for n in b if n not in a]
    count_eq = sum(1 for n in b if len(a.get(n, [])) == len(b[n]))
    within = within_t = tot_t = 0
    for n in b:
        if n not in a:
            continue
        ra = sum(a[n]) / max(1.0, sum(b[n]))
        t = sum(b[n])
        tot_t += t
        if abs(ra - 1) <= 0.01:
            within += 1
            within_t += t
    row = {"names_profiler": len(b), "names_missing": len(missing), "missing": missing[:10],
           "names_same_count": count_eq, "names_total_within_1pct": within,
           "gpu_time_share_within_1pct": within_t / tot_t if tot_t else None,
           "gpu_time_ratio": sum(map(sum, a.values())) / max(1.0, sum(map(sum, b.values())))}
    res["train_vs_profiler"].append(row)
    P("  names %d, missing %d, same count %d, total time within 1%%: %d names (%.1f%% of GPU time), "
      "overall GPU time ratio %.4f" % (len(b), len(missing), count_eq, within,
                                       100.0 * (row["gpu_time_share_within_1pct"] or 0),
                                       row["gpu_time_ratio"]))
    if missing:
        P("    missing: %s" % missing[:5])

P("== GPU-time flame graph: matmul kernels")
res["flame"] = {}
for r in range(1, rounds + 1):
    try:
        with open(f"{d}/dump{r}/folded.txt") as f:
            folded = [l.rstrip("\n").rsplit(" ", 1) for l in f]
    except OSError:
        continue
    mm = [(s.split(";"), int(v)) for s, v in folded if GEMM.search(s.split(";")[-1])]
    tot = sum(v for _, v in mm)
    deep = sum(v for fr, v in mm if len(fr) > 4)
    torchy = sum(v for fr, v in mm if any(re.search(r"at::|torch|addmm|linear|py::", x) for x in fr))
    pyth = sum(v for fr, v in mm if any(re.search(r"py::|_PyEval|PyObject_Call", x) for x in fr))
    res["flame"][r] = {"matmul_ns": tot, "deep_share": deep / tot if tot else None,
                       "torch_frames_share": torchy / tot if tot else None,
                       "python_frames_share": pyth / tot if tot else None}
    P("  round %d: matmul GPU ns %d; share with >3 CPU frames %.1f%%, with torch/aten frames "
      "%.1f%%, with Python frames %.1f%%" % (r, tot, 100.0 * deep / max(1, tot),
                                             100.0 * torchy / max(1, tot),
                                             100.0 * pyth / max(1, tot)))
    if r == rounds:
        for fr, v in sorted(mm, key=lambda x: -x[1])[:3]:
            P("    %d ns: %s" % (v, " <- ".join(reversed(fr[-14:]))))

P("== coexistence: torch.profiler started inside a process gpuscope traces")
res["coexist"] = coexist
P("  %s" % json.dumps(coexist))
print("\n".join(lines))
with open(os.path.join(d, "results.json"), "w") as f:
    json.dump(res, f, indent=1, default=str)
