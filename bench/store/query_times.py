#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Query latency of two or more servers holding the same recording (bench/store/compare.sh keeps
them running with KEEP_RUNNING=1, or any servers started on copies of replay.sh's KEEP stores):
flame graphs and top of both CPU and off-CPU time over the whole recording (rollups), over its
last 5 minutes and over 30 s inside it (raw chunks; schema 15 also reads the off-CPU samples
its blocked intervals stand for), and samples over time of the whole recording in 120
buckets. Each question is asked of every server in turn, ROUNDS times, interleaved; prints the
median HTTP round trip (ms) of each and each server's ratio to the first.
Usage: query_times.py [--rounds N] URL URL..."""
import json
import statistics
import sys
import time
import urllib.request


def get(url):
    with urllib.request.urlopen(url, timeout=300) as r:
        return r.read()


def span(url):
    """The recording's first and last ns (its one node's extent)."""
    nodes = json.loads(get(url + "/api/v1/nodes"))["nodes"]
    first = min(n["first_ms"] for n in nodes) * 10**6
    last = max(n["last_ms"] for n in nodes) * 10**6
    return int(first), int(last)


def main():
    args = sys.argv[1:]
    rounds = 5
    if args[:1] == ["--rounds"]:
        rounds = int(args[1])
        args = args[2:]
    urls = args
    first, last = span(urls[0])
    mid = first + (last - first) // 2

    def rng(a, b):
        return f"from={a / 1e9:.3f}&to={b / 1e9:.3f}"

    ranges = {"whole": rng(first, last + 10**9), "last 5 min": rng(last - 300 * 10**9, last),
              "30 s": rng(mid, mid + 30 * 10**9)}
    questions = []
    for name, r in ranges.items():
        for kind in ("cpu", "offcpu_ns"):
            questions.append((f"flamegraph {kind} {name}", f"/api/v1/flamegraph?{r}&kind={kind}"))
            questions.append((f"top {kind} {name}", f"/api/v1/top?{r}&kind={kind}&limit=40"))
    for kind in ("cpu", "offcpu_ns"):
        questions.append((f"samples {kind} whole",
                          f"/api/v1/samples?{ranges['whole']}&kind={kind}&buckets=120"))
    print(f"{'question':34}" + "".join(f"{'server ' + str(i):>12}" for i in range(len(urls))) +
          "".join(f"{'ratio ' + str(i):>10}" for i in range(1, len(urls))))
    for name, path in questions:
        t = [[] for _ in urls]
        for _ in range(rounds):
            for i, u in enumerate(urls):
                t0 = time.perf_counter()
                get(u + path)
                t[i].append((time.perf_counter() - t0) * 1e3)
        med = [statistics.median(x) for x in t]
        print(f"{name:34}" + "".join(f"{m:12.1f}" for m in med) +
              "".join(f"{m / med[0]:10.2f}" for m in med[1:]))


if __name__ == "__main__":
    main()
