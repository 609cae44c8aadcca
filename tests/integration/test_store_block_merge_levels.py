#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Dictionary blocks merged at two levels (docs/server.md "Block merges"): 60 batches of 300 new
deep stacks each (about 110 KB of stack entries a batch), stored at --recompress-level 0 and
opened again with the default level: a batch's blocks are merged into blocks of at least
1 MiB of entries (level 1), and those again into blocks of at least 4 MiB (level 2,
`meta.mz2_stackblocks`); the stack table ends as fewer blocks, fewer bytes than level 1 alone
left, the recompression lag at 0, and every answer the same byte for byte, also after a
restart."""
import os
import random
import sqlite3
import sys

from gpuscope_server import Server, check, encode, now_ns, run_test, skip_if_unbuilt, wait

skip_if_unbuilt()
MS = 10**6
NOW = now_ns() - 600 * 10**9
BATCHES, STACKS, DEPTH = 60, 300, 120
rnd = random.Random(7)
POOL = [f"fn_{i:05d}" for i in range(20000)]


def batch(b):
    lines = ["node levels-node"]
    t0 = NOW + b * 1000 * MS
    for i in range(STACKS):
        frames = ["main"] + [POOL[rnd.randrange(len(POOL))] for _ in range(DEPTH)]
        lines.append(f"sample {t0 + i * MS} cpu 1 pid={100 + b},comm=deep {';'.join(frames)}")
    return "\n".join(lines) + "\n"


def answers(s):
    rng = f"from={(NOW - 10**9) / 1e9:.3f}&to={(NOW + (BATCHES + 1) * 10**9) / 1e9:.3f}"
    out = []
    for path in (f"/api/v1/flamegraph?{rng}", f"/api/v1/top?{rng}&limit=50"):
        code, body, _ = s.request(path, headers={"Accept-Encoding": "identity"})
        check(code == 200, f"{path}: {code} {body[:200]!r}")
        out.append(body)
    for sid in (1, 2000, 5000, 9000, BATCHES * STACKS):
        code, body, _ = s.request(f"/api/v1/stack/{sid}", headers={"Accept-Encoding": "identity"})
        check(code == 200, f"stack {sid}: {code}")
        out.append(body)
    return out


def table(data):
    db = sqlite3.connect(os.path.join(data, "gpuscope.db"))
    n, size = db.execute("SELECT count(*), sum(length(data)) FROM stackblocks").fetchone()
    meta = dict(db.execute("SELECT key, value FROM meta WHERE key LIKE 'mz%stackblocks'"))
    r = db.execute("SELECT id, last FROM stackblocks ORDER BY id").fetchall()
    db.close()
    check(all(r[i][1] < r[i + 1][0] for i in range(len(r) - 1)),
          f"blocks' id ranges ascend without overlap {r[:5]}")
    return n, size, meta


S = Server(args=["--recompress-level", "0"])


def run():
    s = S.start()
    data = s.data
    for b in range(BATCHES):
        code, body = s.ingest(encode(batch(b)))
        check(code == 204, f"batch {b}: {code} {body}")
    check(wait(lambda: s.metric("gpuscope_server_rollup_lag_chunks") == 0), "rolled up")
    check(s.metric("gpuscope_server_stacks") == BATCHES * STACKS, "every stack new")
    before = answers(s)
    s.stop()
    n0, size0, _ = table(data)
    check(n0 == BATCHES, f"a block per batch at level 0: {n0}")

    s.args = []
    s.start()
    check(wait(lambda: s.metric("gpuscope_server_store_recompress_lag_rows") == 0, 240),
          f"settled: lag {s.metric('gpuscope_server_store_recompress_lag_rows')}")
    after = answers(s)
    for a, b in zip(before, after):
        check(a == b, f"same answer after merging:\n{a[:300]!r}\n{b[:300]!r}")
    s.stop()
    n1, size1, meta = table(data)
    print(f"stack blocks: {n0} blocks, {size0} B at level 0 -> {n1} blocks, {size1} B; {meta}")
    check(meta.get("mz2_stackblocks", 0) > 0, f"a level-2 merge happened: {meta}")
    check(n1 < n0 // 3 and size1 < size0, f"fewer blocks, fewer bytes: {n1}, {size0} -> {size1}")
    s.start()
    check(answers(s) == before, "same answers after a restart")
    code, body = s.ingest(encode(batch(0)))	# new stacks again: numbered after the last
    check(code == 204 and s.metric("gpuscope_server_stacks") == (BATCHES + 1) * STACKS,
          f"a batch after the merges: {code} {s.metric('gpuscope_server_stacks')}")
    print("ok")


if __name__ == "__main__":
    run_test(run, S)
