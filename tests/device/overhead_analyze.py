# SPDX-License-Identifier: Apache-2.0
"""Analysis of tests/device/overhead_long.sh: per workload, the step rate of each block (steps
whose [t0, t1] lies inside the block), each on block's ratio to the mean of the off blocks on
both sides, the off blocks' neighbour ratios (noise floor), and the agent's CPU during on
blocks. Usage: overhead_analyze.py DIR CLK_TCK"""
import glob
import json
import os
import statistics
import sys

d, tck = sys.argv[1], float(sys.argv[2])
print("%-7s %-44s %-32s %s" % ("load", "on / mean(off before, off after)", "off / off (noise)",
                               "agent CPU (on blocks)"))
for marks in sorted(glob.glob(os.path.join(d, "*.marks"))):
    wl = os.path.basename(marks)[:-6]
    steps = [json.loads(line) for line in open(os.path.join(d, wl + ".jsonl"))
             if line.startswith("{") and '"t0"' in line]
    steps = [s for s in steps if "summary" not in s]
    blocks, cpu, cur = [], [], None
    for line in open(marks):
        k, *v = line.split()
        if k in ("on", "off"):
            cur = (k, float(v[0]))
        elif k == "end" and cur:
            blocks.append((cur[0], cur[1], float(v[0])))
            cur = None
        elif k == "agent_cpu_ticks":
            cpu.append(float(v[0]) / tck / float(v[1]))

    def rate(a, b):
        inside = [s for s in steps if s["t0"] >= a and s["t1"] <= b]
        if not inside:
            return None
        return sum(s["units"] for s in inside) / (inside[-1]["t1"] - inside[0]["t0"])
    rates = [(k, rate(a, b)) for k, a, b in blocks]
    on_ratio, noise = [], []
    for i, (k, r) in enumerate(rates):
        if k == "on" and 0 < i < len(rates) - 1 and r and rates[i - 1][1] and rates[i + 1][1]:
            on_ratio.append(r / ((rates[i - 1][1] + rates[i + 1][1]) / 2))
    offs = [r for k, r in rates if k == "off" and r]
    noise = [b / a for a, b in zip(offs, offs[1:])]
    print("%-7s %-44s %-32s %s" % (
        wl, " ".join("%.4f" % x for x in on_ratio) +
        ("  median %.4f" % statistics.median(on_ratio) if on_ratio else ""),
        " ".join("%.4f" % x for x in noise),
        " ".join("%.2f%%" % (100 * c) for c in cpu)))
    print("        rates per block: " + ", ".join("%s %.1f" % (k, r or 0) for k, r in rates))
