#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Rollup rows per node (schema 11): a row per (level, bucket, kind, node) holds every label set
of that node; hour and day rows are built once their bucket closed (none for the open hour or
day, whose queries read the minutes), a sample that comes late into a built hour is added to
it, and every answer (totals, per node, per pid, grouped) is the samples ingested. A schema-10
store (a row per label set) is converted at open and answers the same, its pages at 1 KiB."""
import ctypes
import ctypes.util
import os
import random
import sqlite3
import time

from gpuscope_server import (Server, check, check_migrated, encode, now_ns, running,
                             skip_if_unbuilt, svarint, uvarint, wait)

skip_if_unbuilt()
S = 10**9
MIN, HOUR, DAY = 60 * S, 3600 * S, 86400 * S
NODES = ("n1", "n2")
PIDS = (1, 2, 3)


def zstd():
    name = ctypes.util.find_library("zstd") or "libzstd.so.1"
    z = ctypes.CDLL(name)
    z.ZSTD_getFrameContentSize.restype = ctypes.c_ulonglong
    z.ZSTD_decompress.restype = ctypes.c_size_t
    return z


def unpack(z, blob):
    """A stored blob's bytes: raw after a 0, else one zstd frame."""
    if blob[0] == 0:
        return bytes(blob[1:])
    n = z.ZSTD_getFrameContentSize(blob, len(blob))
    out = ctypes.create_string_buffer(n)
    check(z.ZSTD_decompress(out, n, blob, len(blob)) == n, "zstd frame")
    return out.raw


class Rd:
    def __init__(self, b):
        self.b, self.p = b, 0

    def u(self):
        v = s = 0
        while True:
            c = self.b[self.p]
            self.p += 1
            v |= (c & 0x7F) << s
            s += 7
            if c < 0x80:
                return v

    def s(self):
        u = self.u()
        return (u >> 1) ^ -(u & 1)


def decode11(raw):
    """[(labelset, stack, sum, count)] of a schema-11 row (chunk.h), read independently of the
    server's decoder."""
    r = Rd(raw)
    check((r.u(), r.u(), r.u()) == (0, 0, 3), "format 3")
    flags, nls = r.u(), r.u()
    ls, lss = 0, []
    for _ in range(nls):
        ls += r.u()
        lss.append(ls)
    runs = [r.u() for _ in range(nls)]
    n = sum(runs)
    deltas = [r.u() for _ in range(n)]
    sums = [r.s() for _ in range(n)]
    counts = [r.u() for _ in range(n)] if flags & 1 else sums
    check(r.p == len(raw), "the whole row read")
    out, i = [], 0
    for ls, k in zip(lss, runs):
        stack = 0
        for _ in range(k):
            stack += deltas[i]
            out.append((ls, stack, sums[i], counts[i]))
            i += 1
    return out


def extents(z, db):
    """[(id, first_ns, last_ns)] of the label sets' extents rows (schema 14), read independently
    of the server: format 1, the time unit, a count, then id gaps, starts as zigzag
    differences, lengths (in units)."""
    out = []
    for _, data in db.execute("SELECT id, data FROM lsext ORDER BY id"):
        r = Rd(unpack(z, data))
        check(r.u() == 1, "extents format 1")
        unit, n = r.u(), r.u()
        ids, firsts, i, f = [], [], 0, 0
        for _ in range(n):
            i += r.u()
            ids.append(i)
        for _ in range(n):
            f += r.s()
            firsts.append(f)
        durs = [r.u() for _ in range(n)]
        check(r.p == len(r.b), "the whole row read")
        out += [(i, f * unit, (f + d) * unit) for i, f, d in zip(ids, firsts, durs)]
    return out


def batch(node, lines):
    return encode("\n".join([f"node {node}"] + lines) + "\n")


