#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Off-CPU samples kept as the blocked intervals they repeat (schema 15): for a blocked thread
state with a stack the agent sends the interval and an off-CPU sample (end, end - start, stack);
the store keeps such a sample only as its interval and gives it back from there. Every sample
still answers once, with its value, in flame graphs, top, samples over time and pprof, from raw
chunks and from rollups, at both time resolutions; one that has no interval to pair with (a second
identical sample, another thread's, another stack's, another time's) stays a sample; an interval
with no sample stands for none, and the mark that says so never shows in interval answers. A
schema-14 store's interval chunks stand for no sample (their samples are in its sample chunks)."""
import os
import sqlite3

from gpuscope_server import (Server, check, check_migrated, encode, find, migrated_db, now_ns,
                             pprof_values, running, skip_if_unbuilt, wait)

skip_if_unbuilt()
MS = 10**6
L = "pid=1,comm=app,tid={tid}"


def script(t0):
    """The batch's lines, and what the off-CPU answers must hold: {leaf: value} at ns and µs,
    how many samples the batch has, how many pair with an interval."""
    t = t0 + 1000 * MS + 123
    lines = ["node n1",
             # stacks in the order first named: main;a 0, main;b 1, main;c 2, main;d 3
             f"sample {t} offcpu_ns 1499 {L.format(tid=1)} main;a",            # paired
             f"sample {t + 5 * MS} offcpu_ns 2500 {L.format(tid=1)} main;b",   # twice: one pairs
             f"sample {t + 5 * MS} offcpu_ns 2500 {L.format(tid=1)} main;b",
             f"sample {t + 7 * MS} offcpu_ns 700 {L.format(tid=1)} main;c",    # no interval
             f"sample {t + 9 * MS} offcpu_ns 900 {L.format(tid=1)} main;d",    # interval: tid 2
             f"sample {t + 11 * MS} offcpu_ns 4000 {L.format(tid=1)} main;d",  # paired, no reason
             f"sample {t + 13 * MS} cpu 1 {L.format(tid=1)} main;x",
             f"interval thread_state {L.format(tid=1)} {t - 1499} {t} "
             "state=blocked,reason=io,stack_id=0",
             f"interval thread_state {L.format(tid=1)} {t + 5 * MS - 2500} {t + 5 * MS} "
             "state=blocked,reason=futex,stack_id=1",
             f"interval thread_state {L.format(tid=2)} {t + 9 * MS - 900} {t + 9 * MS} "
             "state=blocked,reason=io,stack_id=3",                             # no sample
             f"interval thread_state {L.format(tid=1)} {t + 20 * MS} {t + 21 * MS} "
             "state=blocked,reason=io,stack_id=2",                             # no sample
             f"interval thread_state {L.format(tid=1)} {t + 11 * MS - 4000} {t + 11 * MS} "
             "state=blocked,stack_id=3",
             f"interval thread_state {L.format(tid=1)} {t + 30 * MS} {t + 31 * MS} "
             "state=running,cpu=1"]
    ns = {"a": 1499, "b": 5000, "c": 700, "d": 4900}
    # µs: the whole µs between the floors of t - v and t (t is 123 ns past a µs)
    us = {"a": 2000, "b": 6000, "c": 1000, "d": 1000 + 4000}
    return lines, ns, us, 6, 3


def answers(s, rng):
    fg = s.get_json(f"/api/v1/flamegraph?{rng}&kind=offcpu_ns")
    main = find(fg["root"], "main")
    leaves = {c["name"]: c["value"] for c in main["children"]} if main else {}
    top = {f["name"]: f["self"] for f in
           s.get_json(f"/api/v1/top?{rng}&kind=offcpu_ns&limit=100")["functions"]}
    series = s.get_json(f"/api/v1/samples?{rng}&kind=offcpu_ns&buckets=1")["series"]
    code, body, _ = s.request(f"/api/v1/pprof?{rng}&kind=offcpu_ns")
    check(code == 200, f"pprof {code}")
    return fg["total"], leaves, top, sum(x["total"] for x in series), sum(pprof_values(body))


def check_answers(s, t0, want, what, rollups=True):
    raw = f"from={(t0 + 999 * MS) / 1e9:.3f}&to={(t0 + 1200 * MS) / 1e9:.3f}"
    mins = f"from={t0 / 1e9:.3f}&to={(t0 + 120 * 10**9) / 1e9:.3f}"
    total = sum(want.values())
    check(wait(lambda: s.metric("gpuscope_server_rollup_lag_chunks") == 0), f"{what}: rolled up")
    for rng in (raw, mins) if rollups else (raw,):  # raw chunks and intervals; minute rollups
        fg, leaves, top, sm, pp = answers(s, rng)
        check(leaves == want, f"{what} {rng}: leaves {leaves} != {want}")
        check(fg == total and sm == total and pp == total,
              f"{what} {rng}: totals {fg} {sm} {pp} != {total}")
        check(all(top.get(k) == v for k, v in want.items()), f"{what} {rng}: top {top}")


def main():
    t0 = (now_ns() // (60 * 10**9) - 3) * 60 * 10**9
    lines, ns, us, nsamples, npaired = script(t0)
    batch = encode("\n".join(lines) + "\n")
    for res, want in (("ns", ns), ("us", us)):
        s = Server(args=["--time-resolution", res])
        with running(s):
            code, body = s.ingest(batch)
            check(code == 204, f"{res}: ingest {code} {body}")
            check_answers(s, t0, want, res)
            check(s.metric("gpuscope_server_store_samples_held") == nsamples + 1,
                  f"{res}: every sample held, the paired ones too")
            check(s.metric("gpuscope_server_store_offcpu_samples_as_intervals_total") ==
                  npaired and
                  s.metric("gpuscope_server_store_offcpu_unpaired_intervals_total") == 2,
                  f"{res}: paired and unpaired counted on /metrics")
            rng = f"from={(t0 + 999 * MS) / 1e9:.3f}&to={(t0 + 1200 * MS) / 1e9:.3f}"
            ivs = s.get_json(f"/api/v1/intervals?kind=thread_state&{rng}")["intervals"]
            check(len(ivs) == 6, f"{res}: every interval: {ivs}")
            check(all(not any(k.startswith("__") for k in x["attrs"]) for x in ivs),
                  f"{res}: no internal attr shown: {[x['attrs'] for x in ivs]}")
            check(sorted(x["attrs"].get("reason", "") for x in ivs) ==
                  ["", "", "futex", "io", "io", "io"], f"{res}: attrs kept")
        db = sqlite3.connect(os.path.join(s.data, "gpuscope.db"))
        kept = db.execute("SELECT coalesce(sum(n), 0) FROM chunks WHERE kind = 1").fetchone()[0]
        paired = db.execute("SELECT coalesce(sum(n), 0) FROM offcpu_ivs").fetchone()[0]
        db.close()
        check(paired == npaired and kept == nsamples - npaired,
              f"{res}: {paired} samples kept as intervals, {kept} as samples")
        with running(s):  # after a restart, from what is on disk
            check_answers(s, t0, want, f"{res} restarted")
    # The last store made to look like schema 14's: no count table, no marks in meta. Its
    # interval chunks then stand for no sample (a schema-14 store has those samples in its
    # sample chunks; this one lost them, so only the unpaired ones answer), a new batch's do.
    db = sqlite3.connect(os.path.join(s.data, "gpuscope.db"))
    db.executescript("DROP TABLE offcpu_ivs;"
                     "DELETE FROM meta WHERE key IN ('offcpu_iv_after', 'rollup_ivwm');"
                     "UPDATE meta SET value = 14 WHERE key = 'schema';")
    db.close()
    with running(s):
        check_migrated(s, 14)
        # raw only: its rollups were made from the samples it lost
        check_answers(s, t0, {"b": 3000, "c": 1000, "d": 1000}, "schema 14", rollups=False)
        t1 = t0 + 60 * 10**9
        lines, _, us1, _, _ = script(t1)
        code, body = s.ingest(encode("\n".join(lines) + "\n"))
        check(code == 204, f"ingest {code} {body}")
        check_answers(s, t1, us1, "after the migration")
    db = migrated_db(s)
    db.close()
    large_batch()
    print("PASS off-CPU samples kept as their blocked intervals: every answer the same, unpaired"
          " ones kept as samples, marks hidden, a schema-14 store's intervals stand for none; a"
          " batch stored in parts keeps its threads whole")


def large_batch():
    """A batch over 100 000 records is stored in parts (batch_split()): whole label sets go to
    each part, so every thread's samples still pair with its intervals."""
    t0 = (now_ns() // (60 * 10**9) - 5) * 60 * 10**9
    lines, want = ["node big"], 0
    for tid in range(64):
        for k in range(900):
            end = t0 + k * 10**8 + tid * 1000 + 777
            lines.append(f"sample {end} offcpu_ns 5000000 {L.format(tid=tid)} main;w{tid % 4}")
            lines.append(f"interval thread_state {L.format(tid=tid)} {end - 5000000} {end} "
                         f"state=blocked,stack_id={tid % 4}")
            want += 5000000
    s = Server()
    with running(s):
        code, body = s.ingest(encode("\n".join(lines) + "\n", "zstd"), "zstd")
        check(code == 204, f"large batch: {code} {body[:200]!r}")
        check(s.metric("gpuscope_server_ingest_parts_total") >= 2, "stored in parts")
        check(wait(lambda: s.metric("gpuscope_server_rollup_lag_chunks") == 0), "rolled up")
        fg = s.get_json(f"/api/v1/flamegraph?from={t0 / 1e9 - 1:.3f}&to={t0 / 1e9 + 100:.3f}"
                        "&kind=offcpu_ns")
        check(fg["total"] == want, f"every sample answers: {fg['total']} != {want}")
    db = sqlite3.connect(os.path.join(s.data, "gpuscope.db"))
    paired = db.execute("SELECT coalesce(sum(n), 0) FROM offcpu_ivs").fetchone()[0]
    db.close()
    check(paired == 64 * 900, f"every sample kept as its interval across the parts: {paired}")


if __name__ == "__main__":
    main()
