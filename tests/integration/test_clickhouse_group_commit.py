#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Group commit of the ClickHouse store on a real two-shard cluster (Distributed tables): batches
posted at once by many clients share INSERTs, and
- one node sending batch after batch waits for nobody (no --clickhouse-commit-delay);
- every batch is answered 204 only once it is stored: the moment its answer arrives, its raw
  rows and its rollup marker are in ClickHouse;
- one batch id twice in one group is stored once (the second answers as a duplicate);
- a joint INSERT that fails before anything of the facts is stored (a dictionary INSERT
  refused) fails every batch in it, and nothing of them is stored; sent again, each is stored
  once;
- a joint INSERT that ClickHouse stores but answers with an error (a view on the rollup table
  that throws after the part is written: an answer lost) fails every batch in it too; sent
  again, each is found stored (a duplicate), none is stored twice."""
import os
import sys
import threading
import time
import urllib.parse

import clickhouse
from gpuscope_server import Server, check, encode, now_ns, skip_if_unbuilt

skip_if_unbuilt()
if not clickhouse.available():
    raise AssertionError("clickhouse-server missing: scripts/install-deps installs it")
q = urllib.parse.quote
MIN = 60 * 10**9
PER = 500	# samples per batch


def batch_id(raw):
    """Batch.batch_id (field 4, varint) of an uncompressed protobuf batch."""
    def varint(p):
        v = shift = 0
        while True:
            b = raw[p]
            v |= (b & 0x7f) << shift
            p += 1
            if b < 0x80:
                return v, p
            shift += 7
    p = 0
    while p < len(raw):
        key, p = varint(p)
        field, wt = key >> 3, key & 7
        if wt == 0:
            v, p = varint(p)
            if field == 4:
                return v
        elif wt == 2:
            n, p = varint(p)
            p += n
        elif wt == 1:
            p += 8
        elif wt == 5:
            p += 4
        else:
            raise ValueError(f"wire type {wt}")
    raise ValueError("no batch_id")


def make_batches(n, prefix, t0):
    """n batches of PER samples, each its own node (both shards get some)."""
    out = []
    for b in range(n):
        lines = [f"node {prefix}{b}"]
        for i in range(PER):
            lines.append(f"sample {t0 + b * 10**9 + i * 10**6} cpu 1 pid={b % 3} "
                         f"main;work{i % 7};leaf{(i * 3 + b) % 11}")
        out.append(encode("\n".join(lines) + "\n"))
    return out


def post_all(srv, batches, on_answer=None):
    """Posts every batch at once, one thread each; returns the HTTP codes in order."""
    codes = [None] * len(batches)
    go = threading.Barrier(len(batches))

    def one(i):
        go.wait()
        code, body = srv.ingest(batches[i])
        codes[i] = (code, body)
        if on_answer:
            on_answer(i, code)
    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(batches))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return codes


def failed_group(cl, srv, db, prefix, t0, table, cond, after_failure=None):
    """6 batches posted at once while a view on every shard's `table` throws (cond) on insert:
    each must fail; after_failure() checks the store then; with the view gone, sent again, each
    must be answered 204. Returns the batches."""
    batches = make_batches(6, prefix, t0)
    for s in cl.servers:
        s.query(f"CREATE MATERIALIZED VIEW {db}.fail_view ENGINE = Null AS SELECT"
                f" throwIf({cond}) AS x FROM {db}.{table}")
    codes = post_all(srv, batches)
    check(all(c >= 500 for c, _ in codes), f"every batch of the failed INSERT fails: {codes}")
    if after_failure:
        after_failure(batches)
    for s in cl.servers:
        s.query(f"DROP TABLE {db}.fail_view")
    codes = post_all(srv, batches)
    check(all(c == 204 for c, _ in codes), f"sent again: 204 each: {codes}")
    return batches


def stored(ch, db, bid):
    """(raw rows, rollup marker count) of batch bid, through the Distributed tables."""
    raw = int(ch.query(f"SELECT count() FROM {db}.samples_raw WHERE batch = {bid}"))
    mark = int(ch.query(f"SELECT sum(n) FROM {db}.samples_rollup WHERE level = 255 AND"
                        f" labelset = {bid}") or 0)
    return raw, mark


def total(srv, prefix, t0, raw=False):
    """Samples of the prefix's nodes: over whole minutes (rollups) or an unaligned range (raw)."""
    sel = q('{node=~"%s.*"}' % prefix)
    if raw:
        rng = f"from={(t0 - 5 * 10**8) / 1e9:.3f}&to={(t0 + 30 * 10**9) / 1e9:.3f}"
    else:
        rng = f"from={(t0 // MIN - 1) * 60}&to={(t0 // MIN + 2) * 60}"
    return srv.get_json(f"/api/v1/flamegraph?{rng}&selector={sel}")["total"]


