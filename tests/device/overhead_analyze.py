# SPDX-License-Identifier: Apache-2.0
"""Analysis of tests/device/overhead_long.sh, per workload. Each on block (agent running) is
compared with the mean of the off blocks on both sides, by three measures:
  rate  units per second of wall time (what a user sees; host noise included)
  cpu   units per second of the main thread's CPU time (steal and host contention left out)
  med   the median step's wall time (a stall in a few steps left out)
  ins   units per instruction of the main thread, user and kernel (where the machine has a PMU:
        the work the agent adds to the thread, whatever the host's speed)
The off blocks' neighbour ratios are each measure's noise floor. Then the on blocks are split
by the server's gpu_trace_window intervals of the process: the windows' share of the time, the
extra wall time of the steps that overlapped a window over the block's other steps (the
windows' cost as a share of the block), and the always-on rest (steps outside windows against
the off blocks). Also steal per block, the agent's CPU and its BPF run time per second.
Usage: overhead_analyze.py DIR CLK_TCK"""
import glob
import json
import os
import statistics
import sys

from devlib import bpf_progs

d, tck = sys.argv[1], float(sys.argv[2])


def med(xs):
    return statistics.median(xs) if xs else None


def fmt(xs):
    xs = [x for x in xs if x]
    if not xs:
        return "-"
    return " ".join("%.4f" % x for x in xs) + ("  med %.4f" % med(xs) if len(xs) > 1 else "")


def read_marks(path):
    """The blocks: kind, start and end (monotonic s), /proc/stat at both, the agent's CPU."""
    blocks, cur = [], None
    for line in open(path):
        k, *v = line.split()
        if k in ("on", "off"):
            cur = {"kind": k, "a": float(v[0]), "stat0": [int(x) for x in v[1:]]}
        elif k == "end" and cur:
            cur["b"] = float(v[0])
            cur["stat1"] = [int(x) for x in v[1:]]
            blocks.append(cur)
            cur = None
        elif k == "agent_cpu_ticks" and blocks:
            blocks[-1]["agent_cpu"] = float(v[0]) / tck / float(v[1])
    return blocks


