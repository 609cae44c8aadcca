#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Stacks, locations and label sets live in blocks (a batch's new ones together): dictionary GC deletes the
stacks no retained record uses, writes a block that keeps some of its stacks again with those
only (so a deleted stack is unknown, 404, as before blocks), deletes a block with none left, and
the stacks and frames left answer as before. A batch's new stacks are numbered in the order its
sample chunks list them (by label set, then time), not the batch's own order."""
import os
import sqlite3
import sys
import threading

from gpuscope_server import Server, check, encode, find, now_ns, skip_if_unbuilt, wait

skip_if_unbuilt()
DAY = 86400 * 10**9


def main():
    now = now_ns()
    old = now - 4 * DAY
    s = Server(args=["--retention", "5d", "--retention-period", "1h"]).start()
    data = s.data
    try:
        # old batch: stacks 1 (main;gone) and 2 (main;kept); new batch: 2 again and 3 (main;fresh)
        code, body = s.ingest(encode(f"node n\nsample {old} cpu 1 pid=1 main;gone\n"
                                     f"sample {old + 1} cpu 1 pid=1 main;kept\n"))
        check(code == 204, f"old batch {code} {body}")
        code, body = s.ingest(encode(f"node n\nsample {now} cpu 1 pid=2 main;kept\n"
                                     f"sample {now + 1} cpu 1 pid=2 main;fresh\n"))
        check(code == 204, f"new batch {code} {body}")
        names = {i: [f["function"] for f in s.get_json(f"/api/v1/stack/{i}")["frames"]] for i in (1, 2, 3)}
        check(names == {1: ["gone", "main"], 2: ["kept", "main"], 3: ["fresh", "main"]}, f"stacks {names}")
        check(s.metric("gpuscope_server_stacks") == 3 and s.metric("gpuscope_server_locations") == 4,
              "3 stacks, 4 locations")
    finally:
        s.stop()
    s = Server(data=data, args=["--retention", "1d", "--retention-period", "300ms"]).start()
    try:
        check(wait(lambda: s.metric("gpuscope_server_stacks") == 2 and
                   s.metric("gpuscope_server_locations") == 3),
              f"GC: stacks {s.metric('gpuscope_server_stacks')}, locations {s.metric('gpuscope_server_locations')}")
        code, _, _ = s.request("/api/v1/stack/1")
        check(code == 404, f"a deleted stack is unknown: {code}")
        for i, want in ((2, ["kept", "main"]), (3, ["fresh", "main"])):
            got = [f["function"] for f in s.get_json(f"/api/v1/stack/{i}")["frames"]]
            check(got == want, f"stack {i}: {got}")
        fg = s.get_json(f"/api/v1/flamegraph?from={(now - 60 * 10**9) / 1e9:.3f}&to={(now + 60 * 10**9) / 1e9:.3f}")
        check(fg["total"] == 2, f"recent samples: {fg['total']}")
    except Exception:
        print(s.logtext(), file=sys.stderr)
        raise
    finally:
        s.stop()
    db = sqlite3.connect(os.path.join(data, "gpuscope.db"))
    blocks = db.execute("SELECT id, last FROM stackblocks ORDER BY id").fetchall()
    lblocks = db.execute("SELECT count(*) FROM locblocks").fetchone()[0]
    db.close()
    check(blocks == [(2, 2), (3, 3)], f"the old block written again with stack 2 only: {blocks}")
    # Locations have no table (schema 6): the index is loaded from the blocks, which GC wrote
    # again without 'gone'; a restart finds the 3 left, and 'gone' met again is new.
    s = Server(data=data, args=["--retention", "1d", "--retention-period", "1h"]).start()
    try:
        check(lblocks == 2 and s.metric("gpuscope_server_locations") == 3,
              f"after a restart: {s.metric('gpuscope_server_locations')} locations in {lblocks} blocks")
        code, body = s.ingest(encode(f"node n\nsample {now + 5} cpu 1 pid=2 main;gone\n"
                                     f"sample {now + 6} cpu 1 pid=2 main;kept\n"))
        check(code == 204, f"batch after GC {code} {body}")
        check(s.metric("gpuscope_server_locations") == 4 and s.metric("gpuscope_server_stacks") == 3,
              f"'gone' stored again: {s.metric('gpuscope_server_locations')} locations")
        fg = s.get_json(f"/api/v1/flamegraph?from={(now - 60 * 10**9) / 1e9:.3f}&to={(now + 60 * 10**9) / 1e9:.3f}")
        main_ = find(fg["root"], "main")
        check(main_ and find(main_, "gone")["value"] == 1 and find(main_, "kept")["value"] == 2,
              f"frames after GC and restart: {main_}")
    except Exception:
        print(s.logtext(), file=sys.stderr)
        raise
    finally:
        s.stop()
    same_new_label_set()
    gone_content_again()
    print("ok")


