#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The Efficiency page end to end: a real gpuscope-server holding the efficiency fixture, driven
in Debian's chromium by playwright-core (tests/e2e/efficiency_e2e.mjs). Screenshots go to
.output/e2e/."""
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpuscope_server import ROOT, Server, encode, now_ns, skip_if_unbuilt  # noqa: E402
from lib import skip  # noqa: E402
import efficiency_fixture as fx  # noqa: E402

skip_if_unbuilt()
if not os.path.exists("/usr/bin/chromium"):
    skip("chromium is not installed (apt: chromium)")
if not os.path.exists(os.path.join(ROOT, "ui", "node_modules", "playwright-core", "package.json")):
    skip("ui/node_modules is missing: run make")
H = 3600 * 10**9
T = (now_ns() // H - 3) * H
D = 3600
# A workload whose idle causes are estimated, after the fixture's range: pod train-c (team-c)
# on node n2 holds GPU 0 over [E, E + 70 s); a budget (duty-cycle) trace window decides
# [E, E + 10 s) idle, nothing decides the next 60 s (within the window's reach); load_batch
# runs at 5 samples/s. Its GPU-idle answer over [E, E + 70 s): 50 samples decided idle, each
# standing for 6 more: 350, of which 300 (86 %) estimated.
S_ = 10**9
E = T + (D + 600) * S_
E_SECS = 70


def estimated_script():
    g = "gpu=0,gpu_uuid=GPU-dddd,gpu_model=NVIDIA%20H200"
    c = "pid=300,comm=train,pod=train-c,namespace=team-c,container=main"
    L = ["node n2",
         f"interval gpu_trace_window {c} {E} {E + 10 * S_} reason=budget",
         f"interval gpu_observed gpu=0,reason=budget,source=kernels {E} {E + 10 * S_} -"]
    for s in range(1, E_SECS + 1):
        L.append(f"metric gpu_process_memory_bytes {g},pid=300,comm=train {E + s * S_} 1000000000")
    for j in range(E_SECS * 5):
        L.append(f"sample {E + j * 200 * 10**6} cpu 1 {c},tid=301,thread=loader loader_main;next_batch;load_batch")
    return "\n".join(L) + "\n"


s = Server(args=["--gpu-hour-price", "2.00", "--gpu-hour-price", "NVIDIA H200=4.00"]).start()
try:
    for script in (fx.script(T, D), estimated_script()):
        code, body = s.ingest(encode(script))
        if code != 204:
            print(f"ingest: {code} {body}")
            sys.exit(1)
    r = subprocess.run(["node", os.path.join(ROOT, "tests", "e2e", "efficiency_e2e.mjs"),
                        "--url", s.url, "--from", str(T // 10**6), "--to", str((T + D * 10**9) // 10**6),
                        "--est-from", str(E // 10**6), "--est-to", str((E + E_SECS * S_) // 10**6),
                        "--out", os.path.join(ROOT, ".output", "e2e")], timeout=240)
    sys.exit(r.returncode)
finally:
    s.stop()