print("workload: measure    on / mean(off before, off after)            off / off (noise)")
for marks in sorted(glob.glob(os.path.join(d, "*.marks"))):
    wl = os.path.basename(marks)[:-6]
    recs = [json.loads(line) for line in open(os.path.join(d, wl + ".jsonl"))
            if line.startswith("{")]
    steps = [r for r in recs if "t0" in r and "summary" not in r]
    clock = next((r for r in recs if r.get("clock")), None)
    blocks = read_marks(marks)
    wins = []
    try:
        ivs = json.load(open(os.path.join(d, wl + ".windows.json"))).get("intervals", [])
        if clock:	# wall ms -> the steps' monotonic seconds
            off = clock["mono"] - clock["wall"]
            wins = sorted((iv["start_ms"] / 1e3 + off, iv["end_ms"] / 1e3 + off,
                           (iv.get("attrs") or {}).get("reason", "?")) for iv in ivs)
    except (OSError, ValueError):
        pass

    def in_block(bl):
        return [s for s in steps if s["t0"] >= bl["a"] and s["t1"] <= bl["b"]]

    def overlaps(s):
        return any(a < s["t1"] and b > s["t0"] for a, b, _ in wins)

    meas = {}
    for bl in blocks:
        ss = in_block(bl)
        if not ss:
            continue
        wall = ss[-1]["t1"] - ss[0]["t0"]
        units = sum(s["units"] for s in ss)
        cpu = sum(s.get("cpu", 0) for s in ss)
        st = [b - a for a, b in zip(bl["stat0"], bl["stat1"])]
        bl["rate"] = units / wall
        bl["cpu"] = units / cpu if cpu else None
        bl["med"] = 1 / med([s["t1"] - s["t0"] for s in ss])
        ins = [s.get("ins") for s in ss]
        bl["ins"] = units / sum(ins) if all(ins) else None
        bl["steal"] = st[7] / sum(st) if len(st) > 7 and sum(st) else 0
        bl["gc"] = sum(s.get("gc", 0) for s in ss) / wall
        bl["steps"] = ss
    for m in ("rate", "cpu", "med", "ins"):
        on, noise = [], []
        for i, bl in enumerate(blocks):
            if bl["kind"] == "on" and 0 < i < len(blocks) - 1:
                p, n = blocks[i - 1].get(m), blocks[i + 1].get(m)
                if bl.get(m) and p and n:
                    on.append(bl[m] / ((p + n) / 2))
        offs = [bl.get(m) for bl in blocks if bl["kind"] == "off"]
        noise = [b / a for a, b in zip(offs, offs[1:]) if a and b]
        meas[m] = on
        print("%-8s  %-5s    %-44s %s" % (wl, m, fmt(on), fmt(noise)))
    print("          per block (units/s wall, steal %, gc %): " + ", ".join(
        "%s %.1f %.1f%% %.1f%%" % (bl["kind"], bl.get("rate", 0), 100 * bl.get("steal", 0),
                                   100 * bl.get("gc", 0)) for bl in blocks))
    # windows inside on blocks: their share of the time, and the extra wall time of the steps
    # that overlap one over the median of the steps within 10 s around it that overlap none
    wshare, wcost, rest, per_win = [], [], [], []
    for i, bl in enumerate(blocks):
        if bl["kind"] != "on" or "steps" not in bl:
            continue
        span = bl["b"] - bl["a"]
        ss = bl["steps"]
        inw = sum(max(0, min(b, bl["b"]) - max(a, bl["a"])) for a, b, _ in wins)
        extra = 0.0
        for a, b, _ in wins:
            if b <= bl["a"] or a >= bl["b"]:
                continue
            hit = [s for s in ss if s["t0"] < b and s["t1"] > a]
            near = [s["t1"] - s["t0"] for s in ss
                    if abs(s["t0"] - a) < 10 and not overlaps(s)]
            if hit and near:
                e = sum((s["t1"] - s["t0"]) - med(near) for s in hit)
                extra += e
                per_win.append((b - a, e))
        outside = [s["t1"] - s["t0"] for s in ss if not overlaps(s)]
        wshare.append(inw / span)
        wcost.append(extra / span)
        offs = [x for j in (i - 1, i + 1) if 0 <= j < len(blocks)
                for x in [s["t1"] - s["t0"] for s in blocks[j].get("steps", [])]]
        if offs and outside:
            rest.append(med(offs) / med(outside))
    print("          windows: %d in the run (%s); in on blocks: traced %s of the time, their steps' "
          "extra wall time %s of it" % (
              len(wins), ",".join(sorted({r for _, _, r in wins})) or "-",
              " ".join("%.2f%%" % (100 * x) for x in wshare),
              " ".join("%.2f%%" % (100 * x) for x in wcost)))
    if per_win:
        print("          per window (length s, extra s): " + " ".join(
            "%.2f/%.3f" % w for w in per_win) + "; extra per traced second %.3f" % (
            sum(e for _, e in per_win) / sum(l for l, _ in per_win)))
    print("          always-on rest (median step off / median step on outside windows): %s" % fmt(rest))
    cpu = [bl["agent_cpu"] for bl in blocks if "agent_cpu" in bl]
    line = "          agent CPU in on blocks: " + " ".join("%.1f%%" % (100 * c) for c in cpu)
    for j, bl in enumerate(x for x in blocks if x["kind"] == "on"):
        b = 2 * (j + 1)	# overhead_long.sh numbers blocks from 1: the on blocks are even
        p0 = bpf_progs(os.path.join(d, "metrics-%s-%d-start.txt" % (wl, b)))
        p1 = bpf_progs(os.path.join(d, "metrics-%s-%d.txt" % (wl, b)))
        span = bl["b"] - bl["a"]
        top = sorted(((p1[p][1] - p0.get(p, [0, 0])[1], p1[p][0] - p0.get(p, [0, 0])[0], p)
                      for p in p1), reverse=True)
        if top:
            line += "\n          BPF in on block %d: %.2f ms/s: " % (b, sum(t[0] for t in top) / span * 1e3) + \
                ", ".join("%s %.0f/s x %.1f us" % (p, n / span, 1e6 * t / n) for t, n, p in top[:5] if n)
    print(line)
