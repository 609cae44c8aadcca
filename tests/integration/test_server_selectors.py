#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Selectors that cannot stall the server: the probe's nested repetition against a 4 KiB label
value answers within 1 s (or is refused 422), four of them in parallel while uploads go on and
are answered promptly (matching holds no lock ingest needs); Prometheus regex semantics
(anchored, RE2 syntax) and the PCRE-only constructs refused 400."""
import json
import threading
import time
import urllib.parse

from gpuscope_server import Server, check, encode, now_ns, running, skip_if_unbuilt

skip_if_unbuilt()
q = urllib.parse.quote
T = now_ns() - 120 * 10**9
LONG = "a" * 4096


def every_endpoint():
    """A regex past its limits is 422 on every endpoint, never 200 with a partial answer (the
    issue's probe: processes and samples answered 0 where the truth is 10); by= empty or %00 on
    efficiency is 400, not a silent namespace."""
    with running(Server(token="tok")) as s:
        comm = "x" * 10 + "c" + "a" * 4085
        lines = ["node every"] + [f"sample {T + i} cpu 1 pid=7,comm={comm} main;w"
                                  for i in range(10)]
        code, _ = s.ingest(encode("\n".join(lines) + "\n"))
        check(code == 204, "upload")
        rng = f"from={(T - 10**9) / 1e9:.3f}&to={(T + 10**9) / 1e9:.3f}"
        good = q('{comm=~"x.*"}')
        code, body, _ = s.request(f"/api/v1/processes?{rng}&selector={good}")
        check(code == 200 and json.loads(body)["total"] == 10,
              f"the truth: 10 samples of the process: {body[:200]!r}")
        bad = q('{comm=~"(.{1,100}){1,100}c.*"}')
        for path in ("flamegraph", "diff", "top", "pprof", "processes", "samples",
                     "label/comm/values", "labels"):
            code, body, _ = s.request(f"/api/v1/{path}?{rng}&selector={bad}")
            check(code == 422, f"{path}: a regex past its limits answers 422: {code} "
                  f"{body[:200]!r}")
        for by in ("", "%00"):
            code, body, _ = s.request(f"/api/v1/efficiency?{rng}&by={by}")
            check(code == 400 and b"'by' is empty" in body,
                  f"efficiency by={by!r}: 400: {code} {body[:200]!r}")
        code, body, _ = s.request(f"/api/v1/efficiency?{rng}&by=no%20such")
        check(code == 400, f"efficiency by='no such': 400: {code}")
    print("every endpoint: 422 on a regex past its limits; by= empty or %00: 400")


def main():
    every_endpoint()
    with running(Server(token="tok")) as s:
        lines = ["node sel"]
        for i in range(50):
            lines.append(f"sample {T + i} cpu 1 pid={i},comm=c{i} main;f{i}")
        lines.append(f"sample {T + 99} cpu 1 pid=999,comm={LONG} main;long")
        code, _ = s.ingest(encode("\n".join(lines) + "\n"))
        check(code == 204, "upload")
        rng = f"from={(T - 10**9) / 1e9:.3f}&to={(T + 10**9) / 1e9:.3f}"

        def flame(sel):
            t0 = time.monotonic()
            code, body, _ = s.request(f"/api/v1/flamegraph?{rng}&selector={q(sel)}")
            return code, body, time.monotonic() - t0

        # semantics: anchored both ends, RE2 syntax
        for sel, total in [('{comm=~"c1.*"}', 11), ('{comm=~"c1"}', 1), ('{comm=~"1"}', 0),
                           ('{comm!~"c.*"}', 1), ('{comm=~"c(1|2)"}', 2),
                           ('{comm=~"c[0-9]{2}"}', 40), ('{comm=~"(?i)C1"}', 1),
                           ('{comm=~"a+"}', 1), ('{pid=~"9.."}', 1)]:
            code, body, _ = flame(sel)
            check(code == 200 and json.loads(body)["total"] == total,
                  f"{sel}: {code} {body[:120]!r}, want total {total}")
        for sel in ['{comm=~"(a)\\\\1"}', '{comm=~"a(?=b)"}', '{comm=~"(?<!x)a"}',
                    '{comm=~"a*+"}', '{comm=~"(?>a)"}', '{comm=~"("}', '{comm=~"a**"}']:
            code, body, _ = flame(sel)
            check(code == 400, f"{sel} refused: {code} {body[:160]!r}")
        _, _, base = flame('{comm="c1"}')

        # the probe's regex and a failing variant (catastrophic backtracking in any
        # backtracking engine): answered within 1 s (plus this machine's base latency)
        for sel in ['{comm=~"(.{1,100}){1,100}"}', '{comm=~"(.{1,100}){1,100}[^a]"}',
                    '{comm=~"(a|aa)*[bc]"}', '{comm=~"(a+)+[bc]"}']:
            code, body, dt = flame(sel)
            check(code in (200, 422), f"{sel}: {code} {body[:200]!r}")
            check(dt < 1.0 + base, f"{sel}: answered in {dt:.2f} s (base {base:.2f} s)")
            print(f"{sel}: HTTP {code} in {dt * 1000:.0f} ms")
            if code == 422:
                check(b"matching limits" in body, "422 says why")
        check(s.metric('gpuscope_server_rejected_total{reason="selector_limit"}') == 3,
              "the three backtracking regexes refused and counted")

        # four expensive queries in parallel, uploads go on meanwhile
        stop = threading.Event()
        qtimes, utimes = [], []

        def querier():
            while not stop.is_set():
                _, _, dt = flame('{comm=~"(.{1,100}){1,100}[^a]"}')
                qtimes.append(dt)

        qs = [threading.Thread(target=querier) for _ in range(4)]
        for t in qs:
            t.start()
        for i in range(20):
            body = encode(f"node up{i}\nsample {T + 1000 + i} cpu 1 pid={i},comm=u main;u\n")
            t0 = time.monotonic()
            code, _ = s.ingest(body)
            utimes.append(time.monotonic() - t0)
            check(code == 204, f"upload {i} during regex queries: {code}")
        stop.set()
        for t in qs:
            t.join()
        worst_u, worst_q = max(utimes), max(qtimes)
        print(f"20 uploads beside 4 regex queriers ({len(qtimes)} queries): slowest upload "
              f"{worst_u * 1000:.0f} ms, slowest query {worst_q * 1000:.0f} ms")
        check(worst_u < 2.0 + 2 * base, f"uploads answered promptly: slowest {worst_u:.2f} s")
        check(worst_q < 2.0 + 2 * base, f"regex queries bounded: slowest {worst_q:.2f} s")
        fg = json.loads(flame('{comm="u"}')[1])
        check(fg["total"] == 20, f"all 20 uploads stored: {fg['total']}")
    print("ok")


main()
