#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The agent's push-path cost. Part 1: push_bench (synthetic, realistic 10 s batch of a 16-CPU node:
CPU per batch build/encode/compress and bytes per sample for zstd, gzip, none, interleaved).
Part 2 (needs root and gpuscope-server): two real agents, zstd and gzip, run side by side
system-wide against one real server for DURATION seconds while tests/progs/burn runs, and their
/metrics give the real encode+compress CPU per batch and wire bytes per sample.
Usage: bench/push/run.py [DURATION=30]"""
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
from pushlib import AGENT, PROGS, SERVER, Agent, Scratch, Server, start_workload  # noqa: E402

duration = float(sys.argv[1]) if len(sys.argv) > 1 else 30
subprocess.run(["make", "-s", "-C", ROOT, ".output/bench/push_bench"], check=True)
print("== synthetic batch (bench/push/push_bench.c)", flush=True)
subprocess.run([os.path.join(ROOT, ".output", "bench", "push_bench"), "15"], check=True)

if os.geteuid() != 0 or not os.access(SERVER, os.X_OK) or not os.access(AGENT, os.X_OK):
    print("real agents: skipped (needs root, gpuscope-agent and gpuscope-server)")
    sys.exit(0)
print("\n== real agents, system-wide, %.0f s, push every 10 s, side by side" % duration, flush=True)
tmp = Scratch("bench-push")
server = Server(tmp.path("data"), log=tmp.path("server.log"))
server.start()
work = start_workload(os.path.join(PROGS, "burn"), str(duration + 15))
agents = {}
try:
    for codec in ("zstd", "gzip"):
        agents[codec] = Agent(server.url, ["--push-interval", "10s", "--compression", codec,
                                           "--node", "bench-" + codec, "--modules", "cpu-sampler"],
                              tmp.path("agent-%s.log" % codec))
    time.sleep(duration)
    res = {c: a.metrics() for c, a in agents.items()}
finally:
    for a in agents.values():
        a.stop()
    work.kill()
    server.stop()
    tmp.cleanup()
print("%-6s %8s %9s %14s %18s %14s" % ("codec", "batches", "samples", "bytes/sample",
                                       "CPU ms per batch", "CPU us/sample"))
for c, m in res.items():
    b = m.get("gpuscope_agent_batches_pushed_total", 0)
    s = m.get("gpuscope_agent_samples_sent_total", 0)
    by = m.get("gpuscope_agent_bytes_sent_total", 0)
    cpu = m.get("gpuscope_agent_encode_cpu_seconds_total", 0)
    print("%-6s %8d %9d %14.2f %18.2f %14.2f" % (c, b, s, by / s if s else 0,
                                                 1e3 * cpu / b if b else 0, 1e6 * cpu / s if s else 0))
