#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""A scrape of /metrics never runs the --export-queries regexes on an HTTP event loop, and a
slow query is cut at the scrape's time budget (--export-timeout) and counted: the server runs
one event loop (--threads 1) and a query whose function regex costs ~1 ms per frame over 3 800
frames (4-8 s of matching in all); while scrapes follow one another /healthz and a query API
call on that loop answer within 1 s (before: the whole evaluation, on the loop), every scrape
answers within the budget plus 2 s, the query is cut and counted, and once the stacks it
classified add up (they are kept across cuts) its counter holds every sample: nothing of the
cut windows is lost."""
import os
import threading
import time

from gpuscope_server import Server, check, encode, now_ns, run_test, skip_if_unbuilt

skip_if_unbuilt()
STACKS, DEPTH = 200, 20
BUDGET_S = 0.3


def slow_frame(s, d):
    # 13 '_'-separated parts before "_x_q": '(.*_)*x' backtracks ~1 ms on it, under the
    # match limits (a name without 'x' fails at once: the start-up probe passes it).
    return f"f{s:03d}{d:02d}_b_c_d_e_f_g_h_i_j_k_l_m_x_q"


def main():
    srv = Server(args=["--threads", "1", "--export-queries", qfile, "--export-timeout",
                       f"{int(BUDGET_S * 1000)}ms", "--settle", "1s"])
    srv.start()
    try:
        run(srv)
    finally:
        srv.stop()


def metric_of(body, key):
    for line in body.splitlines():
        k, _, v = line.rpartition(" ")
        if k == key:
            return float(v)
    return None


def run(srv):
    t = now_ns()
    lines = ["node exp"]
    for s in range(STACKS):
        frames = ["x"] + [slow_frame(s, d) for d in range(DEPTH - 1)]
        lines.append(f"sample {t + s * 1000} cpu 1 job=x {';'.join(frames)}")
    code, body = srv.ingest(encode("\n".join(lines) + "\n"))
    check(code == 204, f"ingest: {code} {body[:200]!r}")
    time.sleep(1.5)  # past --settle: the samples are in the next window

    scrapes, stop = [], threading.Event()

    def scraper():
        while not stop.is_set():
            t0 = time.monotonic()
            code, body, _ = srv.request("/metrics")
            scrapes.append((time.monotonic() - t0, code, body.decode()))

    th = threading.Thread(target=scraper)
    th.start()
    loop_worst, probes, value, cuts = 0.0, 0, None, 0
    try:
        end = time.monotonic() + 90
        while time.monotonic() < end:
            for path in ("/healthz", "/api/v1/labels?since=1h"):
                t0 = time.monotonic()
                code, _, _ = srv.request(path)
                dt = time.monotonic() - t0
                check(code == 200, f"{path}: {code}")
                loop_worst = max(loop_worst, dt)
                probes += 1
            if scrapes:
                last = scrapes[-1][2]
                value = metric_of(last, 'gpuscope_profile_value_total{query="slow",'
                                  'unit="samples"}')
                cuts = metric_of(last, 'gpuscope_server_export_query_cuts_total{query="slow"}')
                if value == STACKS:
                    break
            time.sleep(0.05)
    finally:
        stop.set()
        th.join()
    worst = max(d for d, _, _ in scrapes)
    print(f"{len(scrapes)} scrapes, slowest {worst * 1e3:.0f} ms (budget {BUDGET_S * 1e3:.0f} ms);"
          f" {probes} requests on the same event loop meanwhile, slowest {loop_worst * 1e3:.0f} ms;"
          f" query cut {cuts:.0f} times, value {value} of {STACKS}")
    check(all(c == 200 for _, c, _ in scrapes), "every scrape answered 200")
    check(worst < BUDGET_S + 2.0, f"a scrape took {worst:.2f} s, budget {BUDGET_S} s + 2 s")
    check(loop_worst < 1.0, f"a request on the event loop took {loop_worst:.2f} s during scrapes")
    check(cuts is not None and cuts >= 3, f"the slow query was cut and counted: {cuts}")
    check(value == STACKS, f"the query's counter holds every sample once its stacks are "
          f"classified: {value} of {STACKS}")
    fast = metric_of(scrapes[-1][2], 'gpuscope_profile_value_total{query="all",unit="samples"}')
    check(fast == STACKS, f"the query without a regex counts every sample: {fast}")
    print("PASS")


qdir = Server().tmp
qfile = os.path.join(qdir, "queries.yaml")
with open(qfile, "w") as f:
    f.write("queries:\n"
            "  - name: slow\n    function: '(.*_)*x'\n"
            "  - name: all\n")
run_test(main)
