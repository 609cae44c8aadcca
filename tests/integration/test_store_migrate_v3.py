#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""A store of schema 3 (schema 2's tables: label sets one row each with their pairs; written here
with that DDL, its sample and interval chunks in format 1 as schema 2 wrote them) is migrated in
place at open: label sets move into blocks with their ids, the old chunks are read as they are
(samples per thread, in time order; intervals with their attrs), new data goes on beside them,
and the store is marked with the current version."""
import os
import subprocess
import urllib.parse

from gpuscope_server import (check, check_migrated, encode, migrated_db, now_ns, old_store,
                             pairs_blob, running, skip_if_unbuilt, svarint, uvarint)


skip_if_unbuilt()
q = urllib.parse.quote

V3 = """
CREATE TABLE meta(key TEXT PRIMARY KEY, value INTEGER);
INSERT INTO meta VALUES ('schema', 3), ('rollup_wm', 0), ('ivl_seq', 2), ('loc_seq', 3),
 ('stack_seq', 2);
CREATE TABLE batches(id INTEGER PRIMARY KEY, node TEXT, t INTEGER);
CREATE INDEX batches_t ON batches(t);
CREATE TABLE nodes(node TEXT PRIMARY KEY, first_ns INTEGER, last_ns INTEGER);
CREATE TABLE labelsets(id INTEGER PRIMARY KEY, hash INTEGER UNIQUE NOT NULL,
 labels BLOB NOT NULL, first_ns INTEGER, last_ns INTEGER);
CREATE TABLE locations(hash INTEGER PRIMARY KEY, id INTEGER NOT NULL) WITHOUT ROWID;
CREATE TABLE locblocks(id INTEGER PRIMARY KEY, last INTEGER NOT NULL, data BLOB NOT NULL);
CREATE TABLE stacks(hash INTEGER PRIMARY KEY, id INTEGER NOT NULL, day INTEGER NOT NULL) WITHOUT ROWID;
CREATE TABLE stackblocks(id INTEGER PRIMARY KEY, last INTEGER NOT NULL, data BLOB NOT NULL);
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
CREATE TABLE ivchunks(id INTEGER PRIMARY KEY, kind TEXT, t_min INTEGER,
 t_max INTEGER, n INTEGER, data BLOB);
