#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""A store of schema 1 (locations with their names inline, stacks as plain varint location ids,
one row per interval; written here with schema 1's own DDL) is migrated in place at open: the
same stacks, intervals (order, ties of start in arrival order, attrs) and label sets come back,
new data goes on after it, and a store from a newer schema is refused with a clear message."""
import os
import urllib.parse

from gpuscope_server import (check, check_migrated, encode, migrated_db, now_ns, old_store,
                             pairs_blob, running, skip_if_unbuilt, uvarint)

from gpuscope_server import STORE_SCHEMA

skip_if_unbuilt()
q = urllib.parse.quote

V1 = """
CREATE TABLE meta(key TEXT PRIMARY KEY, value INTEGER);
INSERT INTO meta VALUES ('schema', 1), ('rollup_wm', 0);
CREATE TABLE batches(id INTEGER PRIMARY KEY, node TEXT, t INTEGER);
CREATE INDEX batches_t ON batches(t);
CREATE TABLE nodes(node TEXT PRIMARY KEY, first_ns INTEGER, last_ns INTEGER);
CREATE TABLE labelsets(id INTEGER PRIMARY KEY, hash INTEGER UNIQUE NOT NULL,
 labels BLOB NOT NULL, first_ns INTEGER, last_ns INTEGER);
CREATE TABLE locations(id INTEGER PRIMARY KEY, hash INTEGER UNIQUE NOT NULL,
 function TEXT, module TEXT, build_id TEXT, file TEXT, line INTEGER, address INTEGER, flags INTEGER);
CREATE TABLE stacks(id INTEGER PRIMARY KEY, hash INTEGER UNIQUE NOT NULL,
 locs BLOB NOT NULL, day INTEGER NOT NULL DEFAULT 0);
CREATE TABLE chunks(id INTEGER PRIMARY KEY, labelset INTEGER, kind INTEGER,
 t_min INTEGER, t_max INTEGER, n INTEGER, data BLOB);
CREATE INDEX chunks_kt ON chunks(kind, t_min);
CREATE TABLE rollups(level INTEGER, kind INTEGER, bucket INTEGER,
 labelset INTEGER, data BLOB, PRIMARY KEY(level, kind, bucket, labelset)) WITHOUT ROWID;
CREATE TABLE series(id INTEGER PRIMARY KEY, hash INTEGER UNIQUE NOT NULL, name TEXT, labelset INTEGER);
CREATE INDEX series_name ON series(name);
CREATE TABLE points(id INTEGER PRIMARY KEY, series INTEGER, t_min INTEGER,
 t_max INTEGER, n INTEGER, data BLOB);
CREATE INDEX points_st ON points(series, t_min);
CREATE INDEX points_t ON points(t_max);
CREATE TABLE intervals(id INTEGER PRIMARY KEY, kind TEXT, labelset INTEGER,
 start_ns INTEGER, end_ns INTEGER, attrs BLOB);
