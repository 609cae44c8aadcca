#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Background recompression (docs/server.md "Storage"): a store written with --recompress-level 0
(blobs at ingest's fast zstd level) and opened again with the default (19) has its settled
sample chunks, interval chunks, point chunks and dictionary blocks compressed again in the
background: /metrics counts it to a lag of 0 rows, the tables' blobs take fewer bytes, every
watermark reaches its table's last id, and every answer is the same byte for byte."""
import os
import random
import sqlite3

from gpuscope_server import Server, check, encode, now_ns, running, skip_if_unbuilt, wait

skip_if_unbuilt()
TABLES = ("chunks", "ivchunks", "points", "locblocks", "stackblocks", "lsblocks", "strblocks")


def answers(s, t0, t1):
    rng = f"from={t0 / 1e9:.3f}&to={t1 / 1e9:.3f}"
    out = []
    for path in (f"/api/v1/flamegraph?{rng}", f"/api/v1/flamegraph?{rng}&group_by=pid",
                 f"/api/v1/intervals?{rng}", f"/api/v1/series?name=temp&{rng}",
                 f"/api/v1/label/pid/values?{rng}", "/api/v1/stack/1", "/api/v1/stack/40"):
        code, body, _ = s.request(path, headers={"Accept-Encoding": "identity"})
        check(code == 200, f"{path}: {code} {body[:200]!r}")
        out.append(body)
    return out


def sizes(db):
    r = sqlite3.connect(db)
    got = {t: r.execute(f"SELECT coalesce(sum(length(data)), 0), count(*) FROM {t}").fetchone()
           for t in TABLES}
    wm = dict(r.execute("SELECT key, value FROM meta WHERE key LIKE 'rz_%'").fetchall())
    last = {t: r.execute(f"SELECT coalesce(max(id), 0) FROM {t}").fetchone()[0] for t in TABLES}
    r.close()
    return got, wm, last


def main():
    rnd = random.Random(7)
    t = now_ns() - 120 * 10**9
    fns = [f"fn_{rnd.getrandbits(40):x}_{i}" for i in range(400)]
    stacks = [";".join(rnd.choice(fns) for _ in range(rnd.randint(3, 12))) for _ in range(600)]
    s = Server(args=["--recompress-level", "0"])
    db = os.path.join(s.data, "gpuscope.db")
    with running(s):
        for b in range(3):
            lines = ["node n"]
            for i in range(6000):
                ts = t + b * 10**9 + i * 10**5 + rnd.randint(0, 50000)
                stack = stacks[min(int(rnd.expovariate(0.02)), len(stacks) - 1)]
                lines.append(f"sample {ts} cpu 1 pid={100 + i % 40} {stack}")
            for i in range(1500):
                ts = t + b * 10**9 + i * 4 * 10**5
                lines.append(f"interval thread_state pid={100 + i % 40},tid={i % 97} {ts} "
                             f"{ts + rnd.randint(1000, 300000)} -")
            for i in range(200):
                lines.append(f"metric temp gpu=0 {t + b * 10**9 + i * 10**6} {rnd.random() * 80:.3f}")
            code, body = s.ingest(encode("\n".join(lines) + "\n"))
            check(code == 204, f"batch {b}: {code} {body}")
        check(wait(lambda: s.metric("gpuscope_server_rollup_lag_chunks") == 0), "rolled up")
        check(s.metric("gpuscope_server_store_recompress_lag_rows") == 0, "level 0: nothing waits")
        before = answers(s, t - 10**9, t + 5 * 10**9)
        s.stop()
        size0, wm0, last = sizes(db)
        check(all(v == 0 for v in wm0.values()) and len(wm0) == len(TABLES), f"watermarks {wm0}")
        s.args = []	# the default level
        s.start()
        check(wait(lambda: s.metric("gpuscope_server_store_recompress_lag_rows") == 0),
              f"recompressed: lag {s.metric('gpuscope_server_store_recompress_lag_rows')}")
        after = answers(s, t - 10**9, t + 5 * 10**9)
        for a, b in zip(before, after):
            check(a == b, f"same answer after recompression:\n{a[:300]!r}\n{b[:300]!r}")
        bin_ = s.metric('gpuscope_server_store_recompress_bytes_total{when="before"}')
        bout = s.metric('gpuscope_server_store_recompress_bytes_total{when="after"}')
        cpu = s.metric("gpuscope_server_store_recompress_cpu_seconds_total")
        check(bin_ == sum(v[0] for v in size0.values()) and 0 < bout < bin_ and cpu > 0,
              f"metrics: {bin_} -> {bout} bytes, {cpu} s; tables {size0}")
        s.stop()
        size1, wm1, last1 = sizes(db)
        check(last1 == last and all(wm1["rz_" + t_] == last[t_] for t_ in TABLES),
              f"watermarks at each table's last id: {wm1} {last}")
        # (location blocks of format 3, a few hundred bytes each here, may already be as short
        # at level 3 as at 19: not longer)
        for t_ in ("chunks", "ivchunks", "locblocks", "stackblocks"):
            check((size1[t_][0] < size0[t_][0] or (t_ == "locblocks" and
                                                   size1[t_][0] == size0[t_][0]))
                  and size1[t_][1] == size0[t_][1], f"{t_}: {size0[t_]} -> {size1[t_]} (bytes, rows)")
        check(sum(v[0] for v in size1.values()) == bout, f"bytes after = the tables' {size1}")
        s.start()
        check(answers(s, t - 10**9, t + 5 * 10**9) == before, "same answers after a restart")
    print("ok")


main()
