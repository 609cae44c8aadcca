#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""What the GPU-idle estimator costs a query, and what it changes in the answer: two servers
(BEFORE: a gpuscope-server built before the estimator, AFTER: this one) are given the same
seeded recordings (tests/integration/idle_fixture.py: 20 nodes x 240 s of a training process as
the default agent records it), then GPU-idle flame graphs (one node; all 20 nodes) are asked of
both in interleaved rounds. Prints each answer's median time, the ratio, and each answer's error
against continuous tracing's truth (worst top-5 share, total).
Usage: bench/estimator/run.py BEFORE_SERVER [AFTER_SERVER] [ROUNDS=7]"""
import os
import statistics
import sys
import time
import urllib.parse

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "../../tests/integration"))
import gpuscope_server as gs  # noqa: E402
from idle_fixture import Recording, S  # noqa: E402

before = sys.argv[1]
after = sys.argv[2] if len(sys.argv) > 2 else gs.SERVER
rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 7
T0 = (gs.now_ns() // (60 * S) - 30) * 60 * S
DUR = 240
recs = [Recording(seed, T0, f"s{seed}", dur_s=DUR) for seed in range(20)]
bodies = [gs.encode(r.script(), "zstd") for r in recs]
servers = {}
for name, binary in (("before", before), ("after", after)):
    gs.SERVER = binary
    s = gs.Server()
    s.start()
    for b in bodies:
        code, body = s.ingest(b, "zstd")
        assert code == 204, (name, code, body)
    servers[name] = s
rng = f"from={T0 / 1e9:.3f}&to={(T0 + DUR * S) / 1e9:.3f}"
q = urllib.parse.quote
S0 = q('{node="s0"}')
queries = {"one node": f"/api/v1/flamegraph?{rng}&gpu_idle=0&selector={S0}",
           "20 nodes": f"/api/v1/flamegraph?{rng}&gpu_idle=0"}
times = {(n, k): [] for n in servers for k in queries}
answers = {}
try:
    for _ in range(rounds):
        for k, path in queries.items():
            for n, s in servers.items():
                t = time.monotonic()
                answers[(n, k)] = s.get_json(path)
                times[(n, k)].append(time.monotonic() - t)
finally:
    for s in servers.values():
        s.stop()


def leaves(node, out):
    for c in node.get("children", []):
        if c.get("self"):
            out[c["name"]] = out.get(c["name"], 0) + c["self"]
        leaves(c, out)
    return out


truth = recs[0].truth()
ttot = sum(truth.values())
print(f"{rounds} rounds, 20 recordings of {DUR} s ({sum(len(r.samples) for r in recs)} samples)")
for k in queries:
    b, a = statistics.median(times[("before", k)]), statistics.median(times[("after", k)])
    print(f"{k}: before {b * 1e3:.0f} ms, after {a * 1e3:.0f} ms, ratio {a / b:.2f}")
for n in servers:
    fg = answers[(n, "one node")]
    est = leaves(fg["root"], {})
    etot = sum(est.values()) or 1
    top5 = sorted(truth, key=truth.get, reverse=True)[:5]
    worst = max(abs(est.get(f, 0) / etot - truth[f] / ttot) for f in top5)
    print(f"{n}: node s0 GPU-idle samples {etot} (truth {ttot}, {100 * (etot - ttot) / ttot:+.0f} %), "
          f"worst top-5 share error {100 * worst:.1f} points; "
          + ", ".join(f"{f} {100 * est.get(f, 0) / etot:.1f}/{100 * truth[f] / ttot:.1f}"
                      for f in top5))
