# SPDX-License-Identifier: Apache-2.0
"""Checks what strips-dump recorded against the phases tests/device/strips_torch.py logged: in
the loader phases the launch thread runs (GPU idle, per NVML when recorded), in the GPU phases
it is blocked in cuda_sync inside cuStreamSynchronize; prints a 2 s strip of the thread, the
CUDA API counts and the top sync stack. Exit 0 when the checks hold.
Usage: strips_check.py RECORDS.jsonl PHASES.jsonl
"""
import collections
import json
import sys

recs = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
phases = [json.loads(l) for l in open(sys.argv[2]) if l.startswith("{")]
if not phases:
    print("FAIL: no phases recorded")
    sys.exit(1)
tid = str(phases[0]["tid"])
ts = [r for r in recs if r["t"] == "interval" and r["kind"] == "thread_state"
      and r["labels"].get("tid") == tid]
api = [r for r in recs if r["t"] == "interval" and r["kind"] == "cuda_api"]
util = sorted((r["time_ns"], r["value"]) for r in recs
              if r["t"] == "metric" and r["name"] == "gpu_utilization")


def share(t0, t1, pred):
    tot = 0
    for r in ts:
        if not pred(r):
            continue
        s, e = max(r["start_ns"], t0), min(r["end_ns"], t1)
        if e > s:
            tot += e - s
    return tot / max(1, t1 - t0)


def running(r):
    return r["attrs"].get("state") in ("running", "runnable") and r["attrs"].get("summary") != "1"


def sync_blocked(r):
    return r["attrs"].get("state") == "blocked" and r["attrs"].get("reason") == "cuda_sync"


def avg_util(t0, t1):
    v = [u for t, u in util if t0 <= t < t1]
    return sum(v) / len(v) if v else None


res = collections.defaultdict(list)
for p in phases[1:-1]:  # the first and last may be cut by the recording
    if p["phase"] == "load":
        res["load_run"].append(share(p["t0"], p["t1"], running))
    else:
        res["gpu_sync"].append(share(p["t0"], p["t1"], sync_blocked))
    u = avg_util(p["t0"], p["t1"])
    if u is not None:
        res["util_" + p["phase"]].append(u)


def med(v):
    v = sorted(v)
    return v[len(v) // 2] if v else float("nan")


calls = collections.Counter()
for r in api:
    calls[r["attrs"]["api"]] += int(r["attrs"].get("calls", "1"))
syncs = [r for r in api if r["attrs"]["api"] in ("cuStreamSynchronize", "cuStreamSynchronize_ptsz")
         and r["labels"].get("tid") == tid]
span = (phases[-1]["t1"] - phases[0]["t0"]) / 1e9
print("phases %d over %.1f s, thread %s, %d thread_state intervals" % (len(phases), span, tid, len(ts)))
print("loader phases: median share running/runnable %.3f (min %.3f)" %
      (med(res["load_run"]), min(res["load_run"] or [0])))
print("GPU phases: median share blocked in cuda_sync %.3f (min %.3f)" %
      (med(res["gpu_sync"]), min(res["gpu_sync"] or [0])))
if res["util_load"] or res["util_gpu"]:
    print("NVML gpu_utilization: loader phases median %.1f %%, GPU phases median %.1f %%" %
          (med(res["util_load"]), med(res["util_gpu"])))
print("CUDA API calls:", ", ".join("%s %d (%.0f/s)" % (k, v, v / span) for k, v in calls.most_common(8)))
print("cuStreamSynchronize on the thread: %d calls, median %.1f ms" %
      (len(syncs), med([(r["end_ns"] - r["start_ns"]) / 1e6 for r in syncs])))
stk = collections.Counter(tuple(r.get("frames", [])[:8]) for r in syncs)
if stk:
    print("top sync stack (innermost first):", " <- ".join(stk.most_common(1)[0][0]))
# a 2 s strip of the thread in the middle of the run, 20 ms per character
mid = phases[len(phases) // 2]["t0"]
line, lane = "", ""
for b in range(100):
    s0, s1 = mid + b * 20_000_000, mid + (b + 1) * 20_000_000
    acc = collections.Counter()
    for r in ts:
        s, e = max(r["start_ns"], s0), min(r["end_ns"], s1)
        if e > s:
            st = r["attrs"].get("state")
            ch = {"running": "#", "runnable": "-"}.get(st, "S" if sync_blocked(r) else ".")
            acc[ch] += e - s
    line += acc.most_common(1)[0][0] if acc else " "
    ph = [p for p in phases if p["t0"] <= (s0 + s1) // 2 < p["t1"]]
    lane += ("L" if ph[0]["phase"] == "load" else "G") if ph else " "
print("strip (20 ms/char, '#' run '-' wait '.' blocked 'S' cuda sync):")
print("  thread |%s|" % line)
print("  phase  |%s|  (L loader, G GPU step)" % lane)
ok = med(res["load_run"]) >= 0.8 and med(res["gpu_sync"]) >= 0.6 and len(syncs) > 0
print("PASS" if ok else "FAIL")
sys.exit(0 if ok else 1)