def samples(node, t, n_per_pid, step=10**7):
    """pid p gets n_per_pid * p CPU samples from t on, step ns apart, stack main;f<p>."""
    out = []
    for p in PIDS:
        for i in range(n_per_pid * p):
            out.append(f"sample {t + i * step} cpu 1 pid={p},tid={p},comm=app{p} main;f{p}")
    return out


def rng(a, b):
    return f"from={a / 1e9:.3f}&to={b / 1e9:.3f}"


def answers(s, ranges):
    """Per range: the total, per node, per pid, and the top functions' self values."""
    out = {}
    for name, (a, b) in ranges.items():
        r = rng(a, b)
        fg = s.get_json(f"/api/v1/flamegraph?{r}")
        nodes = {n: s.get_json(f"/api/v1/flamegraph?{r}&selector=%7Bnode%3D%22{n}%22%7D")["total"]
                 for n in NODES}
        pids = {p: s.get_json(f"/api/v1/flamegraph?{r}&selector=%7Bpid%3D%22{p}%22%7D")["total"]
                for p in PIDS}
        top = {f["name"]: f["self"] for f in
               s.get_json(f"/api/v1/top?{r}&limit=100")["functions"] if f["self"]}
        out[name] = (fg["total"], nodes, pids, top)
    return out


def rows(db):
    return db.execute("SELECT level, bucket, kind, node, data FROM rollups").fetchall()


WIDTH = (MIN, HOUR, DAY)


def entries(z, by_key, key):
    """{(labelset, stack): (sum, count)} of a row, a deferred (empty) hour or day row read as
    the rows of the level below in its bucket, as the server reads it."""
    lv, bk, kind, node = key
    data = by_key[key]
    out = {}
    if lv and not data:
        for k2 in by_key:
            if (k2[0] == lv - 1 and bk <= k2[1] < bk + WIDTH[lv] and k2[2] == kind
                    and k2[3] == node):
                for e, (sm, ct) in entries(z, by_key, k2).items():
                    o = out.get(e, (0, 0))
                    out[e] = (o[0] + sm, o[1] + ct)
        return out
    for ls, stack, sm, ct in decode11(unpack(z, data)):
        out[(ls, stack)] = (sm, ct)
    return out


def check_built(z, got):
    """Every kept hour or day row holds exactly its bucket's rows below; returns the keys of
    the deferred ones."""
    by_key = {(lv, bk, k, n): d for lv, bk, k, n, d in got}
    deferred = []
    for key, data in by_key.items():
        lv, bk, kind, node = key
        if not lv:
            continue
        if not data:
            deferred.append(key)
            continue
        below = {}
        for k2 in by_key:
            if k2[0] == lv - 1 and bk <= k2[1] < bk + WIDTH[lv] and k2[2:] == key[2:]:
                for e, (sm, ct) in entries(z, by_key, k2).items():
                    o = below.get(e, (0, 0))
                    below[e] = (o[0] + sm, o[1] + ct)
        check(entries(z, by_key, key) == below, f"row {key}: the sum of the rows below it")
    return deferred


