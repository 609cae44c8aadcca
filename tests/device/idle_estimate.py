#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
# Compares the GPU-idle answers of tests/device/idle_estimate.sh: the default mode's (estimated)
# against continuous tracing's (the truth), each from an answers-MODE.json file that script
# wrote (both from one run, or from two device calls). Usage: idle_estimate.py ANSWERS.json...
import json
import sys

ans = {}
for path in sys.argv[1:]:
    ans.update(json.load(open(path)))
for m in ("default", "continuous"):
    if m not in ans:
        a = ans.get("default") or ans.get("continuous")
        if a:
            print("%s only: GPU-idle samples %d of %d; %s" % (
                "default" if "default" in ans else "continuous", a["top"]["total"],
                a["all_total"], ((a["sources"] or {}).get("estimate") or {}).get("summary")))
        sys.exit("no %s run among %s" % (m, sys.argv[1:]))
def shares(m, key):
    t = ans[m]["top"]
    tot = t.get("total") or 1
    return {f["name"]: f[key] / tot for f in t.get("functions", [])}, tot
ct, ctot = shares("continuous", "total")
dt, dtot = shares("default", "total")
cs, _ = shares("continuous", "self")
ds, _ = shares("default", "self")
for m in ("default", "continuous"):
    a = ans[m]
    print("%s: %.0f s, CPU samples %d, GPU-idle samples %d; %s" % (
        m, a["span_s"], a["all_total"], a["top"]["total"],
        ((a["sources"] or {}).get("estimate") or {}).get("summary")))
print("\nPython functions (inclusive share of the GPU-idle samples):")
print("%-28s %10s %10s %8s" % ("function", "continuous", "default", "diff"))
worst = 0
for fn in ("cpu_phase", "augment", "slow_batch", "gpu_phase", "build", "<module>"):
    c, d = ct.get(fn, 0), dt.get(fn, 0)
    worst = max(worst, abs(c - d))
    print("%-28s %9.1f%% %9.1f%% %+7.1f" % (fn, 100 * c, 100 * d, 100 * (d - c)))
print("\ntop-5 by self in continuous:")
for fn in sorted(cs, key=cs.get, reverse=True)[:5]:
    c, d = cs.get(fn, 0), ds.get(fn, 0)
    worst = max(worst, abs(c - d))
    print("%-40s %9.1f%% %9.1f%% %+7.1f" % (fn[:40], 100 * c, 100 * d, 100 * (d - c)))
print("\ntotal GPU-idle CPU samples: continuous %d, default %d (%+.1f %%); per second of the job: %.1f vs %.1f" % (
    ctot, dtot, 100 * (dtot - ctot) / max(ctot, 1), ctot / ans["continuous"]["span_s"],
    dtot / ans["default"]["span_s"]))
print("worst share difference: %.1f points" % (100 * worst))