#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The store's dictionaries follow retention: 2000 short-lived processes (each its own label set,
stack and leaf function) recorded four days ago, 50 processes now, one of which also runs an old
process's stack (schema 8: a stackdays row of today names it). Restarted with a retention of one
day, the server deletes the old records and then the label sets, stacks and locations only they
used; what is left answers as before, and /metrics counts what went and the bytes per sample
held."""
import os
import sqlite3
import subprocess
import sys
import time

import pbwire
from gpuscope_server import Server, check, encode, find, now_ns, run_test, skip_if_unbuilt

skip_if_unbuilt()
DAY = 86400 * 10**9
MS = 10**6
NOW = now_ns()
OLD = NOW - 4 * DAY
OLD_PROCS, NEW_PROCS = 2000, 50


def script(t0, procs, pid0, prefix):
    lines = ["node gc-node"]
    for i in range(procs):
        for k in range(3):
            lines.append(f"sample {t0 + i * MS + k} cpu 1 pid={pid0 + i},comm={prefix}{i % 7} "
                         f"main;common_loop;{prefix}_leaf_{pid0 + i}")
    return "\n".join(lines) + "\n"


def dictionary(db):
    """The store's string dictionary (schema 10): id -> string, from its blocks (zstd, or a 0
    byte and the bytes; the stack-block format: n, id deltas, lengths, bytes)."""
    out = {}
    for (blob,) in db.execute("SELECT data FROM strblocks ORDER BY id"):
        b = blob[1:] if blob[0] == 0 else subprocess.run(
            ["zstd", "-d", "-c"], input=blob, stdout=subprocess.PIPE, check=True).stdout
        n, i = pbwire.varint(b, 0)
        ids, lens, sid = [], [], 0
        for _ in range(n):
            d, i = pbwire.varint(b, i)
            sid += d
            ids.append(sid)
        for _ in range(n):
            ln, i = pbwire.varint(b, i)
            lens.append(ln)
        for sid, ln in zip(ids, lens):
            check(sid not in out, f"string id {sid} in two blocks")
            out[sid] = b[i:i + ln].decode()
            i += ln
    return out


def wait(what, cond, timeout=60):
    end = time.time() + timeout
    while time.time() < end:
        if cond():
            return True
        time.sleep(0.5)
    print(f"timed out: {what}")
    return False


def main():
    first = Server(args=["--retention", "5d", "--retention-period", "1s"]).start()
    data = first.data
    rng = f"from={(NOW - 60 * 10**9) / 1e9:.3f}&to={(NOW + 60 * 10**9) / 1e9:.3f}"
    try:
        # batches of 500 processes (a batch per agent push)
        for b in range(OLD_PROCS // 500):
            code, body = first.ingest(encode(script(OLD + b * 500 * MS, 500, 10000 + b * 500, "old")))
            check(code == 204, f"old batch {b}: {code} {body}")
        reused = f"sample {NOW + 999 * MS} cpu 1 pid=500,comm=new0 main;common_loop;old_leaf_10001\n"
        code, body = first.ingest(encode(script(NOW, NEW_PROCS, 500, "new") + reused))
        check(code == 204, f"new batch: {code} {body}")
        check(wait("rolled up", lambda: first.metric("gpuscope_server_rollup_lag_chunks") == 0),
              "every chunk rolled up")
        before = {k: first.metric(f"gpuscope_server_{k}") for k in ("label_sets", "stacks", "locations")}
        print("before:", before)
        check(before["label_sets"] == OLD_PROCS + NEW_PROCS, f"label sets {before}")
        check(before["stacks"] == OLD_PROCS + NEW_PROCS and
              before["locations"] == OLD_PROCS + NEW_PROCS + 2, f"stacks and locations {before}")
        check(first.metric("gpuscope_server_store_bytes_per_sample") > 0, "bytes per sample on /metrics")
    except Exception:
        print(first.logtext(), file=sys.stderr)
        raise
    finally:
        first.stop()

    # the same store with a retention of one day: the old records and their dictionary rows go
    s = Server(data=data, args=["--retention", "1d", "--retention-period", "1s"]).start()
    try:
        ok = wait("dictionary GC", lambda: s.metric("gpuscope_server_label_sets") == NEW_PROCS and
                  s.metric("gpuscope_server_stacks") == NEW_PROCS + 1 and
                  s.metric("gpuscope_server_locations") == NEW_PROCS + 3, 90)
        after = {k: s.metric(f"gpuscope_server_{k}") for k in ("label_sets", "stacks", "locations")}
        print("after:", after)
        check(ok, f"dictionaries bounded by what is retained: {after}")
        for table, want in (("label_sets", OLD_PROCS), ("stacks", OLD_PROCS - 1),
                            ("locations", OLD_PROCS - 1)):
            got = s.metric(f'gpuscope_server_dictionary_deleted_total{{table="{table}"}}')
            check(got == want, f"{table}: {got} deleted, counted")
        # what is left answers as before: frames and labels of the recent processes
        fg = s.get_json(f"/api/v1/flamegraph?{rng}&group_by=comm")
        check(fg["total"] == 3 * NEW_PROCS + 1, f"recent samples intact: {fg['total']}")
        loop = find(find(find(fg["root"], "new0"), "main"), "common_loop")
        check(loop is not None and find(loop, "new_leaf_500")["value"] == 3, "shared and own frames intact")
        check(find(loop, "old_leaf_10001")["value"] == 1, "an old stack used today is kept")
        v = s.get_json(f"/api/v1/label/pid/values?{rng}")["values"]
        check(len(v) == NEW_PROCS and "10000" not in v, f"label values: only the recent pids ({len(v)})")
        # a process of the old set coming back gets fresh rows
        code, body = s.ingest(encode(script(now_ns(), 1, 10000, "old")))
        check(code == 204, f"re-ingest of an old label set: {code} {body}")
        r2 = f"from={(now_ns() - 60 * 10**9) / 1e9:.3f}&to={(now_ns() + 60 * 10**9) / 1e9:.3f}"
        fg = s.get_json(f"/api/v1/flamegraph?{r2}&selector=%7Bpid%3D%2210000%22%7D")
        leaf = find(find(find(fg["root"], "main"), "common_loop"), "old_leaf_10000")
        check(fg["total"] == 3 and leaf is not None and leaf["value"] == 3,
              f"the returning process has its samples and frames: {fg['total']}")
        check(s.metric("gpuscope_server_label_sets") == NEW_PROCS + 1, "its label set is back")
        s.stop()
        # the location blocks of the old batches went with their last location: the first
        # batch's block also holds main and common_loop (still used), the three others none
        db = sqlite3.connect(os.path.join(data, "gpuscope.db"))
        blocks = db.execute("SELECT count(*) FROM locblocks").fetchone()[0]
        # the names (schema 10): the old leaves' strings went with their locations but the
        # one still used; the returning one's came back (under a new id), each string once
        strs = dictionary(db)
        db.close()
        check(blocks == 3, f"location blocks left: {blocks} (the first old one, new, returning)")
        names = sorted(strs.values())
        leaves = [v for v in names if "_leaf_" in v]
        check(len(names) == len(set(names)), "each string once in the dictionary")
        check("main" in names and "common_loop" in names and "new_leaf_549" in names,
              f"the strings of the locations left: {names[:10]}")
        check(sorted(leaves) == sorted(["old_leaf_10000", "old_leaf_10001"] +
                                       [f"new_leaf_{500 + i}" for i in range(NEW_PROCS)]),
              f"the old leaves' names went: {len(leaves)} left, {leaves[:5]}")
        check(max(k for k, v in strs.items() if v == "old_leaf_10000") > max(
            k for k, v in strs.items() if v == "new_leaf_549"), "the returning name's id is new")
        # label sets' pairs live in blocks rewritten by GC: after a restart every one left is
        # there, and only those
        s.start()
        check(s.metric("gpuscope_server_label_sets") == NEW_PROCS + 1, "label sets after restart")
        r3 = f"from={(OLD - 60 * 10**9) / 1e9:.3f}&to={(now_ns() + 60 * 10**9) / 1e9:.3f}"
        v = s.get_json(f"/api/v1/label/pid/values?{r3}")["values"]
        check(len(v) == NEW_PROCS + 1 and "10000" in v and "10001" not in v,
              f"label values after restart ({len(v)})")
        # the frames' names, from the dictionary loaded again at open
        fg = s.get_json(f"/api/v1/flamegraph?{r3}&group_by=comm")
        loop = find(find(find(fg["root"], "new0"), "main"), "common_loop")
        check(loop is not None and find(loop, "new_leaf_500")["value"] == 3 and
              find(loop, "old_leaf_10001")["value"] == 1, "frames' names after restart")
        code, body = s.ingest(encode(script(now_ns(), 1, 10002, "old")))
        check(code == 204, f"a gone name stored again: {code} {body}")
        r4 = f"from={(now_ns() - 60 * 10**9) / 1e9:.3f}&to={(now_ns() + 60 * 10**9) / 1e9:.3f}"
        fg = s.get_json(f"/api/v1/flamegraph?{r4}&selector=%7Bpid%3D%2210002%22%7D")
        check(find(find(find(fg["root"], "main"), "common_loop"), "old_leaf_10002") is not None,
              "a name GC deleted comes back as a new string")
    except Exception:
        print(s.logtext(), file=sys.stderr)
        raise
    finally:
        s.stop()
    print("ok")


if __name__ == "__main__":
    run_test(main)