CREATE INDEX ivchunks_ke ON ivchunks(kind, t_max);
CREATE INDEX ivchunks_e ON ivchunks(t_max);
CREATE INDEX ivchunks_klen ON ivchunks(kind, (t_max - t_min));
"""


uv, sv = uvarint, svarint


def raw(payload):
    """A blob stored as it is (schema 2: a 0 byte, then the bytes)."""
    return b"\0" + payload


M64 = (1 << 64) - 1


def hash64(data, seed):
    """src/common/util.c's hash64(): a label set's content hash is hash64(pairs, 11)."""
    h = 0xCBF29CE484222325 ^ seed ^ ((len(data) * 0x9E3779B97F4A7C15) & M64)
    i = 0
    while len(data) - i >= 8:
        h = ((h ^ int.from_bytes(data[i:i + 8], "little")) * 0x100000001B3) & M64
        h ^= h >> 29
        i += 8
    for c in data[i:]:
        h = ((h ^ c) * 0x100000001B3) & M64
    h ^= h >> 33
    h = (h * 0xFF51AFD7ED558CCD) & M64
    h ^= h >> 33
    return h - (1 << 64) if h >= 1 << 63 else h


blob = pairs_blob


def main():
    now = now_ns()
    t = now - 120 * 10**9
    s, db = old_store(V3)
    lsets = {1: [("comm", "app"), ("node", "n1"), ("pid", "7"), ("thread", "app"), ("tid", "7")],
             2: [("comm", "app"), ("node", "n1"), ("pid", "7"), ("thread", "worker"), ("tid", "8")]}
    for i, pairs in lsets.items():
        db.execute("INSERT INTO labelsets VALUES (?, ?, ?, ?, ?)",
                   (i, hash64(blob(pairs), 11), blob(pairs), t, t + 10**9))
    # locations 1-3 in one block: ids, function/module/build-id/file columns, lines, addresses,
    # flags
    locs = [("main", "/usr/bin/app", "ab" * 20, "app.c", 10, 0x1130, 0),
            ("work", "/usr/bin/app", "ab" * 20, "", 0, 0x1200, 0),
            ("schedule", "[kernel]", "", "", 0, 0xFFFFFFFF81000000, 1)]
    p = uv(3) + uv(1) + uv(1) + uv(1)
    for k in range(4):
        p += b"".join(l[k].encode() + b"\0" for l in locs)
    p += b"".join(uv(l[4]) for l in locs) + b"".join(uv(l[5]) for l in locs)
    p += b"".join(uv(l[6]) for l in locs)
    for lid in (1, 2, 3):
        db.execute("INSERT INTO locations VALUES (?, ?)", (5000 + lid, lid))
    db.execute("INSERT INTO locblocks VALUES (1, 3, ?)", (raw(p),))
    # stacks 1 = [work, main], 2 = [schedule, work, main] (innermost first, delta-coded)
    lists = [uv(2) + sv(-1), uv(3) + sv(-1) + sv(-1)]
    p = uv(2) + uv(1) + uv(1) + b"".join(uv(len(x)) for x in lists) + b"".join(lists)
    day = now // (86400 * 10**9)
    db.execute("INSERT INTO stacks VALUES (9001, 1, ?)", (day,))
    db.execute("INSERT INTO stacks VALUES (9002, 2, ?)", (day,))
    db.execute("INSERT INTO stackblocks VALUES (1, 2, ?)", (raw(p),))
    # cpu samples, format 1, both label sets in one chunk (row labelset 0): times in order,
    # label set of each, stack of each, every value 1
    ts = [t, t + 10**7, t + 10**7, t + 3 * 10**7]
    p = uv(4) + uv(1 | 2) + uv(0) + uv(10**7) + uv(0) + uv(2 * 10**7)
    p += uv(1) + uv(2) + uv(1) + uv(1) + uv(1) + uv(2) + uv(1) + uv(1)
    db.execute("INSERT INTO chunks VALUES (1, 0, 0, ?, ?, 4, ?)", (ts[0], ts[-1], raw(p)))
    # off-CPU samples of tid 8 alone, format 1 with values
    p = uv(2) + uv(0) + uv(0) + uv(5 * 10**6) + uv(2) + uv(2) + sv(700) + sv(12345)
    db.execute("INSERT INTO chunks VALUES (2, 2, 1, ?, ?, 2, ?)", (t, t + 5 * 10**6, raw(p)))
    # thread states, format 1: strings, shapes, lengths, label set + start, seq deltas, shapes,
    # values row by row (2 x string index, 2 x number + 1)
    strs = ["state", "running", "cpu", "blocked", "stack_id"]
    p = uv(2) + uv(0) + uv(len(strs)) + b"".join(x.encode() + b"\0" for x in strs)
    p += uv(2) + uv(2) + uv(0) + uv(2) + uv(2) + uv(0) + uv(4)
    p += uv(5 * 10**6) + uv(2 * 10**6)
    p += uv(1) + uv(0) + uv(1) + uv(10**6)
    p += sv(0) + sv(1)
    p += uv(0) + uv(1)
    p += uv(2 * 1) + uv(2 * 1 + 1) + uv(2 * 3) + uv(2 * 2 + 1)
    db.execute("INSERT INTO ivchunks VALUES (1, 'thread_state', ?, ?, 2, ?)",
               (t, t + 5 * 10**6, raw(p)))
    db.execute("INSERT INTO nodes VALUES ('n1', ?, ?)", (t, t + 10**9))
    db.commit()
    db.close()
    with running(s):
        check_migrated(s, 3)
        rng = f"from={(t - 10**9) / 1e9:.3f}&to={(t + 2 * 10**9) / 1e9:.3f}"
        fg = s.get_json(f"/api/v1/flamegraph?{rng}")
        check(fg["total"] == 4, f"old cpu samples {fg}")
        by = s.get_json(f"/api/v1/flamegraph?{rng}&group_by=thread")
        got = {c["name"]: c["value"] for c in by["root"]["children"]}
        check(got == {"app": 3, "worker": 1}, f"per thread {got}")
        sel = s.get_json(f"/api/v1/flamegraph?{rng}&selector=" + q('{tid="8"}'))
        check(sel["total"] == 1, f"tid 8 {sel}")
        off = s.get_json(f"/api/v1/flamegraph?{rng}&kind=offcpu_ns")
        check(off["total"] == 700 + 12345, f"off-CPU values {off}")
        st = s.get_json("/api/v1/stack/2")["frames"]
        check([f["function"] for f in st] == ["schedule", "work", "main"], f"stack 2 {st}")
        iv = s.get_json(f"/api/v1/intervals?kind=thread_state&{rng}")["intervals"]
        got = [(x["labels"]["thread"], x["attrs"]) for x in iv]
        check(got == [("app", {"state": "running", "cpu": "1"}),
                      ("worker", {"state": "blocked", "stack_id": "2"})], f"intervals {got}")
        vals = s.get_json(f"/api/v1/label/thread/values?{rng}")
        check(vals["values"] == ["app", "worker"], f"thread values {vals}")
        # new data beside the old: the same threads' label sets are found again by content
        code, body = s.ingest(encode(f"node n1\nsample {t + 5 * 10**7} cpu 1 "
                                     f"pid=7,tid=8,comm=app,thread=worker main;work\n"))
        check(code == 204, f"ingest {code} {body}")
        by = s.get_json(f"/api/v1/flamegraph?{rng}&group_by=thread")
        got = {c["name"]: c["value"] for c in by["root"]["children"]}
        check(got == {"app": 3, "worker": 2}, f"per thread after ingest {got}")
        check(s.metric("gpuscope_server_label_sets") == 2, "no new label set for a known thread")
        s.stop()
        db = migrated_db(s)
        cols = [r[1] for r in db.execute("PRAGMA table_info(labelsets)")]
        check("labels" not in cols and db.execute("SELECT count(*) FROM lsblocks").fetchone()[0] >= 1,
              f"label sets in blocks: {cols}")
        check(not db.execute("SELECT 1 FROM sqlite_master WHERE name IN ('v3_labelsets',"
                             " 'stacks')").fetchall(), "old tables gone")
        days = [r[0] for r in db.execute("SELECT day FROM stackdays ORDER BY id")]
        check(days and days[0] == day, f"the stacks' day in a stackdays row (schema 8): {days}")
        # schema 10: the location block written again under its key, its names as ids into
        # the string dictionary (format 3 since schema 14, 2 in schema 10: 0, 3, ...), the
        # names in a string block
        lb = db.execute("SELECT data FROM locblocks WHERE id = 1").fetchone()[0]
        payload = lb[1:] if lb[0] == 0 else subprocess.run(
            ["zstd", "-d", "-c"], input=lb, stdout=subprocess.PIPE, check=True).stdout
        check(payload[:3] == b"\0\x03\x03", f"location block in format 3: {payload[:8]!r}")
        sb = b"".join(r[0] for r in db.execute("SELECT data FROM strblocks"))
        check(len(sb) > 0, "the names in string blocks")
        db.close()
        s.start()  # the pairs come back from the blocks after a restart
        vals = s.get_json(f"/api/v1/label/tid/values?{rng}")
        check(vals["values"] == ["7", "8"], f"tid values after restart {vals}")
        st = s.get_json("/api/v1/stack/2")["frames"]
        check([(f["function"], f["module"], f.get("file"), f.get("line")) for f in st] ==
              [("schedule", "[kernel]", None, None), ("work", "/usr/bin/app", None, None),
               ("main", "/usr/bin/app", "app.c", 10)], f"stack 2 after restart {st}")
    print("ok")


main()
