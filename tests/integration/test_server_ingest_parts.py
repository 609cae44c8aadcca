#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""A large batch does not stall other agents: 400 000 samples are stored in parts (each its own
group commit) while small uploads beside it are answered in a fraction of its store time; the
same large batch sent again is a duplicate part by part (stored once); everything is queryable."""
import threading
import time

from gpuscope_server import Server, check, encode, now_ns, running, skip_if_unbuilt

skip_if_unbuilt()
N = 400_000
T = now_ns() - 1800 * 10**9


def big_script(node):
    lines = [f"node {node}"]
    for i in range(N):
        lines.append(f"sample {T + i * 1000} cpu 1 pid={i % 8},comm=w{i % 8} "
                     f"main;step{i % 50};leaf{i % 200}")
    return "\n".join(lines) + "\n"


def main():
    with running(Server()) as s:
        big1 = encode(big_script("big1"), "zstd")
        t0 = time.monotonic()
        code, body = s.ingest(big1, "zstd")
        t_big = time.monotonic() - t0
        check(code == 204, f"large batch: {code} {body[:200]!r}")
        parts = s.metric("gpuscope_server_ingest_parts_total")
        check(parts >= 4, f"stored in parts: {parts}")
        print(f"{N} samples ({len(big1)} B zstd) stored in {t_big:.2f} s, {parts:.0f} parts")
        rng = f"from={(T - 10**9) / 1e9:.3f}&to={(T + N * 1000 + 10**9) / 1e9:.3f}"
        fg = s.get_json(f"/api/v1/flamegraph?{rng}&selector=" + '{node="big1"}')
        check(fg["total"] == N, f"all {N} samples stored: {fg['total']}")
        code, _ = s.ingest(big1, "zstd")
        check(code == 204, "the same batch again: accepted")
        fg = s.get_json(f"/api/v1/flamegraph?{rng}&selector=" + '{node="big1"}')
        check(fg["total"] == N, f"... as a duplicate, part by part: {fg['total']}")
        check(s.metric("gpuscope_server_duplicate_batches_total") >= parts,
              "every part a duplicate")

        big2 = encode(big_script("big2"), "zstd")
        done = {}

        def upload_big():
            t0 = time.monotonic()
            done["code"] = s.ingest(big2, "zstd")[0]
            done["t"] = time.monotonic() - t0
            done["end"] = time.monotonic()

        th = threading.Thread(target=upload_big)
        th.start()
        lat, ends = [], []
        i = 0
        while th.is_alive() or i < 5:
            body = encode(f"node small\nsample {T + i} cpu 1 pid=1,comm=s main;small\n")
            t0 = time.monotonic()
            code, _ = s.ingest(body)
            lat.append(time.monotonic() - t0)
            ends.append(time.monotonic())
            check(code == 204, f"small upload {i} beside the large one: {code}")
            i += 1
            time.sleep(0.05)
        th.join()
        check(done.get("code") == 204, f"second large batch: {done}")
        beside = [l for l, e in zip(lat, ends) if e < done["end"]]
        worst = max(lat)
        print(f"{len(beside)} small uploads answered while the large one was stored "
              f"({done['t']:.2f} s); slowest small upload {worst * 1000:.0f} ms")
        check(len(beside) >= 2, "small uploads completed while the large batch was stored")
        check(worst < max(1.0, 0.6 * done["t"]),
              f"no small upload waited for the whole large batch ({worst:.2f} s vs {done['t']:.2f} s)")
        fg = s.get_json(f"/api/v1/flamegraph?{rng}&selector=" + '{node="big2"}')
        check(fg["total"] == N, f"second large batch whole: {fg['total']}")
    print("ok")


main()
