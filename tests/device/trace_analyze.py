# SPDX-License-Identifier: Apache-2.0
"""Summarises a tests/device/trace_budget.sh run: throughput ratios to bare, steps inside and
outside trace windows (from the library's debug lines, CLOCK_MONOTONIC like the steps), window
duty, kernel-name GPU-time shares of windows against continuous tracing. Usage: DIR."""
import glob
import json
import os
import re
import statistics
import sys

W = sys.argv[1]
res = {}


def load(name):
    steps, summ = {}, {}
    try:
        for line in open(os.path.join(W, name + ".jsonl")):
            r = json.loads(line)
            if r.get("summary"):
                summ[r["phase"]] = r
            else:
                steps.setdefault(r["phase"], []).append((r["t0"], r["t1"], r["units"]))
    except (OSError, ValueError):
        pass
    return steps, summ


def windows(name):
    ws, op = [], None
    try:
        for line in open(os.path.join(W, name + ".err")):
            m = re.search(r"window open at (\d+)", line)
            if m:
                op = int(m.group(1)) / 1e9
            m = re.search(r"window closed at (\d+)", line)
            if m and op is not None:
                ws.append((op, int(m.group(1)) / 1e9))
                op = None
    except OSError:
        pass
    if op is not None:
        ws.append((op, 1e18))
    return ws


def rate(st):
    u = sum(s[2] for s in st)
    t = sum(s[1] - s[0] for s in st)
    return u / t if t > 0 else float("nan")


def classify(st, ws, settle=0.3):
    inside, outside = [], []
    for s in st:
        if any(s[0] >= a and s[1] <= b for a, b in ws):
            inside.append(s)
        elif all(s[1] <= a or s[0] >= b + settle for a, b in ws):
            outside.append(s)
    return inside, outside


# ---- part 1 ----
base, _ = load("c-bare")
if base:
    print("== part 1: what closing a window leaves behind (rate / bare rate; steps inside, and "
          "outside windows >= 0.3 s after a close)")
    print("%-14s %-7s %10s %8s %8s %6s" % ("run", "phase", "bare/s", "inside", "outside", "wins"))
    res["close_modes"] = {}
    for name in ["c-noagent", "c-finalize", "c-unsubscribe", "c-disable"]:
        st, _ = load(name)
        ws = windows(name)
        for ph in sorted(base):
            b = rate(base[ph])
            i, o = classify(st.get(ph, []), ws)
            ri = rate(i) / b if i else float("nan")
            ro = rate(o) / b if o else float("nan")
            print("%-14s %-7s %10.0f %8.3f %8.3f %6d" % (name, ph, b, ri, ro, len(ws)))
            res["close_modes"].setdefault(name, {})[ph] = {
                "bare_rate": b, "inside": ri, "outside": ro, "windows": len(ws),
                "inside_steps": len(i), "outside_steps": len(o)}
    for name in ["c-finalize", "c-unsubscribe", "c-disable"]:
        costs = {"open": [], "close": []}
        for line in open(os.path.join(W, name + ".err")):
            m = re.search(r"window (open|closed) at \d+.*?, (\d+) ns", line)
            if m:
                costs["open" if m.group(1) == "open" else "close"].append(int(m.group(2)) / 1e6)
        if costs["open"]:
            print("%-14s open %.2f ms, close %.2f ms (medians, library's own time)" % (
                name, statistics.median(costs["open"]), statistics.median(costs["close"] or [0])))
            res["close_modes"][name]["open_ms"] = statistics.median(costs["open"])
            res["close_modes"][name]["close_ms"] = statistics.median(costs["close"] or [0])

# ---- part 2 ----
runs = sorted({os.path.basename(p)[:-6] for p in glob.glob(os.path.join(W, "t-*.jsonl"))})
if runs:
    print("\n== part 2: throughput / bare of the same round (median over rounds; each value)")
    table = {}
    rounds = sorted({r.rsplit("-", 1)[1] for r in runs})
    for r in rounds:
        _, bs = load("t-bare-" + r)
        for mode in ["default", "cont", "prof"]:
            _, ss = load("t-%s-%s" % (mode, r))
            for ph, s in ss.items():
                p = ph.split(":")[-1]
                if p in bs:
                    table.setdefault((mode, p), []).append(s["rate"] / bs[p]["rate"])
    print("%-8s %-9s %-9s %-9s" % ("phase", "default", "cont", "torch.prof"))
    res["table"] = {}
    for p in ["launch", "gpt2", "train"]:
        row = []
        for mode in ["default", "cont", "prof"]:
            v = table.get((mode, p), [])
            res["table"]["%s/%s" % (mode, p)] = v
            row.append("%.3f" % statistics.median(v) if v else "-")
        print("%-8s %-9s %-9s %-9s   %s" % (p, *row, {m: ["%.3f" % x for x in table.get((m, p), [])]
                                                     for m in ["default", "cont", "prof"]}))
    print("\nwindows in default runs (duty = traced time / phase time):")
    for r in rounds:
        st, ss = load("t-default-" + r)
        ws = windows("t-default-" + r)
        for ph, s in ss.items():
            tr = sum(max(0, min(b, s["t1"]) - max(a, s["t0"])) for a, b in ws)
            i, o = classify(st.get(ph, []), ws)
            _, bs = load("t-bare-" + r)
            br = bs.get(ph, {}).get("rate")
            print("  round %s %-7s duty %.3f, %d windows; inside %.3f outside %.3f of bare" % (
                r, ph, tr / (s["t1"] - s["t0"]), sum(1 for a, b in ws if b > s["t0"] and a < s["t1"]),
                rate(i) / br if i and br else float("nan"), rate(o) / br if o and br else float("nan")))
            res.setdefault("duty", []).append({"round": r, "phase": ph,
                                               "duty": tr / (s["t1"] - s["t0"]),
                                               "inside": rate(i) / br if i and br else None,
                                               "outside": rate(o) / br if o and br else None})
    for r in rounds:
        _, ps = load("t-prof-" + r)
        for ph, s in ps.items():
            print("  torch.profiler round %s %s: post-processing %.1f s" % (r, ph, s["post_s"]))

    def shares(name):
        try:
            t = json.load(open(os.path.join(W, "top-%s.json" % name)))
        except (OSError, ValueError):
            return {}
        tot = t.get("total") or 1
        return {f["name"]: f["self"] / tot for f in t.get("functions", [])}
    print("\nkernel-name GPU-time shares, windows (default) vs continuous, same round:")
    for r in rounds:
        a, b = shares("t-default-" + r), shares("t-cont-" + r)
        if not a or not b:
            print("  round %s: no data (%d / %d names)" % (r, len(a), len(b)))
            continue
        names = set(a) | set(b)
        diff = max(abs(a.get(n, 0) - b.get(n, 0)) for n in names)
        print("  round %s: %d / %d names, largest share difference %.2f points" % (
            r, len(a), len(b), 100 * diff))
        res.setdefault("shares", []).append({"round": r, "max_diff_points": 100 * diff,
                                             "names_default": len(a), "names_cont": len(b)})
json.dump(res, open(os.path.join(W, "results.json"), "w"), indent=1)