CREATE INDEX intervals_ke ON intervals(kind, end_ns);
CREATE INDEX intervals_e ON intervals(end_ns);
CREATE INDEX intervals_klen ON intervals(kind, (end_ns - start_ns));
"""


def uvarints(vals):
    return b"".join(uvarint(v) for v in vals)


def main():
    now = now_ns()
    # whole µs: the new server floors the new interval's start to µs (--time-resolution us),
    # and its tie with the migrated ones (kept at ns) is then still a tie
    t = (now - 120 * 10**9) // 1000 * 1000
    s, db = old_store(V1)
    lsets = {1: [("comm", "app"), ("node", "n1"), ("pid", "7"), ("tid", "7")],
             2: [("comm", "app"), ("node", "n1"), ("pid", "7"), ("tid", "8")]}
    for i, pairs in lsets.items():
        db.execute("INSERT INTO labelsets VALUES (?, ?, ?, ?, ?)", (i, 1000 + i, pairs_blob(pairs), t, t + 10**9))
    locs = [(1, "main", "/usr/bin/app", "ab" * 20, "app.c", 10, 0x1130, 0),
            (2, "work", "/usr/bin/app", "ab" * 20, "", 0, 0x1200, 0),
            (3, "schedule", "[kernel]", "", "", 0, 0xffffffff81000000, 1)]
    for lid, fn, mod, bid, f, line, addr, flags in locs:
        db.execute("INSERT INTO locations VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                   (lid, 5000 + lid, fn, mod, bid, f, line, addr - (1 << 64) if addr >= 1 << 63 else addr, flags))
    day = now // (86400 * 10**9)  # the last day a batch used the stack (dictionary GC)
    db.execute("INSERT INTO stacks VALUES (1, 9001, ?, ?)", (uvarints([3, 2, 1]), day))
    db.execute("INSERT INTO stacks VALUES (2, 9002, ?, ?)", (uvarints([2, 1]), day))
    # ids give the arrival order: rows 2 and 3 start together, answered 2 then 3
    ivs = [(1, "thread_state", 1, t, t + 5 * 10**6, [("state", "running"), ("cpu", "1")]),
           (2, "thread_state", 2, t + 10**6, t + 2 * 10**6, [("state", "blocked"), ("reason", "futex"), ("stack_id", "1")]),
           (3, "thread_state", 1, t + 10**6, t + 3 * 10**6, [("state", "runnable")]),
           (4, "gpu_busy", 1, t, t + 10**9, [])]
    for iid, kind, ls, a, b, attrs in ivs:
        db.execute("INSERT INTO intervals VALUES (?, ?, ?, ?, ?, ?)", (iid, kind, ls, a, b, pairs_blob(attrs)))
    db.execute("INSERT INTO nodes VALUES ('n1', ?, ?)", (t, t + 10**9))
    db.commit()
    db.close()
    with running(s):
        check_migrated(s, 1)
        st = s.get_json("/api/v1/stack/1")["frames"]
        check([f["function"] for f in st] == ["schedule", "work", "main"], f"stack 1 {st}")
        check(st[2]["module"] == "/usr/bin/app" and st[2]["file"] == "app.c" and st[2]["line"] == 10
              and st[2]["address"] == "0x1130" and st[0]["kernel"] is True and "file" not in st[1],
              f"frames {st}")
        rng = f"from={(t - 10**9) / 1e9:.3f}&to={(t + 2 * 10**9) / 1e9:.3f}"
        iv = s.get_json(f"/api/v1/intervals?kind=thread_state&{rng}")["intervals"]
        got = [(x["labels"]["tid"], x["attrs"].get("state"), x["attrs"].get("stack_id")) for x in iv]
        check(got == [("7", "running", None), ("8", "blocked", "1"), ("7", "runnable", None)],
              f"intervals in (start, arrival) order: {got}")
        check(iv[1]["attrs"] == {"state": "blocked", "reason": "futex", "stack_id": "1"}, f"attrs {iv[1]}")
        allk = s.get_json(f"/api/v1/intervals?{rng}")["intervals"]
        check([x["kind"] for x in allk] == ["thread_state", "gpu_busy", "thread_state", "thread_state"],
              f"every kind, by start then arrival: {[x['kind'] for x in allk]}")
        sel = s.get_json(f"/api/v1/intervals?kind=thread_state&{rng}&selector=" + q('{tid="8"}'))
        check(len(sel["intervals"]) == 1, f"selector {sel}")
        # new data after the old: its intervals come after in arrival order, locations shared
        code, body = s.ingest(encode(f"node n1\ninterval thread_state pid=7,tid=7,comm=app "
                                     f"{t + 10**6} {t + 4 * 10**6} state=running\n"
                                     f"sample {t + 5} cpu 1 pid=7,comm=app main;work\n"))
        check(code == 204, f"ingest {code} {body}")
        iv = s.get_json(f"/api/v1/intervals?kind=thread_state&{rng}")["intervals"]
        ends = [round(x["end_ms"] - t / 1e6) for x in iv]
        check(ends == [5, 2, 3, 4], f"after ingest (ms after t) {ends} {iv}")
        s.stop()
        db = migrated_db(s)
        check(not db.execute("SELECT 1 FROM sqlite_master WHERE name IN ('intervals', 'v1_intervals', 'v1_stacks',"
                             " 'v1_locations')").fetchall(), "old tables gone")
        db.execute("UPDATE meta SET value = ? WHERE key = 'schema'", (STORE_SCHEMA + 1,))
        db.commit()
        db.close()
        try:
            s.start()
            check(False, "a newer schema is refused")
        except RuntimeError:
            check(f"schema {STORE_SCHEMA + 1}, written by a newer gpuscope-server" in s.logtext(),
                  f"refused: {s.logtext()}")
    print("ok")


main()