def main():
    z = zstd()
    # An hour is built 2 min after it closed, a day likewise after midnight: begun in an hour's
    # first 30 s, 'cur' (30 s back) would lie in the hour before, built halfway through a slow
    # run; begun in a day's first 2 min, the old hour's day would be built only after the rows
    # are read. Begin after those.
    t = now_ns()
    wait_s = 130 - t % DAY // S if t % DAY < 130 * S else 40 - t % HOUR // S
    if wait_s > 0:
        time.sleep(wait_s)
    now = now_ns()
    old_day = (now // DAY - 2) * DAY + 5 * HOUR	# a day closed for sure
    old_hour = (now // HOUR - 2) * HOUR + 10 * MIN	# an hour closed for sure
    cur = now - 30 * S	# an open hour: its end is less than 2 min ago at most
    base = {"old_day": old_day, "old_hour": old_hour, "cur": cur}
    want_total = {k: 2 * 3 * sum(PIDS) for k in base}	# 2 nodes x 3 per pid unit
    s = Server()
    with running(s):
        for node in NODES:
            lines = []
            # spread so that hour and day rows save: the old hour's samples 20 s apart (three
            # minutes), the old day's 20 min apart (three hours)
            for k, t in base.items():
                lines += samples(node, t, 3, {"old_day": 1200 * S, "old_hour": 20 * S}.get(k, 10**7))
            code, body = s.ingest(batch(node, lines))
            check(code == 204, f"ingest {code} {body}")
        check(wait(lambda: s.metric("gpuscope_server_rollup_lag_chunks") == 0), "rolled up")
        db = sqlite3.connect(os.path.join(s.data, "gpuscope.db"))

        def built():
            return dict(db.execute("SELECT key, value FROM meta WHERE key LIKE 'rollup_built_%'"))
        check(wait(lambda: built().get("rollup_built_1", 0) > old_hour), f"hours built {built()}")
        check(wait(lambda: built().get("rollup_built_2", 0) > old_day), f"days built {built()}")

        def waiting():	# rows of late samples (all of them, if the hours were built first)
            return db.execute("SELECT count(*) FROM rollups WHERE level > 0 AND data IS NULL"
                              ).fetchone()[0]
        check(wait(lambda: s.metric("gpuscope_server_rollup_rows_waiting") == 0 and
                   waiting() == 0), "no row waiting to be built")
        b = built()
        check(b["rollup_built_1"] <= cur // HOUR * HOUR, f"the open hour is not built: {b}")
        got = rows(db)
        keys = [(lv, bk, k, n) for lv, bk, k, n, _ in got]
        check(len(keys) == len(set(keys)), "a row per (level, bucket, kind, node)")
        check({n for _, _, _, n in keys} == set(NODES), f"nodes {keys}")
        hours = {bk for lv, bk, _, _ in keys if lv == 1}
        days = {bk for lv, bk, _, _ in keys if lv == 2}
        check(old_hour // HOUR * HOUR in hours and old_day // HOUR * HOUR in hours,
              f"closed hours built: {hours}")
        check(cur // HOUR * HOUR not in hours, f"no row for the open hour: {hours}")
        check(old_day // DAY * DAY in days and cur // DAY * DAY not in days,
              f"the closed day built, not the open one: {days}")
        deferred = check_built(z, got)
        sizes = {(lv, bk, k, n): len(d or b"") for lv, bk, k, n, d in got}
        # in the first two hours of a UTC day the old hour lies in yesterday, whose day row
        # then holds that one hour alone: it saves nothing and is deferred, as it should be
        lone = [(2, old_hour // DAY * DAY, 0, n) for n in NODES] \
            if old_hour // DAY != cur // DAY else []
        check(sorted(deferred) == sorted(lone), f"every hour and day row here saves: kept "
              f"(deferred: {deferred}, want {lone}; row bytes {sizes})")
        for lv, bk, kind, node, data in got:
            if not data:
                continue	# deferred (above)
            ents = decode11(unpack(z, data))
            lss = [e[0] for e in ents]
            check(lss == sorted(lss) and len(set(lss)) == len(lss) and
                  (len(lss) == len(PIDS) or lv == 0 or bk // DAY * DAY == old_day // DAY * DAY),
                  f"row {lv} {bk} {node}: every label set of the node, in order: {lss}")
            if lv == 1 and bk == old_hour // HOUR * HOUR:
                check(sum(e[2] for e in ents) == 3 * sum(PIDS),
                      f"hour row {bk} {node}: its hour's samples {ents}")
        db.close()

        ranges = {
            "old_day": (old_day // DAY * DAY, old_day // DAY * DAY + DAY),	# a day row
            "old_hour": (old_hour // HOUR * HOUR, old_hour // HOUR * HOUR + HOUR),	# hour row
            "cur": (cur // MIN * MIN, (cur // MIN + 2) * MIN),	# minute rows
        }
        a1 = answers(s, ranges)
        for k, (total, nodes, pids, top) in a1.items():
            check(total == want_total[k], f"{k}: total {total} != {want_total[k]}")
            check(nodes == {n: want_total[k] // 2 for n in NODES}, f"{k}: per node {nodes}")
            check(pids == {p: 2 * 3 * p for p in PIDS}, f"{k}: per pid {pids}")
            check(top == {f"f{p}": 2 * 3 * p for p in PIDS}, f"{k}: top {top}")
        whole = (old_day // DAY * DAY, (now // MIN + 2) * MIN)	# days, hours, minutes
        t = s.get_json(f"/api/v1/flamegraph?{rng(*whole)}")["total"]
        check(t == sum(want_total.values()), f"all of it: {t}")

        # a sample late into a built hour: added to its row
        code, body = s.ingest(batch("n2", [f"sample {old_hour + 5 * MIN} cpu 1 pid=2,tid=2,"
                                           "comm=app2 main;f2"]))
        check(code == 204, f"late ingest {code} {body}")
        check(wait(lambda: s.metric("gpuscope_server_rollup_lag_chunks") == 0), "rolled up")
        late = answers(s, {"old_hour": ranges["old_hour"]})["old_hour"]
        check(late[0] == want_total["old_hour"] + 1 and late[1]["n2"] == want_total["old_hour"] // 2 + 1
              and late[2][2] == 2 * 3 * 2 + 1, f"the late sample counted in its hour: {late}")
        a1["old_hour"] = late
    print("PASS rows per node; hours and days built once closed; a late sample added")
    if lone:
        # schema 10 had no deferred rows: its store cannot be written from this one
        print("SKIP the schema-10 part: in the first two hours of a UTC day the old hour's day "
              "row is deferred")
        return

    # The same store as schema 10 had it: a row per label set (format 2: stack deltas, sums).
    db = sqlite3.connect(os.path.join(s.data, "gpuscope.db"))
    old_rows = []
    for lv, bk, kind, node, data in rows(db):
        per_ls = {}
        for ls, stack, sm, _ in decode11(unpack(z, data)):
            per_ls.setdefault(ls, []).append((stack, sm))
        for ls, ents in per_ls.items():
            raw = uvarint(0) + uvarint(len(ents))
            prev = 0
            for stack, _ in ents:
                raw += uvarint(stack - prev)
                prev = stack
            raw += b"".join(svarint(sm) for _, sm in ents)
            old_rows.append((lv, kind, bk, ls, b"\0" + raw))
    db.executescript("DROP TABLE rollups; CREATE TABLE rollups(level INTEGER, kind INTEGER,"
                     " bucket INTEGER, labelset INTEGER, data BLOB, PRIMARY KEY(level, kind,"
                     " bucket, labelset)) WITHOUT ROWID;"
                     "DELETE FROM meta WHERE key LIKE 'rollup_built_%';"
                     # schema 10 (and 11) kept each label set's content hash in its row,
                     # and its extent as first and last (schema 14: in lsext rows)
                     "CREATE TABLE labelsets(id INTEGER PRIMARY KEY, hash INTEGER NOT NULL,"
                     " first_ns INTEGER, last_ns INTEGER);"
                     "UPDATE meta SET value = 10 WHERE key = 'schema';")
    exts = extents(z, db)
    check(len(exts) == 2 * len(PIDS), f"a label set per node and pid: {exts}")
    db.executemany("INSERT INTO labelsets VALUES (?, 0, ?, ?)", exts)
    db.executescript("DROP TABLE lsext; DELETE FROM meta WHERE key = 'ls_seq';")
    db.executemany("INSERT INTO rollups VALUES (?, ?, ?, ?, ?)", old_rows)
    db.commit()
    check(db.execute("PRAGMA page_size").fetchone()[0] == 1024, "a new store's pages: 1 KiB")
    db.execute("PRAGMA journal_mode=DELETE")	# schema 10's page size, as its stores have it
    db.execute("PRAGMA page_size=4096")
    db.execute("VACUUM")
    db.execute("PRAGMA journal_mode=WAL")
    check(db.execute("PRAGMA page_size").fetchone()[0] == 4096, "4 KiB pages before")
    db.close()
    with running(s):
        check_migrated(s, 10)
        check(f"{len(old_rows)} rollup rows of" in s.logtext(), f"converted: {s.logtext()}")
        a2 = answers(s, ranges)
        check(a2 == a1, f"the same answers after the conversion: {a2} != {a1}")
        t = s.get_json(f"/api/v1/flamegraph?{rng(*whole)}")["total"]
        check(t == sum(want_total.values()) + 1, f"all of it after the conversion: {t}")
        # schema 12: the hashes come from the label sets' pairs, so known ones are found again
        nls = s.metric("gpuscope_server_label_sets")
        code, body = s.ingest(batch(NODES[0], samples(NODES[0], cur + 5 * S, 1)))
        check(code == 204 and s.metric("gpuscope_server_label_sets") == nls,
              f"a converted store's label sets found by content: {nls} -> "
              f"{s.metric('gpuscope_server_label_sets')}")
    db = sqlite3.connect(os.path.join(s.data, "gpuscope.db"))
    check(not db.execute("SELECT 1 FROM sqlite_schema WHERE name = 'rollups_v10'").fetchone(),
          "the old table dropped")
    check(not db.execute("SELECT 1 FROM sqlite_schema WHERE name = 'labelsets'").fetchone() and
          [e[0] for e in extents(z, db)] == [e[0] for e in exts] and
          db.execute("SELECT value FROM meta WHERE key = 'ls_seq'").fetchone()[0] ==
          max(e[0] for e in exts), "the label sets' extents in lsext rows (schema 14)")
    check(db.execute("PRAGMA page_size").fetchone()[0] == 1024 and
          db.execute("PRAGMA journal_mode").fetchone()[0] == "wal",
          "the conversion's vacuum took the store to 1 KiB pages, in WAL mode again")
    check(len({(lv, bk, k, n) for lv, bk, k, n, _ in rows(db)}) == len(rows(db)) and
          {n for _, _, _, n, _ in rows(db)} == set(NODES), "rows per node again")
    db.close()
    print(f"PASS a schema-10 store ({len(old_rows)} rows per label set) converted, same answers")
    churning(z)


def churning(z):
    """A node of short-lived threads (schema 14): each minute's threads are new, so an hour row
    would repeat its minutes' entries one for one. It is deferred (stored empty), answers come
    from the minutes, and a late sample into that hour is counted."""
    now = now_ns()
    hour = (now // HOUR - 2) * HOUR
    day = hour // DAY * DAY
    # 10 minutes of 100 new threads each, 4 samples a thread on stacks drawn from 500: an
    # hour row's entries are its minutes' one for one, and compress no better
    rnd = random.Random(16)
    lines, want, per_tid, per_fn = [], 0, {}, {}
    for m in range(10):
        for k in range(100):
            tid = 1000 + 100 * m + k
            for j in range(4):
                f = rnd.randrange(500)
                lines.append(f"sample {hour + m * MIN + k * 500 * 10**6 + j * 10**7} cpu 1 pid=7,"
                             f"tid={tid},comm=cc1 main;parse;f{f}")
                per_tid[tid] = per_tid.get(tid, 0) + 1
                per_fn[f"f{f}"] = per_fn.get(f"f{f}", 0) + 1
    n = len(lines)
    s = Server()
    with running(s):
        code, body = s.ingest(batch("n3", lines))
        check(code == 204, f"ingest {code} {body}")
        check(wait(lambda: s.metric("gpuscope_server_rollup_lag_chunks") == 0), "rolled up")
        # the hour was closed and built (empty) before these samples came: late, its row waits
        check(wait(lambda: s.metric("gpuscope_server_rollup_rows_waiting") >= 1), "waiting")
        fg = s.get_json(f"/api/v1/flamegraph?{rng(hour, hour + HOUR)}")
        check(fg["total"] == n, f"while its row waits, the hour answers from the minutes: "
              f"{fg['total']}")
        # one more late sample right before the stop: the row still waits when the server is
        # back, however long the checks above took (30 s of quiet build it)
        code, body = s.ingest(batch("n3", [f"sample {hour + 9 * MIN + 7 * S} cpu 1 pid=7,"
                                           "tid=999,comm=cc1 main;parse;f0"]))
        check(code == 204, f"late ingest {code} {body}")
        n += 1
        per_tid[999] = 1
        per_fn["f0"] = per_fn.get("f0", 0) + 1
    with running(s):	# a restart finds the waiting rows again
        check(s.metric("gpuscope_server_rollup_rows_waiting") >= 1, "still waiting after a "
              "restart")
        ok = wait(lambda: s.metric('gpuscope_server_rollup_rows_built_total{level="hour",'
                                   'row="deferred"}') == 1)
        db = sqlite3.connect(os.path.join(s.data, "gpuscope.db"))
        sizes = db.execute("SELECT level, count(*), sum(length(data)) FROM rollups GROUP BY 1")
        check(ok, f"the hour row deferred: rows (level, n, bytes) {sizes.fetchall()}")
        db.close()
        check(s.metric('gpuscope_server_rollup_rows_built_total{level="hour",row="kept"}') == 0,
              "no hour row kept")
        db = sqlite3.connect(os.path.join(s.data, "gpuscope.db"))
        got = rows(db)
        db.close()
        deferred = check_built(z, got)
        check((1, hour, 0, "n3") in [k[:2] + (0, k[3]) for k in deferred],
              f"the hour's row deferred: {deferred}")
        whole_day = day + DAY <= now - 3 * MIN
        if whole_day:
            check(wait(lambda: s.metric('gpuscope_server_rollup_rows_built_total{level="day",'
                                        'row="deferred"}') == 1), "the day row deferred too")
        r = rng(hour, hour + HOUR)
        fg = s.get_json(f"/api/v1/flamegraph?{r}")
        check(fg["total"] == n, f"the deferred hour answers from its minutes: {fg['total']}")
        tid = s.get_json(f"/api/v1/flamegraph?{r}&selector=%7Btid%3D%221007%22%7D")["total"]
        check(tid == per_tid[1007], f"one thread of it: {tid}")
        top = {f["name"]: f["self"] for f in s.get_json(f"/api/v1/top?{r}&limit=1000")["functions"]
               if f["self"]}
        check(top == per_fn, f"top {sorted(top.items())[:10]} != {sorted(per_fn.items())[:10]}")
        if whole_day:
            t = s.get_json(f"/api/v1/flamegraph?{rng(day, day + DAY)}")["total"]
            check(t == n, f"the deferred day answers from the minutes: {t}")
        code, body = s.ingest(batch("n3", [f"sample {hour + 30 * MIN + 5 * S} cpu 1 pid=7,"
                                           "tid=1007,comm=cc1 main;parse;f7"]))
        check(code == 204, f"late ingest {code} {body}")
        check(wait(lambda: s.metric("gpuscope_server_rollup_lag_chunks") == 0), "rolled up")
        fg = s.get_json(f"/api/v1/flamegraph?{r}")
        check(fg["total"] == n + 1, f"a late sample into the deferred hour: {fg['total']}")
        db = sqlite3.connect(os.path.join(s.data, "gpuscope.db"))
        check(db.execute("SELECT length(data) FROM rollups WHERE level = 1 AND node = 'n3'")
              .fetchall() == [(0,)], "the deferred row stays empty")
        db.close()
    print(f"PASS a churning node's hour row deferred ({len(per_tid)} threads), its answers from the minutes"
          f"{', and its day' if whole_day else ''}; a late sample counted")


if __name__ == "__main__":
    main()
