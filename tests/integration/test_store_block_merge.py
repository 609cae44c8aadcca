#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Dictionary blocks merged by the background recompression (docs/server.md "Storage"): 80
batches, each with 25 new processes (label sets), stacks and leaf names, 40 of them four days
old, stored at --recompress-level 0 (one block per batch and table, nothing merged) and opened
again with the default level: the first 64 blocks of the stack, label-set and string tables
become one block each, the last 16 wait for more; /metrics counts them; every answer is the
same byte for byte, also after a restart (the indexes loaded from merged blocks: a stack seen
before is not stored twice). Then a retention of one day: dictionary GC writes the merged
blocks again without the old entries, and the recent processes answer as before."""
import os
import sqlite3
import sys

from gpuscope_server import Server, check, encode, now_ns, run_test, skip_if_unbuilt, wait

skip_if_unbuilt()
DAY = 86400 * 10**9
MS = 10**6
NOW = now_ns() - 600 * 10**9
OLD = NOW - 4 * DAY
BATCHES, PROCS = 80, 25
TABLES = ("stackblocks", "lsblocks", "strblocks")


def batch(b, t0=None):
    if t0 is None:
        t0 = (OLD if b < BATCHES // 2 else NOW) + b * 1000 * MS
    lines = ["node merge-node"]
    for i in range(PROCS):
        pid = 1000 + b * PROCS + i
        for k in range(4):
            lines.append(f"sample {t0 + i * 10 * MS + k} cpu 1 pid={pid},comm=w{i % 5} "
                         f"main;loop_{i % 3};work_{b}_{i}")
        # an older batch's stack again (from the same time range): no new stack
        if b % (BATCHES // 2):
            lines.append(f"sample {t0 + i * 10 * MS + 5} cpu 1 pid={pid},comm=w{i % 5} "
                         f"main;loop_{i % 3};work_{b - 1}_{i}")
    return "\n".join(lines) + "\n"


def answers(s):
    out = []
    for lo, hi in ((OLD, OLD + 100 * 10**9), (NOW, NOW + 100 * 10**9)):
        rng = f"from={(lo - 10**9) / 1e9:.3f}&to={hi / 1e9:.3f}"
        for path in (f"/api/v1/flamegraph?{rng}", f"/api/v1/flamegraph?{rng}&group_by=pid",
                     f"/api/v1/label/pid/values?{rng}", f"/api/v1/top?{rng}"):
            code, body, _ = s.request(path, headers={"Accept-Encoding": "identity"})
            check(code == 200, f"{path}: {code} {body[:200]!r}")
            out.append(body)
    for sid in (1, 500, 1000, 2100):
        code, body, _ = s.request(f"/api/v1/stack/{sid}", headers={"Accept-Encoding": "identity"})
        check(code in (200, 404), f"stack {sid}: {code}")
        out.append(body)
    return out


def rows(data):
    db = sqlite3.connect(os.path.join(data, "gpuscope.db"))
    got = {t: db.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in TABLES}
    ranges = {t: db.execute(f"SELECT id, last FROM {t} ORDER BY id").fetchall() for t in TABLES}
    db.close()
    for t, r in ranges.items():
        check(all(r[i][1] < r[i + 1][0] for i in range(len(r) - 1)),
              f"{t}: blocks' id ranges ascend without overlap {r[:5]}")
    return got


def main():
    args = ["--retention", "5d", "--retention-period", "1s"]
    s = Server(args=["--recompress-level", "0"] + args).start()
    data = s.data
    try:
        for b in range(BATCHES):
            code, body = s.ingest(encode(batch(b)))
            check(code == 204, f"batch {b}: {code} {body}")
        check(wait(lambda: s.metric("gpuscope_server_rollup_lag_chunks") == 0),
              "rolled up")
        stacks = s.metric("gpuscope_server_stacks")
        check(stacks == BATCHES * PROCS, f"one stack per process: {stacks}")
        before = answers(s)
        s.stop()
        r0 = rows(data)
        check(all(v == BATCHES for v in r0.values()), f"a block per batch at level 0: {r0}")

        s.args = args	# the default level: recompression and merges
        s.start()
        check(wait(lambda: s.metric("gpuscope_server_store_recompress_lag_rows") == 0, 90),
              f"settled: lag {s.metric('gpuscope_server_store_recompress_lag_rows')}")
        merged = s.metric("gpuscope_server_store_blocks_merged_total")
        bin_ = s.metric('gpuscope_server_store_block_merge_bytes_total{when="before"}')
        bout = s.metric('gpuscope_server_store_block_merge_bytes_total{when="after"}')
        check(merged == 3 * 64 and 0 < bout < bin_, f"merged {merged} blocks, {bin_} -> {bout} B")
        after = answers(s)
        for a, b in zip(before, after):
            check(a == b, f"same answer after merging:\n{a[:300]!r}\n{b[:300]!r}")
        s.stop()
        r1 = rows(data)
        check(all(v == 1 + BATCHES - 64 for v in r1.values()),
              f"64 blocks merged into one, 16 waiting: {r1}")

        # the indexes come from the merged blocks: old stacks and label sets are found again
        s.start()
        check(answers(s) == before, "same answers after a restart")
        code, body = s.ingest(encode(batch(3, now_ns())))
        check(code == 204, f"an old batch's stacks again: {code} {body}")
        check(s.metric("gpuscope_server_stacks") == stacks and
              s.metric("gpuscope_server_label_sets") == BATCHES * PROCS,
              f"no stack or label set stored twice: {s.metric('gpuscope_server_stacks')}")
        s.stop()

        # retention of one day: the old half's entries leave the merged blocks
        s.args = ["--retention", "1d", "--retention-period", "1s"]
        s.start()
        # kept: the recent half's, and batch 3's stacks and batch 2's it reuses (stored today)
        ok = wait(lambda: s.metric("gpuscope_server_stacks") == BATCHES // 2 * PROCS + 2 * PROCS,
                  90)
        check(ok, f"old stacks gone: {s.metric('gpuscope_server_stacks')}")
        # (flame graphs and top: label values go by a label set's extent, which batch 3's
        # processes, stored again today, have widened)
        recent = answers(s)
        for i in (4, 5, 7):
            check(before[i] == recent[i], f"the recent processes answer as before:\n"
                  f"{before[i][:400]!r}\n{recent[i][:400]!r}")
        s.stop()
        rows(data)
        s.start()
        check(answers(s) == recent, "...and after a restart")
    except Exception:
        print(s.logtext(), file=sys.stderr)
        raise
    finally:
        s.stop()
    print("ok")


if __name__ == "__main__":
    run_test(main)
