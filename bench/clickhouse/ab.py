#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Two gpuscope-server binaries on one ClickHouse server, alternately (2 rounds): CPU per sample
of the front-end and of ClickHouse (insert, then OPTIMIZE FINAL), bytes per sample, and the
batches each store commit held (group commit joins concurrent batches).
Usage: bench/clickhouse/ab.py OLD_SERVER_BINARY [AGENTS=4] [INTERVAL|-] [BATCHES=25]
(new: this tree's .output/gpuscope-server). Without INTERVAL the agents push flat out (at most
AGENTS batches in flight); with it (e.g. 1s) each pushes once per INTERVAL, AGENTS/INTERVAL
batches per second reaching the front-end, as many agents' 10 s pushes would). Each agent
sends BATCHES batches (10 s of 16 CPUs at 99 Hz each), so both binaries store the same samples
and bytes per sample compare (dictionaries are a fixed cost).
NEW_ARGS, OLD_ARGS (environment): more arguments for either, e.g. "--clickhouse-commit-delay 0"."""
import os, sys, time
ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
import clickhouse, gpuscope_server
from gpuscope_server import BATCHGEN, Server
import subprocess
HZ = os.sysconf("SC_CLK_TCK")
def cpu_s(pid):
    with open(f"/proc/{pid}/stat") as f:
        v = f.read().rsplit(")", 1)[1].split()
    return (int(v[11]) + int(v[12])) / HZ
AGENTS = sys.argv[2] if len(sys.argv) > 2 else "4"
PACE = ["--interval", sys.argv[3]] if len(sys.argv) > 3 and sys.argv[3] != "-" else []
BATCHES = int(sys.argv[4]) if len(sys.argv) > 4 else 25
bins = {"old": sys.argv[1], "new": os.path.join(ROOT, ".output", "gpuscope-server")}
cl = clickhouse.Cluster(1).start(); ch = cl.servers[0]
try:
    for rnd in range(2):
        for name in ("old", "new"):
            gpuscope_server.SERVER = bins[name]
            db = f"{name}{rnd}"
            srv = Server(store_args=["--store", "clickhouse", "--clickhouse-url", ch.url, "--clickhouse-database", db], args=["--retention", "40d"] + os.environ.get(name.upper() + "_ARGS", "").split())
            srv.start()
            time.sleep(1)
            c0, k0 = cpu_s(srv.proc.pid), cpu_s(ch.proc.pid)
            r = subprocess.run([BATCHGEN, "load", "--url", srv.url + "/api/v1/ingest", "--encoding", "zstd", "--agents", AGENTS, "--seconds", "600", "--span", f"{BATCHES * 10}s"] + PACE, stdout=subprocess.PIPE, check=True)
            f = r.stdout.decode().split(); res = {f[i]: float(f[i + 1]) for i in range(0, len(f) - 1, 2)}
            c1, k1 = cpu_s(srv.proc.pid), cpu_s(ch.proc.pid)
            for t in ch.query(f"SELECT name FROM system.tables WHERE database='{db}' AND engine LIKE '%MergeTree'").split():
                ch.query(f"OPTIMIZE TABLE {db}.{t} FINAL")
            k2 = cpu_s(ch.proc.pid)
            nb = int(ch.query(f"SELECT sum(bytes_on_disk) FROM system.parts WHERE database='{db}' AND active"))
            n = res["samples"]
            try:
                commits = srv.metric("gpuscope_server_store_commits_total")
            except KeyError:	# a binary from before group commit: one per batch
                commits = res["batches"]
            print(f"{name} round {rnd}: {n:.0f} samples, {res['batches']:.0f} batches, load {os.getloadavg()[0]:.1f}: front-end {(c1-c0)*1e6/n:.2f} us, ClickHouse insert {(k1-k0)*1e6/n:.2f} us, merge {(k2-k1)*1e6/n:.2f} us, {nb/n:.2f} B/sample, {res['batches'] / max(commits, 1):.2f} batches/commit", flush=True)
            srv.stop()
finally:
    cl.cleanup()