def same_new_label_set():
    """Label sets too live in blocks, found by content in memory once committed and in the rows
    of the open transaction before: batches stored together (group commit) that bring the same
    new label set store it once, and a restart finds it again."""
    s = Server().start()
    t = now_ns()
    N = 24
    try:
        body = [encode("node n1\n" + "".join(
            f"sample {t + i * 1000 + k} cpu 1 pid=42,tid=43,comm=twin,thread=twin main;leaf{k}\n"
            for k in range(1000))) for i in range(N)]
        results = []
        threads = [threading.Thread(target=lambda b=b: results.append(s.ingest(b)[0]))
                   for b in body]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        check(results == [204] * N, f"ingests {results}")
        check(s.metric("gpuscope_server_label_sets") == 1, f"one label set for {N} batches")
        # one batch, two label sets that are one in the store (its own node label is the
        # batch's): the second finds the first's row of the open transaction
        code, body = s.ingest(encode(
            f"node n1\nsample {t + 5} cpu 1 pid=50,comm=dup main;a\n"
            f"sample {t + 6} cpu 1 pid=50,comm=dup,node=elsewhere main;b\n"))
        check(code == 204, f"ingest {code} {body}")
        check(s.metric("gpuscope_server_label_sets") == 2, "the batch's two label sets stored once")
        s.stop()
        s.start()
        rng = f"from={(t - 10**9) / 1e9:.3f}&to={(t + 10**9) / 1e9:.3f}"
        fg = s.get_json(f"{'/api/v1/flamegraph'}?{rng}&selector=%7Bthread%3D%22twin%22%7D")
        check(fg["total"] == 1000 * N, f"its samples {fg['total']}")
        check(s.metric("gpuscope_server_label_sets") == 2, "after a restart, both")
    except Exception:
        print(s.logtext(), file=sys.stderr)
        raise
    finally:
        s.stop()


def gone_content_again():
    """The in-memory indexes of locations and stacks forget what GC deletes, in the same
    process: a stack GC deleted (top;mid) whose locations live on in another stack
    (top;mid;leaf), and a location GC deleted (gone2), met again, are stored again under new
    ids (an index still naming the old ids would map them to rows and blocks that are gone)."""
    now = now_ns()
    s = Server(args=["--retention", "5d", "--retention-period", "1h"]).start()
    data = s.data
    try:
        code, body = s.ingest(encode(f"node n\nsample {now - 4 * DAY} cpu 1 pid=1 top;mid\n"
                                     f"sample {now - 4 * DAY + 1} cpu 1 pid=1 top;gone2\n"))
        check(code == 204, f"old batch {code} {body}")
        code, body = s.ingest(encode(f"node n\nsample {now} cpu 1 pid=2 top;mid;leaf\n"))
        check(code == 204, f"new batch {code} {body}")
    finally:
        s.stop()
    s = Server(data=data, args=["--retention", "1d", "--retention-period", "300ms"]).start()
    try:
        check(wait(lambda: s.metric("gpuscope_server_stacks") == 1 and
                   s.metric("gpuscope_server_locations") == 3),
              f"GC: stacks {s.metric('gpuscope_server_stacks')}, locations {s.metric('gpuscope_server_locations')}")
        code, body = s.ingest(encode(f"node n\nsample {now + 1} cpu 1 pid=2 top;mid\n"
                                     f"sample {now + 2} cpu 1 pid=2 top;gone2\n"))
        check(code == 204, f"batch after GC {code} {body}")
        check(s.metric("gpuscope_server_stacks") == 3 and s.metric("gpuscope_server_locations") == 4,
              f"stored again: stacks {s.metric('gpuscope_server_stacks')}, "
              f"locations {s.metric('gpuscope_server_locations')}")
        for i in (1, 2):
            code, _, _ = s.request(f"/api/v1/stack/{i}")
            check(code == 404, f"deleted stack {i} stays unknown: {code}")
        for i, want in ((4, ["mid", "top"]), (5, ["gone2", "top"])):
            got = [f["function"] for f in s.get_json(f"/api/v1/stack/{i}")["frames"]]
            check(got == want, f"new stack {i}: {got}")
    except Exception:
        print(s.logtext(), file=sys.stderr)
        raise
    finally:
        s.stop()


def stack_order():
    """Schema 14: a batch's new stacks get their ids as its samples use them, label set by label
    set and in time order (a chunk codes a new stack as +1 on the literal before it), then the
    ones no sample uses; the batch's stack table lists them in another order here."""
    t = now_ns() - 60 * 10**9
    s = Server().start()
    try:
        # the table's order (first seen in the text): late, early, b_only, then the interval's
        code, body = s.ingest(encode(f"node n\nsample {t + 3000} cpu 1 pid=5,tid=5 main;late\n"
                                     f"sample {t + 1000} cpu 1 pid=5,tid=5 main;early\n"
                                     f"sample {t + 2000} cpu 1 pid=5,tid=6 main;b_only\n"
                                     f"sample {t + 500} cpu 1 pid=5,tid=6 main;early\n"))
        check(code == 204, f"ingest {code} {body}")
        got = [s.get_json(f"/api/v1/stack/{i}")["frames"][0]["function"] for i in (1, 2, 3)]
        check(got == ["early", "late", "b_only"], f"ids in the chunks' order: {got}")
    finally:
        s.stop()
    print("PASS a batch's new stacks numbered as its chunks list them")


main()
stack_order()
