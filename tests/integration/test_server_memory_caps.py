#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Memory a client can make the server hold, capped by configuration (SQLite store):
--max-nodes 3: a fourth node's batches are answered 429 and counted, the three known still
stored; --max-label-set-memory 4MiB: two nodes inventing label sets of an 8 KB comm (the issue's
2 x 10 000 x 8 KB took 290 MiB) send 64 MiB of them: the label sets held stay within the cap
(gauge), RSS grows by less than 40 MiB (without the cap +49 MiB at half the count), the batches are answered 204 (their refused label sets'
records dropped and counted) or 429 once nothing of a batch fits, known label sets are still
stored past the cap, and every acknowledged record is stored or counted as dropped."""
import time

from gpuscope_server import Server, check, encode, now_ns, run_test, skip_if_unbuilt

skip_if_unbuilt()
MIB = 1 << 20


def rss_kb(pid):
    with open(f"/proc/{pid}/status") as f:
        return int(next(ln for ln in f if ln.startswith("VmRSS:")).split()[1])


def nodes():
    s = Server(args=["--max-nodes", "3"]).start()
    try:
        t = now_ns() - 60 * 10**9
        for n in ("a", "b", "c"):
            code, b = s.ingest(encode(f"node {n}\nsample {t} cpu 1 comm=x main\n"))
            check(code == 204, f"node {n}: {code} {b[:200]!r}")
        code, b = s.ingest(encode(f"node d\nsample {t} cpu 1 comm=x main\n"))
        check(code == 429 and b"--max-nodes" in b, f"a fourth node: {code} {b[:200]!r}")
        code, b = s.ingest(encode(f"node a\nsample {t + 1} cpu 1 comm=y main\n"))
        check(code == 204, f"a known node past the limit: {code} {b[:200]!r}")
        check(s.metric("gpuscope_server_nodes_refused_total") == 1, "refusal counted")
        check(s.metric("gpuscope_server_nodes_held") == 3, "3 nodes held")
        check(s.metric('gpuscope_server_rejected_total{reason="cardinality"}') == 1, "429 counted")
        fg = s.get_json("/api/v1/flamegraph?since=1h")
        check(fg["total"] == 4, f"the known nodes' 4 samples stored: {fg['total']}")
        print("nodes: the 4th node refused 429, known nodes stored")
    finally:
        s.stop()


def label_sets():
    cap = 4 * MIB
    s = Server(args=["--max-label-set-memory", "4MiB"]).start()
    try:
        t = now_ns() - 600 * 10**9
        big = "c" * 8000
        code, _ = s.ingest(encode(f"node x\nsample {t} cpu 1 comm=keep main\n"))
        check(code == 204, "warm")
        base = rss_kb(s.proc.pid)
        acked = 1
        codes = []
        k = 0
        for rnd in range(16):
            for n in ("x", "y"):
                lines = [f"node {n}"]
                for _ in range(250):
                    lines.append(f"sample {t + k * 1000} cpu 1 comm={big}{k},pid={k} main")
                    k += 1
                code, b = s.ingest(encode("\n".join(lines) + "\n"))
                codes.append(code)
                check(code in (204, 429), f"batch: {code} {b[:200]!r}")
                if code == 204:
                    acked += 250
                else:
                    check(b"--max-label-set-memory" in b, f"429 names the limit: {b[:200]!r}")
        held = s.metric("gpuscope_server_label_set_memory_bytes")
        grown = (rss_kb(s.proc.pid) - base) / 1024
        print(f"label sets: {k} new of 8 KB sent, answers {codes}, held {held / MIB:.2f} MiB, "
              f"RSS +{grown:.1f} MiB")
        check(held <= cap, f"label sets held {held}, cap {cap}")
        check(held > cap / 2, f"the cap is used: {held}")
        check(429 in codes, "batches of nothing but new label sets refused past the cap")
        check(grown < 40, f"RSS grew {grown:.1f} MiB")
        code, b = s.ingest(encode(f"node x\nsample {t + 1} cpu 1 comm=keep main\n"))
        check(code == 204, f"a known label set past the cap: {code} {b[:200]!r}")
        acked += 1
        dropped = s.metric('gpuscope_server_cardinality_dropped_total{what="records"}')
        fg = s.get_json("/api/v1/flamegraph?since=1h")
        print(f"acked {acked} records: stored {fg['total']}, dropped (counted) {dropped:.0f}")
        check(fg["total"] + dropped == acked, f"stored {fg['total']} + dropped {dropped} != {acked}")
        check(dropped > 0, "refused label sets counted")
    finally:
        s.stop()


def label_pages():
    """label/comm/values?limit=100000 over 8 MB of values: pages of at most 4 MiB (and one
    value) that together hold every value once."""
    s = Server().start()
    try:
        t = now_ns() - 600 * 10**9
        lines = ["node p"] + [f"sample {t + k} cpu 1 comm={k:04d}{'v' * 8000} main"
                              for k in range(1000)]
        code, b = s.ingest(encode("\n".join(lines) + "\n"))
        check(code == 204, f"ingest: {code} {b[:200]!r}")
        seen, offset, pages, biggest = [], 0, 0, 0
        while True:
            code, body, _ = s.request(f"/api/v1/label/comm/values?since=1h&limit=100000"
                                      f"&offset={offset}")
            check(code == 200, f"page: {code} {body[:200]!r}")
            biggest = max(biggest, len(body))
            check(len(body) <= 4 * MIB + 8100, f"a page of {len(body)} bytes")
            import json
            v = json.loads(body)
            seen += v["values"]
            pages += 1
            if "next_offset" not in v:
                break
            check(v["next_offset"] == offset + len(v["values"]), f"next_offset {v['next_offset']}")
            offset = v["next_offset"]
        print(f"label values: {pages} pages, largest {biggest / MIB:.2f} MiB, {len(seen)} values")
        check(pages >= 2, "the 8 MB of values took more than one page")
        check(len(seen) == 1000 and len(set(seen)) == 1000, f"{len(seen)} values")
    finally:
        s.stop()


def main():
    nodes()
    label_sets()
    label_pages()
    print("PASS")


run_test(main)
