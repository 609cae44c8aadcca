# SPDX-License-Identifier: Apache-2.0
"""Analysis of tests/device/overhead_paired.sh for one workload: per block the rates of A and B
(units per second of wall time over the steps inside the block), their ratio q = A / B, and the
agent's cost c on the process it profiled:
  pairwise   each on block against the mean q of the off blocks on both sides:
             onA: q / q_off = 1 - c, onB: q_off / q = 1 - c
  swap       onA against onB blocks (q0 cancels): (1 - c)^2 = mean q(onA) / mean q(onB)
The off blocks' neighbour ratios are the noise floor of q. Also the windows' share of each on
block's time (the server's gpu_trace_window intervals of the profiled process), the agent's CPU
and its BPF time per program over the block.
Usage: overhead_paired.py DIR CLK_TCK WORKLOAD"""
import json
import math
import os
import statistics
import sys

from devlib import bpf_progs

d, tck, wl = sys.argv[1], float(sys.argv[2]), sys.argv[3]


def load(p):
    recs = [json.loads(line) for line in open(os.path.join(d, "%s.%s.jsonl" % (wl, p)))
            if line.startswith("{")]
    clock = next((r for r in recs if r.get("clock")), None)
    wins = []
    try:
        ivs = json.load(open(os.path.join(d, "%s.%s.windows.json" % (wl, p)))).get("intervals", [])
        if clock:	# wall ms -> the steps' monotonic seconds
            off = clock["mono"] - clock["wall"]
            wins = [(iv["start_ms"] / 1e3 + off, iv["end_ms"] / 1e3 + off) for iv in ivs]
    except (OSError, ValueError):
        pass
    return [r for r in recs if "t0" in r and "summary" not in r], wins


def rate(steps, a, b):
    ss = [s for s in steps if s["t0"] >= a and s["t1"] <= b]
    if len(ss) < 2:
        return None, 0
    return sum(s["units"] for s in ss) / (ss[-1]["t1"] - ss[0]["t0"]), len(ss)


steps = {p: load(p)[0] for p in "AB"}
wins = {p: load(p)[1] for p in "AB"}
blocks, cur, idx = [], None, 0
for line in open(os.path.join(d, wl + ".marks")):
    k, *v = line.split()
    if k in ("off", "onA", "onB"):
        cur = {"kind": k, "a": float(v[0])}
    elif k == "end" and cur:
        cur["b"] = float(v[0])
        blocks.append(cur)
        cur = None
    elif k == "agent_cpu_ticks" and blocks:
        blocks[-1]["agent_cpu"] = float(v[0]) / tck / float(v[1])
# the agent's /metrics file of each on block is named by its position in PATTERN
pos = 0
for bl in blocks:
    bl["pos"] = pos
    pos += 1
for bl in blocks:
    ra, na = rate(steps["A"], bl["a"], bl["b"])
    rb, nb = rate(steps["B"], bl["a"], bl["b"])
    bl["ra"], bl["rb"], bl["n"] = ra, rb, min(na, nb)
    bl["q"] = ra / rb if ra and rb else None

print("%s: per block  kind  rate A  rate B  q=A/B  steps  traced  agent CPU" % wl)
for bl in blocks:
    p = bl["kind"][-1] if bl["kind"] != "off" else None
    span = bl["b"] - bl["a"]
    traced = sum(max(0, min(b, bl["b"]) - max(a, bl["a"])) for a, b in wins[p]) / span if p else 0
    bl["traced"] = traced
    print("  %-5s %9.2f %7.2f %7.4f %5d %6s %6s" % (
        bl["kind"], bl["ra"] or 0, bl["rb"] or 0, bl["q"] or 0, bl["n"],
        "%.2f%%" % (100 * traced) if p else "-",
        "%.1f%%" % (100 * bl["agent_cpu"]) if "agent_cpu" in bl else "-"))

pair = []
for i, bl in enumerate(blocks):
    if bl["kind"] == "off" or not bl["q"]:
        continue
    offs = [blocks[j]["q"] for j in range(i - 1, -1, -1) if blocks[j]["kind"] == "off"][:1] + \
        [blocks[j]["q"] for j in range(i + 1, len(blocks)) if blocks[j]["kind"] == "off"][:1]
    offs = [q for q in offs if q]
    if not offs:
        continue
    q0 = sum(offs) / len(offs)
    pair.append(1 - (bl["q"] / q0 if bl["kind"] == "onA" else q0 / bl["q"]))
qa = [bl["q"] for bl in blocks if bl["kind"] == "onA" and bl["q"]]
qb = [bl["q"] for bl in blocks if bl["kind"] == "onB" and bl["q"]]
offq = [bl["q"] for bl in blocks if bl["kind"] == "off" and bl["q"]]
noise = [b / a - 1 for a, b in zip(offq, offq[1:])]
swap = 1 - math.sqrt(statistics.mean(qa) / statistics.mean(qb)) if qa and qb else None
print("%s: cost by pairs (on vs the off blocks beside): %s; mean %s" % (
    wl, " ".join("%+.2f%%" % (100 * c) for c in pair),
    "%+.2f%%" % (100 * statistics.mean(pair)) if pair else "-"))
print("%s: cost by swap (onA vs onB): %s; noise floor (off/off - 1): %s; windows traced %s" % (
    wl, "%+.2f%%" % (100 * swap) if swap is not None else "-",
    " ".join("%+.2f%%" % (100 * x) for x in noise) or "-",
    " ".join("%.2f%%" % (100 * bl["traced"]) for bl in blocks if bl["kind"] != "off")))
for bl in blocks:
    if bl["kind"] == "off":
        continue
    p1 = bpf_progs(os.path.join(d, "metrics-%s-%d.txt" % (wl, bl["pos"])))
    span = bl["b"] - bl["a"]	# the counters run from the agent's start: warm-up included
    top = sorted(((v[1], v[0], p) for p, v in p1.items()), reverse=True)
    if top:
        print("  BPF of the %s block (from the agent's start): " % bl["kind"] + ", ".join(
            "%s %d runs x %.1f us" % (p, n, 1e6 * t / n) for t, n, p in top[:6] if n))
