#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Off-CPU sample values at the store's time resolution (schema 9; the rule of schema 15): with
--time-resolution us (the default) each is the whole µs between the floors of its start (time
less value) and its time, at least 1 µs (what a blocked interval of those ends gives back, so that
the server can keep such a sample as the interval alone), in flame graphs, top, samples over time
and pprof, from raw chunks and from rollups alike; with --time-resolution ns each stays exact; GPU
kernel and CPU values stay exact in both. A schema-8 store is migrated and its chunks answer as
before."""
import os
import sqlite3

from gpuscope_server import (Server, check, check_migrated, encode, find, migrated_db, now_ns,
                             pprof_values, running, skip_if_unbuilt, wait)

skip_if_unbuilt()
MS = 10**6
# (leaf, ns blocked, µs store's value) of samples at times 123 ns past a whole µs:
# the µs between floor(t - v) and floor(t), at least one
OFF = [("a", 1499, 2000), ("b", 1500, 2000), ("c", 300, 1000), ("d", 2000499, 2001000),
       ("e", 7000000, 7000000), ("f", 999, 1000), ("g", 1, 1000), ("h", 122, 1000),
       ("i", 124, 1000), ("j", 1123, 1000), ("k", 1124, 2000)]


def answers(s, rng):
    fg = s.get_json(f"/api/v1/flamegraph?{rng}&kind=offcpu_ns")
    leaves = {c["name"]: c["value"] for c in find(fg["root"], "main")["children"]}
    top = {f["name"]: f["self"] for f in
           s.get_json(f"/api/v1/top?{rng}&kind=offcpu_ns&limit=100")["functions"]}
    sm = s.get_json(f"/api/v1/samples?{rng}&kind=offcpu_ns&buckets=1")["series"][0]["total"]
    gk = s.get_json(f"/api/v1/flamegraph?{rng}&kind=gpu_kernel_ns")["total"]
    cpu = s.get_json(f"/api/v1/flamegraph?{rng}")["total"]
    return fg["total"], leaves, top, sm, gk, cpu


def main():
    # two minutes back, whole minutes: a range of whole minutes reads rollups once rolled up
    t0 = (now_ns() // (60 * 10**9) - 3) * 60 * 10**9
    lines = ["node n1"]
    for i, (leaf, v, _) in enumerate(OFF):
        lines.append(f"sample {t0 + 1000 * MS + i * 10 * MS + 123} offcpu_ns {v} "
                     f"pid=1,tid={1 + i % 2},comm=app main;{leaf}")
    lines.append(f"sample {t0 + 1100 * MS + 7} gpu_kernel_ns 1234 pid=1,comm=app,gpu=0 main;k")
    lines.append(f"sample {t0 + 1100 * MS + 9} cpu 1 pid=1,comm=app main;x")
    batch = encode("\n".join(lines) + "\n")
    ns_total = sum(v for _, v, _ in OFF)
    us_total = sum(u for _, _, u in OFF)
    for res, want in (("us", {leaf: u for leaf, _, u in OFF}),
                      ("ns", {leaf: v for leaf, v, _ in OFF})):
        total = sum(want.values())
        with running(Server(args=["--time-resolution", res])) as s:
            code, body = s.ingest(batch)
            check(code == 204, f"{res}: ingest {code} {body}")
            raw = f"from={(t0 + 999 * MS) / 1e9:.3f}&to={(t0 + 1200 * MS) / 1e9:.3f}"
            mins = f"from={t0 / 1e9:.3f}&to={(t0 + 120 * 10**9) / 1e9:.3f}"
            check(wait(lambda: s.metric("gpuscope_server_rollup_lag_chunks") == 0),
                  f"{res}: rolled up")
            for rng in (raw, mins):  # raw chunks only; minute rollups only
                fg, leaves, top, sm, gk, cpu = answers(s, rng)
                check(fg == total and sm == total, f"{res} {rng}: total {fg} {sm} != {total}")
                check(leaves == want, f"{res} {rng}: leaves {leaves} != {want}")
                check(all(top[k] == v for k, v in want.items()), f"{res} {rng}: top {top}")
                check(gk == 1234 and cpu == 1, f"{res} {rng}: gpu kernel {gk}, cpu {cpu} exact")
            code, body, _ = s.request(f"/api/v1/pprof?{raw}&kind=offcpu_ns")
            check(code == 200, f"{res}: pprof {code}")
            pv = pprof_values(body)
            check(sorted(pv) == sorted(want.values()), f"{res}: pprof values {pv}")
    check(us_total != ns_total and abs(us_total - ns_total) < 1000 * len(OFF),
          "each value within 1 µs")
    # A schema-8 store (its off-CPU values in ns) opened by this server: marked 9, no table
    # changed; its chunks answer as before, a new batch's values are rounded.
    s = Server(args=["--time-resolution", "ns"])
    with running(s):
        code, body = s.ingest(batch)
        check(code == 204, f"ingest {code} {body}")
    db = sqlite3.connect(os.path.join(s.data, "gpuscope.db"))
    db.execute("UPDATE meta SET value = 8 WHERE key = 'schema'")
    db.commit()
    db.close()
    s.args = []
    with running(s):
        check_migrated(s, 8)
        rng = f"from={(t0 + 999 * MS) / 1e9:.3f}&to={(t0 + 1200 * MS) / 1e9:.3f}"
        fg, leaves, _, _, _, _ = answers(s, rng)
        check(fg == ns_total and leaves == {leaf: v for leaf, v, _ in OFF},
              f"migrated: the old chunks' values in ns: {leaves}")
        code, body = s.ingest(encode("node n2\n" + f"sample {t0 + 2000 * MS} offcpu_ns 1499 "
                                     "pid=1,comm=app main;a\n"))
        check(code == 204, f"ingest {code} {body}")
        fg = s.get_json(f"/api/v1/flamegraph?from={(t0 + 1999 * MS) / 1e9:.3f}&"
                        f"to={(t0 + 2001 * MS) / 1e9:.3f}&kind=offcpu_ns")
        check(fg["total"] == 2000, f"migrated: a new value in µs: {fg['total']}")
    db = migrated_db(s)
    db.close()
    print("PASS off-CPU values: whole µs between the floored ends (never 0), ns exact, GPU and CPU"
          " exact")


if __name__ == "__main__":
    main()
