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
s = Server(args=["--gpu-hour-price", "2.00", "--gpu-hour-price", "NVIDIA H200=4.00"]).start()
try:
    code, body = s.ingest(encode(fx.script(T, D)))
    if code != 204:
        print(f"ingest: {code} {body}")
        sys.exit(1)
    r = subprocess.run(["node", os.path.join(ROOT, "tests", "e2e", "efficiency_e2e.mjs"),
                        "--url", s.url, "--from", str(T // 10**6), "--to", str((T + D * 10**9) // 10**6),
                        "--out", os.path.join(ROOT, ".output", "e2e")], timeout=240)
    sys.exit(r.returncode)
finally:
    s.stop()
