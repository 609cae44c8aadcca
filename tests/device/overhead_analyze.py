# SPDX-License-Identifier: Apache-2.0
"""Analysis of tests/device/overhead_long.sh, per workload. Each on block (agent running) is
compared with the mean of the off blocks on both sides, by three measures:
  rate  units per second of wall time (what a user sees; host noise included)
  cpu   units per second of the main thread's CPU time (steal and host contention left out)
  med   the median step's wall time (a stall in a few steps left out)
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


def read_bpf(path):
    """Per on block: {prog: (runs, ns)} at its start and at its end."""
    out, snap, state = [], {}, None
    for line in open(path):
        k, *v = line.split()
        if k == "bpf":
            if len(v) == 3:	# a link's fd names its program without its stats
                snap[v[0]] = (int(v[1]), int(v[2]))
            continue
        if k == "on":
            out.append({"start": snap})
            state = "on"
        elif k == "end" and state == "on":
            state = "ended"
        elif k == "agent_cpu_ticks" and state == "ended":
            out[-1]["end"] = snap
            state = None
        snap = {} if k != "bpf" else snap
    return out


print("workload: measure    on / mean(off before, off after)            off / off (noise)")
for marks in sorted(glob.glob(os.path.join(d, "*.marks"))):
    wl = os.path.basename(marks)[:-6]
    recs = [json.loads(line) for line in open(os.path.join(d, wl + ".jsonl"))
            if line.startswith("{")]
    steps = [r for r in recs if "t0" in r and "summary" not in r]
    clock = next((r for r in recs if r.get("clock")), None)
    blocks = read_marks(marks)
    bpf = read_bpf(marks)
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
        bl["steal"] = st[7] / sum(st) if len(st) > 7 and sum(st) else 0
        bl["gc"] = sum(s.get("gc", 0) for s in ss) / wall
        bl["steps"] = ss
    for m in ("rate", "cpu", "med"):
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
    # windows inside on blocks: their share of the time and the extra time of their steps
    wshare, wcost, rest = [], [], []
    for i, bl in enumerate(blocks):
        if bl["kind"] != "on" or "steps" not in bl:
            continue
        span = bl["b"] - bl["a"]
        inw = sum(max(0, min(b, bl["b"]) - max(a, bl["a"])) for a, b, _ in wins)
        ss = bl["steps"]
        outside = [s["t1"] - s["t0"] for s in ss if not overlaps(s)]
        base = med(outside)
        extra = sum((s["t1"] - s["t0"]) - base for s in ss if overlaps(s)) if base else 0
        wshare.append(inw / span)
        wcost.append(extra / span)
        offs = [x for j in (i - 1, i + 1) if 0 <= j < len(blocks)
                for x in [s["t1"] - s["t0"] for s in blocks[j].get("steps", [])]]
        if offs and outside:
            rest.append(med(offs) / base)
    print("          windows: %d in the run (%s); in on blocks: traced %s of the time, their steps' "
          "extra wall time %s of it" % (
              len(wins), ",".join(sorted({r for _, _, r in wins})) or "-",
              " ".join("%.2f%%" % (100 * x) for x in wshare),
              " ".join("%.2f%%" % (100 * x) for x in wcost)))
    print("          always-on rest (median step off / median step on outside windows): %s" % fmt(rest))
    cpu = [bl["agent_cpu"] for bl in blocks if "agent_cpu" in bl]
    line = "          agent CPU in on blocks: " + " ".join("%.1f%%" % (100 * c) for c in cpu)
    for j, b in enumerate(bpf):
        if "end" not in b:
            continue
        bl = [x for x in blocks if x["kind"] == "on"][j]
        ns = sum(b["end"][p][1] - b["start"].get(p, (0, 0))[1] for p in b["end"])
        runs = sum(b["end"][p][0] - b["start"].get(p, (0, 0))[0] for p in b["end"])
        line += "; BPF %.2f ms/s in %d runs/s" % (ns / 1e6 / (bl["b"] - bl["a"]), runs / (bl["b"] - bl["a"]))
    print(line)
