#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The findings panel end to end: a real gpuscope-server holding a fixture with two findings,
driven in Debian's chromium by playwright-core (tests/e2e/findings_e2e.mjs). Screenshots go to
.output/e2e/.

The fixture: the efficiency fixture's minute of node n1 (team-b's GPU 1 idle half the time while
its launching thread waits on a futex and its loader thread works: starved_dataloader, measured;
team-a's GPU 0 busy 90 %: healthy), then on node n2 pod train-c (team-c) holding GPU 0 for 80 s
whose first 40 s a budget (duty-cycle) trace window decides idle and nothing decides the rest,
while its main thread runs tokenize the whole time: input_on_launch_thread, its GPU-idle samples
mostly standing for undecided time (estimated)."""
import json
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
S = 10**9
D = 60
T = (now_ns() // S - 900) * S
E = T + (D + 60) * S     # team-c starts a minute after the efficiency fixture ends
W, U = 40, 40            # its window decides W s idle, U s after it nothing decides


def estimated_script():
    g = "gpu=0,gpu_uuid=GPU-dddd,gpu_model=NVIDIA%20H200"
    c = "pid=300,comm=train,pod=train-c,namespace=team-c,container=main"
    L = ["node n2",
         f"interval gpu_trace_window {c} {E} {E + W * S} reason=budget",
         f"interval gpu_observed gpu=0,reason=budget,source=kernels {E} {E + W * S} -",
         f"interval thread_state {c},tid=300,thread=train {E} {E + (W + U) * S} state=running,cpu=1"]
    for s in range(1, W + U + 1):
        L.append(f"metric gpu_process_memory_bytes {g},pid=300,comm=train {E + s * S} 1000000000")
    for j in range((W + U) * 10):
        L.append(f"sample {E + j * 100 * 10**6} cpu 1 {c},tid=300,thread=train "
                 "main;train.py:step;tokenize")
    return "\n".join(L) + "\n"


EXPECT = [["input_on_launch_thread", "team-c", "estimated"],
          ["starved_dataloader", "team-b", "measured"]]

s = Server(args=["--gpu-hour-price", "2.00", "--gpu-hour-price", "NVIDIA H200=4.00"]).start()
try:
    for script in (fx.script(T, D), estimated_script()):
        code, body = s.ingest(encode(script))
        if code != 204:
            print(f"ingest: {code} {body}")
            sys.exit(1)
    r = subprocess.run(["node", os.path.join(ROOT, "tests", "e2e", "findings_e2e.mjs"),
                        "--url", s.url, "--from", str(T // 10**6),
                        "--to", str((E + (W + U) * S) // 10**6), "--expect", json.dumps(EXPECT),
                        "--healthy", '{namespace="team-a"}',
                        "--out", os.path.join(ROOT, ".output", "e2e")], timeout=240)
    if r.returncode:
        print(s.logtext()[-2000:])
    sys.exit(r.returncode)
finally:
    s.stop()
