#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Interval chunks' ties of start (format 4, docs/server.md "Storage"): intervals that start in
the same µs are answered in the order they arrived, whether the chunk keeps only their order (a
tie group of one chunk, in or against the order their ends predict), their seqs (a tie with an
interval of another kind, so of another chunk), or they come from two batches; the answers stay
the same after a restart."""
import os
import sqlite3

from gpuscope_server import Server, check, encode, now_ns, running, skip_if_unbuilt

skip_if_unbuilt()


def main():
    t = now_ns() - 60 * 10**9
    t -= t % 10**6
    ts = "interval thread_state pid=1,tid={tid} {a} {b} state={st}"
    # arrival order is the order listed; A..F name them in the answer
    b1 = ["node n",
          ts.format(tid=9, a=t - 10**6, b=t - 10**5, st="running"),        # W: the batch's least seq
          f"interval cuda_api pid=1,tid=5 {t} {t + 100000} api=A",        # X: another kind's chunk
          ts.format(tid=2, a=t, b=t + 50000, st="blocked"),               # Y
          ts.format(tid=3, a=t + 999, b=t + 10000, st="runnable"),        # Z: the same µs
          ts.format(tid=4, a=t + 10**6, b=t + 10**6 + 500000, st="running"),   # A
          ts.format(tid=5, a=t + 10**6, b=t + 10**6 + 100000, st="runnable"),  # B: ends before A
          ts.format(tid=6, a=t + 10**6, b=t + 10**6 + 50000, st="blocked"),    # C
          ts.format(tid=7, a=t + 2 * 10**6, b=t + 2 * 10**6 + 10, st="running"),   # E: ends first
          ts.format(tid=8, a=t + 2 * 10**6, b=t + 2 * 10**6 + 90, st="blocked")]   # F
    b2 = ["node n", ts.format(tid=1, a=t, b=t + 20, st="running")]          # D: the next batch
    want_all = ["running", "A", "blocked", "runnable", "running", "running", "runnable", "blocked",
                "running", "blocked"]
    s = Server()
    with running(s):
        for b in (b1, b2):
            code, body = s.ingest(encode("\n".join(b) + "\n"))
            check(code == 204, f"ingest: {code} {body}")
        rng = f"from={(t - 2 * 10**6) / 1e9:.3f}&to={(t + 3 * 10**6) / 1e9:.3f}"

        def answer():
            allk = s.get_json(f"/api/v1/intervals?{rng}")["intervals"]
            ts_only = s.get_json(f"/api/v1/intervals?kind=thread_state&{rng}")["intervals"]
            return allk, ts_only

        allk, ts_only = answer()
        got = [x["attrs"].get("api") or x["attrs"]["state"] for x in allk]
        tids = [x["labels"]["tid"] for x in allk]
        check(got == want_all and tids == ["9", "5", "2", "3", "1", "4", "5", "6", "7", "8"],
              f"every kind by start, then arrival: {list(zip(got, tids))}")
        check([x["labels"]["tid"] for x in ts_only] == ["9", "2", "3", "1", "4", "5", "6", "7", "8"],
              f"thread states by start, then arrival: {[x['labels']['tid'] for x in ts_only]}")
        db = sqlite3.connect(os.path.join(s.data, "gpuscope.db"))
        n = db.execute("SELECT kind, count(*), sum(n) FROM ivchunks GROUP BY kind ORDER BY kind").fetchall()
        db.close()
        check(n == [("cuda_api", 1, 1), ("thread_state", 2, 9)], f"chunks {n}")
        s.stop()
        s.start()
        check(answer() == (allk, ts_only), "the same answers after a restart")


if __name__ == "__main__":
    main()
