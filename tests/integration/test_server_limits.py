#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Bounded decoding and time range on a real gpuscope-server: the 58 KB gzip label-set bomb
(30 M empty label sets) and its sample-group and unknown-field cousins answer 413 quickly with
peak RSS growth under 64 MB; 64 labels of a 64 KiB string refused before the store; timestamps
outside [now - retention, now + 1 day] refused 400; every refusal counted and nothing stored;
a normal upload afterwards still stored; per-node cardinality limits (new label sets and stacks
per hour) answer 429."""
import gzip
import json
import time

from gpuscope_server import Server, check, encode, now_ns, running, skip_if_unbuilt

skip_if_unbuilt()
NS = 10**9


def varint(v):
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def field(num, wt, payload=b""):
    tag = varint(num << 3 | wt)
    if wt == 2:
        return tag + varint(len(payload)) + payload
    return tag + payload


HEAD = (field(1, 0, varint(1)) + field(2, 2, b"") + field(2, 2, b"n") + field(3, 0, varint(1))
        + field(4, 0, varint(12345)))


def status_kb(pid, key):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0


def main():
    with running(Server(args=["--max-body", "64MiB", "--retention", "7d"])) as s:
        pid = s.proc.pid
        code, _ = s.ingest(encode(f"node warm\nsample {now_ns()} cpu 1 a=b f\n"))
        check(code == 204, "warm-up upload")
        hwm0 = status_kb(pid, "VmHWM")
        bombs = [
            ("30 M empty label sets (the 58 KB bomb)", HEAD + field(8, 2) * 30_000_000, "label sets"),
            ("30 M empty sample groups", HEAD + field(9, 2) * 30_000_000, "decoding would take"),
            ("30 M unknown fields", HEAD + field(15, 0, b"\x01") * 30_000_000, "decoding would take"),
            ("a stack 2000 frames deep",
             HEAD + field(7, 2, field(1, 2, b"\x00" * 2000)), "deeper than"),
        ]
        for what, raw, limit in bombs:
            body = gzip.compress(raw, 6)
            t0 = time.monotonic()
            code, resp = s.ingest(body, "gzip")
            dt = time.monotonic() - t0
            check(code == 413, f"{what} ({len(body)} bytes gzip): HTTP {code} {resp[:200]!r}")
            msg = json.loads(resp)["error"]
            check(limit in msg, f"{what}: the answer names the limit: {msg!r}")
            check(dt < 10, f"{what}: answered in {dt:.1f} s")
            print(f"{what}: {len(raw) >> 20} MiB raw, {len(body)} B gzip -> 413 in {dt:.2f} s: {msg}")
        # 200 label sets x 64 labels, each value the same 64 KiB string: resolved, 4 MiB a set
        big = b"v" * 65535
        strings = field(2, 2, b"") + field(2, 2, b"n") + field(2, 2, big)
        strings += b"".join(field(2, 2, b"k%02d" % i) for i in range(64))
        pairs = b"".join(varint(3 + i) + varint(2) for i in range(64))
        raw = (field(1, 0, varint(1)) + strings + field(3, 0, varint(1)) +
               field(4, 0, varint(777)) + field(8, 2, field(1, 2, pairs)) * 200)
        body = gzip.compress(raw)
        code, resp = s.ingest(body, "gzip")
        check(code == 413 and b"bytes of names and values" in resp,
              f"64 labels of 64 KiB ({len(body)} B gzip): {code} {resp[:200]!r}")
        grown = status_kb(pid, "VmHWM") - hwm0
        check(grown < 64 * 1024, f"peak RSS grew {grown} KiB over the bombs (bound 64 MiB)")
        print(f"peak RSS growth over all bombs: {grown} KiB")
        check(s.metric('gpuscope_server_rejected_total{reason="over_limit"}') == 5,
              "every limit refusal counted as over_limit")

        # time range: year 2262, an hour-long future, an interval [0, INT64_MAX]
        now = now_ns()
        for what, script in [
            ("a sample in 2262", f"node t\nsample {(2**63 - 1) - 10**9} cpu 1 a=b f\n"),
            ("a sample 2 days ahead", f"node t\nsample {now + 2 * 86400 * NS} cpu 1 a=b f\n"),
            ("a sample 8 days old", f"node t\nsample {now - 8 * 86400 * NS} cpu 1 a=b f\n"),
            ("an interval [0, INT64_MAX]", f"node t\ninterval gpu_busy gpu=0 0 {2**63 - 1} -\n"),
            ("a metric point at 0", "node t\nmetric temp gpu=0 0 1\n"),
        ]:
            code, resp = s.ingest(encode(script))
            check(code == 400 and b"outside" in resp, f"{what}: {code} {resp[:200]!r}")
        check(s.metric('gpuscope_server_rejected_total{reason="time_out_of_range"}') == 5,
              "time refusals counted")
        nodes = s.get_json("/api/v1/nodes")["nodes"]
        check([n["node"] for n in nodes] == ["warm"], f"nothing of the refused stored: {nodes}")
        code, _ = s.ingest(encode(f"node ok\nsample {now - 3600 * NS} cpu 1 a=b f\n"
                                  f"sample {now + 3600 * NS} cpu 1 a=b f\n"))
        check(code == 204, f"within [now - retention, now + 1 day]: {code}")
        check(s.metric("gpuscope_server_ingest_batches_total") == 2, "two batches stored")
    cardinality()
    print("ok")


def cardinality():
    """Per node and hour: past the new-stacks limit a batch is refused 429; past the new-label-sets
    limit the known label sets' records (and the new ones' up to the limit) are stored and only
    the further new label sets are refused, their records dropped and counted; a batch with
    nothing left is refused 429 (the agent retries it later)."""
    # the counts are per clock hour: a new hour between two ingests would start them again
    left = 3600 - time.time() % 3600
    if left < 30:
        time.sleep(left + 1)
    s = Server(args=["--max-new-label-sets-per-hour", "5", "--max-new-stacks-per-hour", "50"]).start()
    now = now_ns()

    def batch(node, pids, stacks=1):
        lines = [f"node {node}"]
        for p in pids:
            for k in range(stacks):
                lines.append(f"sample {now - 10**9} cpu 1 pid={p} main;f{p}_{k}")
            lines.append(f"interval thread_state pid={p} {now - 10**9} {now} state=running")
        return encode("\n".join(lines) + "\n")
    try:
        check(s.ingest(batch("a", [1, 2, 3]))[0] == 204, "3 new label sets")
        code, body = s.ingest(batch("a", [4, 5, 6]))
        check(code == 204, f"3 more (6 > 5): 4 and 5 stored, 6 refused: {code} {body[:160]!r}")
        code, body = s.ingest(batch("a", [7]))
        check(code == 429 and b"cardinality limit" in body, f"only a new one, none left: {code} {body[:160]!r}")
        check(s.ingest(batch("a", [1, 2, 3, 4, 5]))[0] == 204, "known ones")
        check(s.ingest(batch("a", [1, 8]))[0] == 204, "a known one stored, a new one refused")
        check(s.ingest(batch("b", [1, 2, 3]))[0] == 204, "another node has its own count")
        code, body = s.ingest(batch("b", [1], stacks=60))
        check(code == 429 and b"stacks" in body, f"60 new stacks: {code} {body[:160]!r}")
        check(s.metric('gpuscope_server_rejected_total{reason="cardinality"}') == 2, "counted")
        check(s.metric('gpuscope_server_cardinality_dropped_total{what="label_sets"}') == 2,
              "refused label sets counted (6, 8)")
        check(s.metric('gpuscope_server_cardinality_dropped_total{what="records"}') == 4,
              "their records counted (a sample and an interval each)")
        fg = s.get_json("/api/v1/flamegraph?since=1h")
        check(fg["total"] == 14, f"nothing of the refused stored: {fg['total']}")
        pids = s.get_json("/api/v1/label/pid/values?since=1h&selector=%7Bnode%3D%22a%22%7D")["values"]
        check(sorted(pids) == ["1", "2", "3", "4", "5"], f"label sets of node a: {pids}")
        iv = s.get_json("/api/v1/intervals?kind=thread_state&since=1h&selector=%7Bnode%3D%22a%22%7D")
        check(sorted(x["labels"]["pid"] for x in iv["intervals"]) ==
              ["1", "1", "1", "2", "2", "3", "3", "4", "4", "5", "5"], f"intervals of node a: {iv}")
        check(s.get_json("/api/v1/flamegraph?since=1h&selector=%7Bpid%3D%226%22%7D")["total"] == 0,
              "no sample of a refused label set")
    finally:
        s.stop()

main()
