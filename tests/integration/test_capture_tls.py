#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Captures reach a live agent over https with a private CA and split tokens (issue 36, item 4):
the server with a self-signed certificate, an ingest token and a query token; the agent with
--ca-file and the ingest token (its capture poll sets the CA as its push does, and the capture
paths take the ingest token); `gpuscope capture` with --ca-file and the query token. Before,
the poll never set the CA (a TLS failure every second) and split tokens answered 401."""
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(__file__))
from pushlib import (CLI, SERVER, Agent, check, finish, free_port,  # noqa: E402
                     need_root_and_binaries, skip, start_cupti_window, wait_until)

need_root_and_binaries()
tmp = tempfile.mkdtemp(prefix="gpuscope-captls-")
cert, key = os.path.join(tmp, "cert.pem"), os.path.join(tmp, "key.pem")
r = subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", key, "-out", cert,
                    "-days", "2", "-subj", "/CN=127.0.0.1", "-addext",
                    "subjectAltName=IP:127.0.0.1"], capture_output=True, text=True)
if r.returncode:
    skip("openssl: " + r.stderr[-200:])
tok = {}
for side in ("ingest", "query"):
    tok[side] = os.path.join(tmp, side)
    with open(tok[side], "w") as f:
        f.write(f"{side}-secret\n")
port = free_port()
url = f"https://127.0.0.1:{port}"
log = os.path.join(tmp, "server.log")
srv = subprocess.Popen([SERVER, "--data", os.path.join(tmp, "data"), "--listen",
                        f"127.0.0.1:{port}", "--tls-cert-file", cert, "--tls-key-file", key,
                        "--ingest-token-file", tok["ingest"], "--query-token-file", tok["query"]],
                       stdout=open(log, "ab"), stderr=subprocess.STDOUT)
app = start_cupti_window()
agent = None
try:
    check(wait_until(lambda: "listening" in open(log).read() or srv.poll() is not None, 20),
          "server started: " + open(log).read()[-500:])
    agent = Agent(url, ["--node", "tlsnode", "--pid", str(app.pid), "--push-interval", "30s",
                        "--modules", "cupti", "--gpu-trace-window", "50ms",
                        "--gpu-trace-budget", "0.001%", "--ca-file", cert,
                        "--token-file", tok["ingest"]], os.path.join(tmp, "agent.log"))
    out = os.path.join(tmp, "trace.json")
    r = subprocess.run([CLI, "capture", "--server", url, "--ca-file", cert, "--token-file",
                        tok["query"], "--node", "tlsnode", "--pid", str(app.pid), "--duration",
                        "1s", "-o", out], capture_output=True, text=True, timeout=120)
    print(r.stderr)
    check(r.returncode == 0 and "agent: ok" in r.stderr,
          "capture over https with split tokens: rc %d" % r.returncode)
    check(os.path.getsize(out) > 0, "trace written")
    m = agent.metrics()
    check(m.get("gpuscope_agent_capture_poll_errors_total", 1) == 0 and
          m.get("gpuscope_agent_capture_answers_total", 0) >= 1,
          "the agent's poll: no TLS or auth failure, the answer posted: %s" %
          {k: v for k, v in m.items() if "capture_" in k})
    # each module's start time is exported (issue 33)
    check(m.get('gpuscope_agent_module_start_seconds{module="cupti"}', 0) > 0 and
          m.get('gpuscope_agent_module_up_after_seconds{module="cupti"}', 0) >=
          m.get('gpuscope_agent_module_start_seconds{module="cupti"}', 1),
          "module start times on /metrics: %s" % {k: v for k, v in m.items() if "module_" in k and
                                                 "seconds" in k})
finally:
    if agent:
        agent.stop()
    app.stdin.close()
    app.wait(timeout=30)
    srv.terminate()
    srv.wait(timeout=20)
finish()
