#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Locations and stacks are found by content through in-memory indexes loaded from their blocks
at open (schemas 6 and 7, docs/server.md "Storage"; no hash table on disk): after a restart a
known location (c33243) and stack ([96, 291]) are found, not stored again, and a location and a
stack whose content hashes share their top 32 bits with those (found by brute force: c195034;
stacks of location ids [824, 620]) are new entries of their own that answer with their own
frames; the store has no locations table and no stacks table (schema 8: a stackdays row per
batch lists the stacks it used first that day)."""
import os
import sqlite3

from gpuscope_server import Server, check, encode, find, now_ns, running, skip_if_unbuilt

skip_if_unbuilt()


def main():
    t = now_ns() - 60 * 10**9
    s = Server()
    db = os.path.join(s.data, "gpuscope.db")
    with running(s):
        # locations g1..g1000 get ids 1..1000, in this order
        lines = ["node n"] + [f"sample {t + i} cpu 1 pid=1 g{i}" for i in range(1, 1001)]
        lines += [f"sample {t + 2000} cpu 1 pid=1 c33243", f"sample {t + 2001} cpu 1 pid=1 g291;g96"]
        code, body = s.ingest(encode("\n".join(lines) + "\n"))
        check(code == 204, f"first batch {code} {body}")
        s.stop()
        s.start()	# the dedup caches are gone: the tables answer
        t2 = t + 10**9
        code, body = s.ingest(encode(f"node n\nsample {t2} cpu 1 pid=2 c195034\n"
                                     f"sample {t2 + 1} cpu 1 pid=2 c33243\n"
                                     f"sample {t2 + 2} cpu 1 pid=2 g620;g824\n"
                                     f"sample {t2 + 3} cpu 1 pid=2 g291;g96\n"))
        check(code == 204, f"second batch {code} {body}")
        check(s.metric("gpuscope_server_locations") == 1002,
              f"locations {s.metric('gpuscope_server_locations')}, want 1002 (c195034 new, c33243 found)")
        check(s.metric("gpuscope_server_stacks") == 1004,
              f"stacks {s.metric('gpuscope_server_stacks')}, want 1004")
        r = sqlite3.connect(db)
        check(not r.execute("SELECT 1 FROM sqlite_master WHERE name = 'locations'").fetchall(),
              "no locations table")
        check(not r.execute("SELECT 1 FROM sqlite_master WHERE name = 'stacks'").fetchall(),
              "no stacks table (schema 8)")
        rows = r.execute("SELECT count(*) FROM stackdays").fetchone()[0]
        check(rows == 2, f"a stackdays row per batch: {rows}")
        r.close()
        fg = s.get_json(f"/api/v1/flamegraph?from={t2 / 1e9 - 0.5:.3f}&to={t2 / 1e9 + 0.5:.3f}")
        check(fg["total"] == 4, f"second batch's samples: {fg['total']}")
        for name in ("c195034", "c33243"):
            n = find(fg["root"], name)
            check(n is not None and n["value"] == 1, f"{name} answers as itself: {n}")
        for outer, inner in (("g620", "g824"), ("g291", "g96")):
            n = find(fg["root"], outer)
            check(n is not None and find(n, inner) is not None, f"stack {outer};{inner}: {n}")
    print("ok")


main()
