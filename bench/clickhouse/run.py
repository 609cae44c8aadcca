#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""SQLite and ClickHouse stores side by side under the same generated load (tests/tools/batchgen
load: 16 CPUs at 99 Hz per simulated agent, 3000 distinct stacks, 10 s zstd batches):
- ingest: CPU seconds per million samples, front-end and ClickHouse processes separately (read
  from /proc, so the figures do not depend on how much of the machine others held), bytes per
  sample on disk including dictionaries and rollups (ClickHouse: after OPTIMIZE FINAL, merges'
  CPU included);
- query: flame graph latency (median of 5) for 1 h and 24 h of one 16-CPU node.
One ClickHouse server (a shard); the cluster adds a network hop, not work per sample.
Usage: bench/clickhouse/run.py [AGENTS=4] [SECONDS=20] [FILL_HZ=19]"""
import os
import subprocess
import sys
import tempfile
import time
import urllib.parse

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
import clickhouse  # noqa: E402
from gpuscope_server import BATCHGEN, Server  # noqa: E402

HZ = os.sysconf("SC_CLK_TCK")
# Schema 2 (schema 1 had samples + samples_1m/1h/1d fed by materialized views)
SAMPLE_TABLES = ("samples_raw", "samples_rollup")
TABLES = SAMPLE_TABLES + ("labelsets", "stacks", "locations")


def cpu_s(pid):
    with open(f"/proc/{pid}/stat") as f:
        v = f.read().rsplit(")", 1)[1].split()
    return (int(v[11]) + int(v[12])) / HZ


def load(url, *args):
    r = subprocess.run([BATCHGEN, "load", "--url", url + "/api/v1/ingest", "--encoding", "zstd",
                        *args], stdout=subprocess.PIPE, check=True)
    f = r.stdout.decode().split()
    return {f[i]: float(f[i + 1]) for i in range(0, len(f) - 1, 2)}


def du(path):
    return sum(os.path.getsize(os.path.join(d, n)) for d, _, ns in os.walk(path) for n in ns)


def median_ms(srv, query):
    ts = []
    for _ in range(5):
        t = time.time()
        fg = srv.get_json("/api/v1/flamegraph?" + query)
        ts.append(time.time() - t)
    return sorted(ts)[2] * 1000, fg["total"]


def run(name, store_args, ch, agents, secs, fill_hz):
    srv = Server(store_args=store_args, args=["--retention", "40d"]).start()
    fe, chp = srv.proc.pid, ch.proc.pid if ch else None
    try:
        c0, k0 = cpu_s(fe), cpu_s(chp) if ch else 0
        res = load(srv.url, "--agents", str(agents), "--seconds", str(secs))
        if ch:
            k_ins = cpu_s(chp)
            for t in TABLES:
                ch.query(f"OPTIMIZE TABLE bench.{t} FINAL")
            nbytes = int(ch.query("SELECT sum(bytes_on_disk) FROM system.parts WHERE"
                                  " database = 'bench' AND active"))
            by = ch.query("SELECT table, sum(bytes_on_disk) FROM system.parts WHERE"
                          " database = 'bench' AND active GROUP BY table ORDER BY table")
        else:
            time.sleep(3)	# rollups catch up (their cost belongs to ingest)
            nbytes = du(srv.data)
        c1, k1 = cpu_s(fe), cpu_s(chp) if ch else 0
        n = res["samples"]
        print(f"{name}: {agents} agents, {secs} s: {n:.0f} samples, "
              f"{res['samples_per_s']:.0f}/s wall (load {os.getloadavg()[0]:.1f})")
        print(f"  CPU per M samples: front-end {(c1 - c0) * 1e6 / n:.2f} s"
              + (f", ClickHouse {(k1 - k0) * 1e6 / n:.2f} s" if ch else "")
              + f" -> {((c1 - c0) + (k1 - k0)) * 1e6 / n:.2f} us/sample in all")
        print(f"  disk {nbytes / n:.2f} bytes/sample incl. dictionaries and rollups")
        if ch:
            print(f"  ClickHouse CPU while inserting {(k_ins - k0) * 1e6 / n:.2f} us/sample, merging"
                  f" to one part {(k1 - k_ins) * 1e6 / n:.2f}; bytes/sample by table: "
                  + ", ".join(f"{t} {int(b) / n:.2f}" for t, b in
                              (x.split() for x in by.strip().splitlines())))
        if not fill_hz:
            return
        # 24 h of one node, 16 CPUs at fill_hz, 60 s batches
        end = int(time.time()) // 3600 * 3600
        t0 = time.time()
        c0, k0 = cpu_s(fe), cpu_s(chp) if ch else 0
        res = load(srv.url, "--node", "q24", "--agents", "4", "--start", str(end - 86400),
                   "--span", "6h", "--hz", str(fill_hz), "--batch", "60s", "--seconds", "1500")
        c1, k1 = cpu_s(fe), cpu_s(chp) if ch else 0
        print(f"  fill: 24 h of node q24 (16 CPUs x {fill_hz} Hz): {res['samples']:.0f} samples"
              f" in {time.time() - t0:.0f} s; CPU {((c1 - c0) + (k1 - k0)) * 1e6 / res['samples']:.2f}"
              f" us/sample (front-end {(c1 - c0) * 1e6 / res['samples']:.2f})")
        time.sleep(3)
        sel = urllib.parse.quote('{node="q24"}')
        for label, q in [("1 h", f"from={end - 3600}&to={end}"),
                         ("1 h unaligned", f"from={end - 3617}.5&to={end - 17}.5"),
                         ("24 h", f"from={end - 86400}&to={end}")]:
            ms, total = median_ms(srv, f"{q}&selector={sel}")
            print(f"  flame graph {label}: {ms:.0f} ms (total {total})")
        if ch:
            # Rollup parts are merged in the background; measure once they are.
            t0 = time.time()
            for t in SAMPLE_TABLES:
                ch.query(f"OPTIMIZE TABLE bench.{t} FINAL")
            print(f"  after OPTIMIZE FINAL ({time.time() - t0:.0f} s):")
            for label, q in [("1 h", f"from={end - 3600}&to={end}"),
                             ("24 h", f"from={end - 86400}&to={end}")]:
                ms, total = median_ms(srv, f"{q}&selector={sel}")
                print(f"  flame graph {label}: {ms:.0f} ms (total {total})")
    finally:
        srv.stop()


def main():
    agents = int(sys.argv[1]) if len(sys.argv) > 1 else 4
    secs = int(sys.argv[2]) if len(sys.argv) > 2 else 20
    fill_hz = int(sys.argv[3]) if len(sys.argv) > 3 else 19
    print(f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {os.cpu_count()} cores")
    run("sqlite", None, None, agents, secs, fill_hz)
    cl = clickhouse.Cluster(1).start()
    try:
        run("clickhouse", ["--store", "clickhouse", "--clickhouse-url", cl.servers[0].url,
                           "--clickhouse-database", "bench"], cl.servers[0], agents, secs,
            fill_hz)
    finally:
        cl.cleanup()


main()