def main():
    cl = clickhouse.Cluster(2).start()
    ch = cl.servers[0]
    db = "gc"
    t0 = (now_ns() - 20 * MIN) // MIN * MIN + 10**9
    # 0. One node sending batch after batch (an agent draining its spool) waits for nobody.
    one = Server(store_args=cl.server_args(db), args=["--clickhouse-commit-delay", "5s"]).start()
    try:
        for i in range(3):
            t = time.time()
            code, body = one.ingest(encode(f"node gc-one\nsample {t0 + i} cpu 1 - main\n"))
            check(code == 204 and time.time() - t < 5, f"one node alone: answered in "
                  f"{time.time() - t:.1f} s (a wait for others would take 5 s): {code} {body}")
    finally:
        one.stop()
    print("one node's batches one after another: no group-commit wait")
    srv = Server(store_args=cl.server_args(db), args=["--clickhouse-commit-delay", "1s"]).start()
    try:
        # 1. Answered only once stored, and grouped.
        batches = make_batches(12, "gca", t0)
        ids = [batch_id(b) for b in batches]
        seen_at_answer = {}

        def on_answer(i, code):
            if code == 204:
                seen_at_answer[i] = stored(ch, db, ids[i])
        c0 = srv.metric("gpuscope_server_store_commits_total")
        codes = post_all(srv, batches, on_answer)
        commits = srv.metric("gpuscope_server_store_commits_total") - c0
        check(all(c == 204 for c, _ in codes), f"every batch 204: {codes}")
        check(all(seen_at_answer[i][0] > 0 and seen_at_answer[i][1] == 1 for i in range(12)),
              f"raw rows and rollup marker there when the 204 came: {seen_at_answer}")
        check(commits <= 6, f"12 batches posted at once shared commits: {commits:.0f} commits")
        check(total(srv, "gca", t0) == 12 * PER and total(srv, "gca", t0, raw=True) ==
              12 * PER, "every sample once")
        print(f"12 batches at once: {commits:.0f} commits, each answered after it was stored")

        # 2. One batch id twice in one group.
        two = make_batches(2, "gcb", t0)
        d0 = srv.metric("gpuscope_server_duplicate_batches_total")
        codes = post_all(srv, [two[0], two[0], two[1]])
        check(all(c == 204 for c, _ in codes), f"every post 204: {codes}")
        check(srv.metric("gpuscope_server_duplicate_batches_total") == d0 + 1, "one duplicate")
        check(stored(ch, db, batch_id(two[0]))[1] == 1 and total(srv, "gcb", t0) == 2 * PER,
              "the twice-posted batch stored once")
        print("one id twice in a group: stored once, answered as a duplicate")

        # 2a. A batch id reused with other content: refused as a duplicate (the first content
        # stays, raw rows and rollups alike, as on SQLite).
        first = make_batches(1, "gcr", t0)[0]
        other = encode("node gcr0\n" + "".join(f"sample {t0 + 2 * 10**9 + i * 10**6} cpu 1 pid=9 "
                                                  f"main;other{i}\n" for i in range(7)))
        bid = batch_id(first)
        v = bid
        tail = b"\x20"	# field 4 (batch_id) again: the last one wins
        while True:
            tail += bytes([(v & 0x7f) | (0x80 if v > 0x7f else 0)])
            v >>= 7
            if not v:
                break
        other += tail
        d0 = srv.metric("gpuscope_server_duplicate_batches_total")
        check(post_all(srv, [first])[0][0] == 204, "the first content stored")
        code, body = post_all(srv, [other])[0]
        raw, mark = stored(ch, db, bid)
        check(code == 204 and srv.metric("gpuscope_server_duplicate_batches_total") == d0 + 1,
              f"the reused id answered as a duplicate: {code} {body}")
        check(total(srv, "gcr", t0, raw=True) == PER and total(srv, "gcr", t0) == PER
              and mark == 1, f"raw and rollups hold the first content only: raw "
              f"{total(srv, 'gcr', t0, raw=True)}, minute {total(srv, 'gcr', t0)}, marker {mark}")
        print("a batch id reused with other content: a duplicate, first content kept")

        # 2b. Hostile content stays in its own batch: five batches each with one interval kind
        # of 65 000 bytes (quoted in the duplicate probe) beside six honest ones, all at once.
        honest = make_batches(6, "gch", t0)
        hostile = [encode(f"node gchx{b}\ninterval {'k' * 65000} - {t0} {t0 + 10**9} -\n")
                   for b in range(5)]
        codes = post_all(srv, hostile + honest)
        check(all(c == 204 for c, _ in codes[5:]) and all(c in (204, 400) for c, _ in codes[:5]),
              f"honest batches 204 beside hostile ones, hostile 204 or 400: {codes}")
        check(not any(b"SELECT" in b or b"http://" in b or b"Syntax" in b for _, b in codes),
              f"no SQL or internal URL in an answer: {codes}")
        check(total(srv, "gch", t0) == 6 * PER, "the honest batches stored")
        print(f"hostile interval kinds beside honest batches: {[c for c, _ in codes]}")

        # 3. A joint INSERT refused before any fact is stored: every batch fails, none stored.
        def nothing_stored(batches):
            check(total(srv, "gcc", t0) == 0 and all(stored(ch, db, batch_id(b)) == (0, 0)
                                                     for b in batches), "nothing stored")
        failed_group(cl, srv, db, "gcc", t0, "labelsets_local", "id > 0", nothing_stored)
        check(total(srv, "gcc", t0) == 6 * PER and total(srv, "gcc", t0, raw=True) == 6 * PER,
              "each stored once")
        print("a refused joint INSERT: every batch failed, none stored; sent again, once each")

        # 4. A joint INSERT stored but answered with an error: every batch fails; sent again,
        # each is found stored.
        d0 = srv.metric("gpuscope_server_duplicate_batches_total")
        batches = failed_group(cl, srv, db, "gcd", t0, "samples_rollup_local", "n > 0")
        check(srv.metric("gpuscope_server_duplicate_batches_total") == d0 + 6,
              "each found stored by its retry")
        marks = [stored(ch, db, batch_id(b))[1] for b in batches]
        check(marks == [1] * 6, f"rollup markers once each: {marks}")
        check(total(srv, "gcd", t0) == 6 * PER and total(srv, "gcd", t0, raw=True) == 6 * PER,
              f"each stored once: {total(srv, 'gcd', t0)}")
        print("a joint INSERT stored but answered with an error: retries found it, none twice")
    except Exception:
        print(srv.logtext()[-2000:], file=sys.stderr)
        for s in cl.servers:
            print(s.logtext()[-1500:], file=sys.stderr)
        raise
    finally:
        srv.stop()
        cl.cleanup()
    print("ok")


main()
