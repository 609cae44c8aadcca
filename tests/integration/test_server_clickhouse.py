#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The ClickHouse store on a real two-shard cluster (two clickhouse-server processes, Distributed
tables sharded by node, a password) behind stateless gpuscope-server front-ends:
- start-up refusals exit 2 with one line: unreachable URL, wrong password, unknown cluster,
  a schema from a newer gpuscope;
- kill -9 of one front-end while batches stream in, the client retrying on the other: every
  batch stored exactly once (no loss, no duplicate), and a second delivery is all duplicates;
- a real agent (eBPF CPU samples) pushing through front-end A while shard 2 is down: ingest and
  queries answer 503 naming the shard, the agent spools, and once the shard is back every
  sample it took is in the flame graph read through front-end B;
- a database of schema 1 (one row per sample, view-fed rollups) is migrated at start, with the
  same answers after;
- retention drops whole day partitions past --retention (raw samples past --raw-retention,
  rollups kept), nothing newer."""
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.parse

import clickhouse
from gpuscope_server import SERVER, Server, check, encode, now_ns, skip_if_unbuilt
from pushlib import Agent, PROGS, cpu_sampler_up, start_workload, wait_until

skip_if_unbuilt()
if not clickhouse.available():
    raise AssertionError("clickhouse-server missing: scripts/install-deps installs it")
q = urllib.parse.quote
PW = "ch-s3cret"
DAY = 86400 * 10**9
MIN = 60 * 10**9


def refused(args, want):
    """gpuscope-server with args exits 2 with one error line containing want."""
    r = subprocess.run([SERVER, "--listen", "127.0.0.1:0"] + args, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, timeout=60)
    err = r.stderr.decode()
    lines = [x for x in err.splitlines() if "error" in x]
    check(r.returncode == 2 and len(lines) == 1 and want in lines[0],
          f"want exit 2 and one line with {want!r}: rc {r.returncode}, {err!r}")


def post(url, raw, timeout=60):
    """POST a batch; returns the HTTP status (0: no answer)."""
    import urllib.error
    import urllib.request
    req = urllib.request.Request(url + "/api/v1/ingest", data=raw, method="POST",
                                 headers={"Content-Type": "application/x-protobuf"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, b""
    except urllib.error.HTTPError as e:
        return e.code, e.read()
    except OSError:
        return 0, b""


def make_batches(n, per, prefix):
    """n batches of `per` samples each, nodes {prefix}0..3, distinct batch ids."""
    tmp = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"gpuscope-chb-{os.getpid()}")
    os.makedirs(tmp, exist_ok=True)
    t0 = now_ns() - 20 * MIN
    lines = []
    for b in range(n):
        lines.append(f"node {prefix}{b % 4}")
        for i in range(per):
            lines.append(f"sample {t0 + b * 10**9 + i * 10**5} cpu 1 pid={b % 7} "
                         f"main;work{i % 13};leaf{(i * 7 + b) % 29}")
        lines.append(f"write {tmp}/b{b}")
    encode("\n".join(lines) + "\n")
    out = []
    for b in range(n):
        with open(f"{tmp}/b{b}", "rb") as f:
            out.append(f.read())
        os.unlink(f"{tmp}/b{b}")
    os.rmdir(tmp)
    return out


def kill_one_front_end(cl, store_args):
    a = Server(store_args=store_args).start()
    b = Server(store_args=store_args).start()
    batches = make_batches(48, 3000, "kill-")
    acked, lock, killed = [], threading.Lock(), threading.Event()
    work = list(range(len(batches)))

    def client():
        while True:
            with lock:
                if not work:
                    return
                i = work.pop(0)
            # to A until it is gone, then to B; a batch without an answer is sent again
            for target in ([] if killed.is_set() else [a.url]) + [b.url] * 5:
                code, _ = post(target, batches[i])
                if code == 204:
                    with lock:
                        acked.append(i)
                    break
                time.sleep(0.2)

    threads = [threading.Thread(target=client) for _ in range(4)]
    for t in threads:
        t.start()
    wait_until(lambda: len(acked) >= 12, 60)
    a.proc.send_signal(signal.SIGKILL)	# mid-ingest: 4 clients have batches in flight
    killed.set()
    a.proc.wait()
    for t in threads:
        t.join()
    check(sorted(acked) == list(range(len(batches))), f"every batch acknowledged: {len(acked)}")
    sel = q('{node=~"kill-.*"}')
    rng = f"from={(now_ns() - 30 * MIN) / 1e9:.3f}&to={now_ns() / 1e9:.3f}"
    fg = b.get_json(f"/api/v1/flamegraph?{rng}&selector={sel}")
    check(fg["total"] == 48 * 3000, f"each batch stored once after kill -9: {fg['total']}")
    dups = b.metric("gpuscope_server_duplicate_batches_total")
    for raw in batches:
        code, body = post(b.url, raw)
        check(code == 204, f"second delivery: {code} {body}")
    check(b.metric("gpuscope_server_duplicate_batches_total") == dups + 48, "all duplicates")
    fg = b.get_json(f"/api/v1/flamegraph?{rng}&selector={sel}")
    check(fg["total"] == 48 * 3000, f"duplicates not stored: {fg['total']}")
    print(f"kill -9: 48 batches once each ({int(dups)} retries found their batch stored)")
    a.stop()
    b.stop()


def shard_outage(cl, store_args):
    a = Server(store_args=store_args).start()
    b = Server(store_args=store_args).start()
    work = start_workload(os.path.join(PROGS, "dutyburn"), "600", "30")  # killed at the end
    node = f"ch-agent-{os.getpid()}"
    spool = os.path.join(cl.root, "spool")
    agent = None
    try:
        agent = Agent(a.url, ["--modules", "cpu-sampler", "--pid", str(work.pid),
                              "--push-interval", "1s", "--retry-max", "2s", "--spool-dir", spool,
                              "--node", node], os.path.join(cl.root, "agent.log"))
        if not cpu_sampler_up(agent):
            raise AssertionError("the agent's CPU sampler is not up")
        check(wait_until(lambda: agent.metric("gpuscope_agent_batches_pushed_total") >= 2, 30),
              "pushing through front-end A")
        shard2 = cl.servers[1]
        shard2.stop(kill=True)
        code, body, _ = b.request(f"/api/v1/flamegraph?since=10m")
        msg = json.loads(body).get("error", "")
        check(code == 503 and f"127.0.0.1:{shard2.tcp}" in msg,
              f"query with a shard down: 503 naming it: {code} {msg}")
        check(wait_until(lambda: agent.metric("gpuscope_agent_spool_files") >= 2, 30),
              "the agent spools while a shard is down")
        code, body = post(b.url, make_batches(1, 10, "outage-")[0])
        check(code == 503 and b"shard" in body, f"ingest with a shard down: {code} {body}")
        shard2.start()
        check(wait_until(lambda: agent.metric("gpuscope_agent_spool_files", -1) == 0, 60),
              "spool drained once the shard is back")
        time.sleep(1.5)
        rc = agent.stop()
        s = agent.summary()
        agent = None
        check(rc == 0 and s and s["delivered"] == s["submitted"] and s["dropped"] == 0,
              f"agent delivered everything: rc {rc}, {s}")
        fg = b.get_json(f"/api/v1/flamegraph?since=10m&selector={q('{node=%s}' % json.dumps(node))}")
        check(fg["total"] == s["delivered"] and fg["total"] > 0,
              f"flame graph through front-end B holds every sample: {fg['total']} of "
              f"{s['delivered']}")
        print(f"shard outage: {s['delivered']} agent samples, all stored once")
    finally:
        if agent:
            agent.stop()
        work.kill()
        work.wait()
        a.stop()
        b.stop()


def retention(cl, store_args):
    now = now_ns()
    ages = {"old": now - 6 * DAY, "mid": now - 60 * 3600 * 10**9, "new": now - 2 * MIN}
    counts = {"old": 30, "mid": 40, "new": 50}
    lines = ["node ret"]
    for age, t in ages.items():
        for i in range(counts[age]):
            lines.append(f"sample {t + i * 10**6} cpu 1 age={age} main;{age}_fn")
        lines.append(f"metric temp age={age} {t} 1")
        lines.append(f"interval gpu_busy age={age},gpu=0 {t + 10**9} {t + 2 * 10**9} -")
        # GPU 5: observed idle over the samples (gpu_idle=5 below keeps them all)
        lines.append(f"interval gpu_observed age={age},gpu=5,source=nvml {t} {t + 10**9} -")
    # One front-end keeps 10 days and takes the data; one keeping 4 days drops what is older.
    keep = Server(store_args=store_args, args=["--retention", "10d"]).start()
    code, body = keep.ingest(encode("\n".join(lines) + "\n"))
    check(code == 204, f"ingest {code} {body}")
    keep.stop()
    # The cluster's retention is the first front-end's: one that disagrees is refused...
    refused(store_args + ["--retention", "4d", "--raw-retention", "1d"], "--retention 10d")
    # ...until the cluster's is changed (on every shard, as docs/clickhouse.md says).
    for srv in cl.servers:
        srv.query(f"INSERT INTO ret.meta_local VALUES ('retention_ns', {4 * DAY}),"
                  f" ('raw_retention_ns', {DAY})")
    s = Server(store_args=store_args, args=["--retention", "4d", "--raw-retention", "1d",
                                            "--retention-period", "300ms"]).start()
    try:
        part = 'gpuscope_server_retention_partitions_dropped_total{table="%s"}'
        check(wait_until(lambda: s.metric(part % "samples_rollup") >= 1, 30),
              "rollup partitions of 'old' dropped")
        check(wait_until(lambda: s.metric(part % "samples_raw") >= 2, 30),
              "raw partitions of 'old' and 'mid' dropped")
        # Partitions are counted as partitions of their own table, never as SQLite's rows.
        check(wait_until(lambda: s.metric(part % "points") >= 1 and
                         s.metric(part % "intervals") >= 1, 30),
              "point and interval partitions of 'old' dropped")
        check(s.metric('gpuscope_server_retention_deleted_total{table="chunks"}') == 0 and
              s.metric('gpuscope_server_retention_deleted_total{table="rollups"}') == 0,
              "no ClickHouse partition counted as SQLite rows")
        rng = f"from={(now - 7 * DAY) / 1e9:.3f}&to={now / 1e9:.3f}"
        for age, want in [("old", 0), ("mid", counts["mid"]), ("new", counts["new"])]:
            fg = s.get_json(f"/api/v1/flamegraph?{rng}&selector=" + q('{age="%s"}' % age))
            check(fg["total"] == want, f"{age}: {fg['total']} samples, want {want}")
            sr = s.get_json(f"/api/v1/series?name=temp&{rng}&selector=" + q('{age="%s"}' % age))
            npts = sum(len(x["points"]) for x in sr["series"])
            check(npts == (0 if age == "old" else 1), f"{age}: {npts} points")
            iv = s.get_json(f"/api/v1/intervals?kind=gpu_busy&{rng}&selector=" +
                            q('{age="%s"}' % age))
            check(len(iv["intervals"]) == (0 if age == "old" else 1), f"{age}: intervals {iv}")
        for age, want in [("mid", 0), ("new", counts["new"])]:
            fg = s.get_json(f"/api/v1/flamegraph?{rng}&gpu_idle=5&selector=" +
                            q('{age="%s"}' % age))
            check(fg["total"] == want, f"{age} raw samples: {fg['total']}, want {want}")
        days = set()
        for srv in cl.servers:
            days |= set(srv.query("SELECT DISTINCT partition FROM system.parts WHERE database ="
                                  " 'ret' AND active AND table = 'samples_rollup_local'").split())
        check(str(ages["old"] // DAY) not in days and str(ages["mid"] // DAY) in days,
              f"rollup day partitions left: {sorted(days)}")
        print("retention: old day partitions dropped, mid kept in rollups, new whole")
    finally:
        s.stop()


def silent_listener():
    """A socket that accepts connections (the kernel's backlog) and never answers."""
    import socket
    ls = socket.socket()
    ls.bind(("127.0.0.1", 0))
    ls.listen(64)
    return ls


def frozen_shard(cl, store_args):
    """Shard 2 frozen (SIGSTOP): ingest and queries answer 503 naming it within seconds,
    /metrics and /healthz never wait on it; start-up against a URL that never answers is
    bounded and SIGTERM stops it."""
    a = Server(store_args=store_args + ["--clickhouse-timeout", "3s"]).start()
    shard2 = cl.servers[1]
    names = (f"127.0.0.1:{shard2.tcp}", f"127.0.0.1:{shard2.http}")
    batches = make_batches(4, 10, "frozen-")
    try:
        check(all(post(a.url, b)[0] == 204 for b in batches[:2]), "ingest before the freeze")
        os.kill(shard2.proc.pid, signal.SIGSTOP)
        try:
            for b in batches[2:]:
                t = time.time()
                code, body = post(a.url, b)
                dt = time.time() - t
                check(code == 503 and any(n.encode() in body for n in names) and dt < 12,
                      f"ingest with a frozen shard: 503 naming it in < 12 s: {code} {body} "
                      f"{dt:.1f}s")
                check(b"http://" not in body and b"SELECT" not in body, f"no URL/SQL: {body}")
            t = time.time()
            code, body, _ = a.request("/api/v1/flamegraph?since=1h")
            dt = time.time() - t
            check(code == 503 and any(n.encode() in body for n in names) and dt < 12,
                  f"query with a frozen shard: 503 naming it in < 12 s: {code} {body} {dt:.1f}s")
            # scrapes in parallel never hold the server: each waits at most ~1 s per shard,
            # a shard that missed its deadline is skipped for 30 s
            t = time.time()
            th = [threading.Thread(target=a.request, args=("/metrics",)) for _ in range(12)]
            for x in th:
                x.start()
            for x in th:
                x.join()
            dt_m = time.time() - t
            t = time.time()
            code, _, _ = a.request("/healthz")
            dt_h = time.time() - t
            check(code == 200 and dt_h < 1 and dt_m < 8,
                  f"/healthz {code} in {dt_h:.2f}s, 12 scrapes in {dt_m:.1f}s")
            t = time.time()
            code, _, _ = a.request("/metrics")
            check(code == 200 and time.time() - t < 1, f"a later scrape skips the frozen shard")
        finally:
            os.kill(shard2.proc.pid, signal.SIGCONT)
        check(wait_until(lambda: post(a.url, batches[3])[0] == 204, 30),
              "ingest answers again once the shard thaws")
        print(f"frozen shard: 503 naming it in {dt:.1f}s, 12 scrapes {dt_m:.1f}s, "
              f"healthz {dt_h * 1000:.0f} ms")
    finally:
        a.stop()
    ls = silent_listener()
    try:
        silent = ["--store", "clickhouse", "--clickhouse-url",
                  f"http://127.0.0.1:{ls.getsockname()[1]}", "--clickhouse-timeout", "2s"]
        t = time.time()
        refused(silent, "127.0.0.1:%d" % ls.getsockname()[1])
        dt = time.time() - t
        check(dt < 10, f"start-up against a silent ClickHouse bounded: {dt:.1f}s")
        silent[-1] = "60s"
        p = subprocess.Popen([SERVER, "--listen", "127.0.0.1:0"] + silent,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        time.sleep(1)
        t = time.time()
        p.terminate()
        try:
            rc = p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
            rc = None
        check(rc is not None and time.time() - t < 3,
              f"SIGTERM during start-up stops it: rc {rc} in {time.time() - t:.1f}s")
        print(f"silent ClickHouse at start: refused in {dt:.1f}s, SIGTERM obeyed")
    finally:
        ls.close()


def card_batch(node, nstacks, nsets, tag):
    t0 = now_ns() - 5 * MIN
    lines = [f"node {node}"]
    for i in range(max(nstacks, nsets)):
        lines.append(f"sample {t0 + i * 10**6} cpu 1 pid={i % nsets} main;{tag}{i % nstacks}")
    return encode("\n".join(lines) + "\n")


def cardinality(cl, store_args):
    """--max-new-stacks-per-hour and --max-new-label-sets-per-hour per node: 429 past them."""
    a = Server(store_args=store_args + ["--max-new-stacks-per-hour", "50",
                                        "--max-new-label-sets-per-hour", "5"]).start()
    try:
        first = card_batch("card-1", 40, 3, "s")
        code, body = post(a.url, first)
        check(code == 204, f"40 new stacks, 3 label sets: {code} {body}")
        code, body = post(a.url, card_batch("card-1", 20, 3, "t"))
        check(code == 429 and b"max-new-stacks-per-hour" in body,
              f"20 more new stacks on the node (60 > 50): 429: {code} {body}")
        code, body = post(a.url, card_batch("card-2", 20, 3, "t"))
        check(code == 204, f"the same on another node: 204: {code} {body}")
        code, body = post(a.url, card_batch("card-1", 5, 6, "s"))
        check(code == 429 and b"max-new-label-sets-per-hour" in body,
              f"6 label sets, 3 new (6 > 5): 429: {code} {body}")
        code, body = post(a.url, card_batch("card-1", 40, 3, "s"))
        check(code == 204, f"nothing new: 204: {code} {body}")
        print("cardinality limits on ClickHouse: 429 per node past either limit")
    finally:
        a.stop()


def to_schema1(srv, db):
    """Rewrites one shard's tables of db as gpuscope schema 1 had them: one row per sample in
    samples_local, rollups in samples_1m/1h/1d_local, schema 1 in meta_local."""
    day = DAY
    srv.query(f"CREATE TABLE {db}.samples_local (day UInt32, node_id UInt64, batch UInt64,"
              " kind UInt8, labelset UInt64, t UInt64, stack UInt64, value Int64) ENGINE ="
              " MergeTree() PARTITION BY day ORDER BY (kind, labelset, t)")
    srv.query(f"INSERT INTO {db}.samples_local SELECT day, node_id, batch, kind, labelset,"
              " t0 + d, stack, value FROM (SELECT day, node_id, batch, kind, labelset, t0,"
              " arrayCumSum(arrayMap((h, l) -> bitShiftLeft(toUInt64(h), 16) + l, dt_hi, dt_lo))"
              " AS ds, stacks, if(empty(vals), arrayMap(x -> toInt64(1), stacks), vals) AS vs"
              f" FROM {db}.samples_raw_local) ARRAY JOIN ds AS d, stacks AS stack, vs AS value")
    for lv, name in enumerate(("samples_1m", "samples_1h", "samples_1d")):
        srv.query(f"CREATE TABLE {db}.{name}_local (day UInt32, kind UInt8, labelset UInt64,"
                  " bucket UInt64, stack UInt64, value Int64, n UInt64) ENGINE ="
                  " SummingMergeTree((value, n)) PARTITION BY day ORDER BY"
                  " (kind, labelset, bucket, stack)")
        srv.query(f"INSERT INTO {db}.{name}_local SELECT toUInt32(intDiv(bucket, {day})), kind,"
                  f" labelset, bucket, stack, value, 1 FROM {db}.samples_rollup_local ARRAY JOIN"
                  f" sMap.stack AS stack, sMap.value AS value WHERE level = {lv}")
    for t in ("samples_raw", "samples_rollup"):
        srv.query(f"DROP TABLE {db}.{t}_local")
        srv.query(f"DROP TABLE IF EXISTS {db}.{t}")
    srv.query(f"DROP TABLE {db}.meta_local")
    srv.query(f"CREATE TABLE {db}.meta_local (key String, value UInt64) ENGINE ="
              " ReplacingMergeTree() ORDER BY key")
    srv.query(f"INSERT INTO {db}.meta_local VALUES ('schema', 1)")


def migration(cl, store_args):
    """A database of schema 1 is migrated at start: the same answers before and after."""
    now = now_ns()
    a = Server(store_args=store_args).start()
    for n in range(3):	# one batch per node (both shards get some)
        lines = [f"node mig{n}"]
        t0 = now - 3 * 3600 * 10**9 - n * 10**9
        for i in range(400):
            lines.append(f"sample {t0 + i * 7 * 10**9 + i * 977} cpu {1 + i % 3} pid={i % 5}"
                         f" main;f{i % 11};g{(i * 3 + n) % 17}")
        code, body = a.ingest(encode("\n".join(lines) + "\n"))
        check(code == 204, f"ingest {code} {body}")
    qs = [f"from={(now - 4 * 3600 * 10**9) / 1e9:.3f}&to={now / 1e9:.3f}",
          f"from={(now - 3 * 3600 * 10**9 + 17 * 10**9) / 1e9:.3f}"
          f"&to={(now - 2 * 3600 * 10**9 - 3 * 10**9) / 1e9:.3f}&selector=" + q('{pid="2"}')]
    want = [a.get_json("/api/v1/flamegraph?" + x) for x in qs]
    a.stop()
    check(want[0]["total"] == sum(1 + i % 3 for i in range(400)) * 3, f"stored: {want[0]['total']}")
    for srv in cl.servers:
        to_schema1(srv, "mig")
    b = Server(store_args=store_args).start()
    try:
        got = [b.get_json("/api/v1/flamegraph?" + x) for x in qs]
        check(got == want, f"same answers after the migration: {got[0]['total']} vs "
              f"{want[0]['total']}, {got[1]['total']} vs {want[1]['total']}")
        for srv in cl.servers:
            v = srv.query("SELECT max(value) FROM mig.meta_local WHERE key = 'schema'").strip()
            left = srv.query("SELECT count() FROM system.tables WHERE database = 'mig' AND"
                             " name LIKE 'samples_1%'").strip()
            check(v == "2" and left == "0", f"schema {v}, old rollup tables left {left}")
        print(f"migration from schema 1: same answers ({want[0]['total']} samples)")
    finally:
        b.stop()


def main():
    t0 = time.time()
    cl = clickhouse.Cluster(2, password=PW).start()
    pwfile = os.path.join(cl.root, "password")
    with open(pwfile, "w") as f:
        f.write(PW + "\n")
    bad = os.path.join(cl.root, "bad-password")
    with open(bad, "w") as f:
        f.write("wrong\n")

    def args(db, pw=pwfile):
        # a short group-commit wait: these cases post one batch at a time
        return cl.server_args(db) + ["--clickhouse-password-file", pw,
                                     "--clickhouse-commit-delay", "200ms"]
    try:
        refused(["--store", "clickhouse", "--clickhouse-url",
                 f"http://127.0.0.1:{clickhouse.free_port()}"], "clickhouse")
        refused(args("gs", bad), "credentials")
        refused(args("gs")[:] + ["--clickhouse-cluster", "nosuch"], "nosuch")
        Server(store_args=args("future")).start().stop()
        cl.servers[0].query("INSERT INTO future.meta_local VALUES ('schema', 99)")
        refused(args("future"), "newer")
        print(f"start-up refusals: exit 2, one line ({time.time() - t0:.1f}s)")
        migration(cl, args("mig"))
        print(f"  ({time.time() - t0:.1f}s)")
        kill_one_front_end(cl, args("gs"))
        print(f"  ({time.time() - t0:.1f}s)")
        shard_outage(cl, args("gs"))
        print(f"  ({time.time() - t0:.1f}s)")
        frozen_shard(cl, args("gs"))
        print(f"  ({time.time() - t0:.1f}s)")
        cardinality(cl, args("card"))
        print(f"  ({time.time() - t0:.1f}s)")
        retention(cl, args("ret"))
        print(f"  ({time.time() - t0:.1f}s)")
    except Exception:
        for srv in cl.servers:
            print(srv.logtext()[-1500:], file=sys.stderr)
        raise
    finally:
        cl.cleanup()
    print("ok")


main()
