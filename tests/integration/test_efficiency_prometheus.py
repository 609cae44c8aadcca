#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""A real Prometheus scrapes two real gpuscope-servers holding the efficiency fixture (30 s,
stored ahead of time so the servers' windows close over it while Prometheus scrapes): PromQL
returns the fixture's GPU seconds and idle dollars per workload (server A); with
--export-top 1 (server B) there are 7 series, the workload with the highest idle cost has the
series of its own and the rest, "other" included, still add up to the fixture; the profile
query of the --export-queries file equals the GPU-idle flame graph's value for the range the
counters cover."""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpuscope_server import Server, encode, now_ns, skip_if_unbuilt  # noqa: E402
from lib import check, finish, free_port, prom_query, skip, wait_until  # noqa: E402
import efficiency_fixture as fx  # noqa: E402

PROM = shutil.which("prometheus") or "/usr/bin/prometheus"
if not os.path.exists(PROM):
    skip("prometheus is not installed (Debian package 'prometheus')")
skip_if_unbuilt()
S = 10**9
D = 30
QUERIES = """queries:
  - name: loader_cpu
    selector: '{pod="train-b"}'
    kind: cpu
    function: load_batch
    gpu_idle: 1
  - name: train_b_idle_cpu
    selector: '{pod="train-b"}'
    gpu_idle: 1
"""


query = prom_query


def one(prom_port, q, t=None):
    r = query(prom_port, q, t)
    return r[0][1] if len(r) == 1 else None


def close(a, b, tol=1e-6):
    return a is not None and abs(a - b) <= tol


def find_total(node, name):
    """Sum of the values of every flame graph node with that name (each stack once)."""
    if node["name"] == name:
        return node["value"]
    return sum(find_total(c, name) for c in node.get("children", []))


def main():
    tmp = tempfile.mkdtemp(prefix="gpuscope-effprom-")
    qf = os.path.join(tmp, "queries.yaml")
    with open(qf, "w") as f:
        f.write(QUERIES)
    common = ["--gpu-hour-price", "2.00", "--gpu-hour-price", "NVIDIA H200=4.00",
              "--settle", "1s", "--export-queries", qf]
    s = Server(args=common).start()
    s1 = Server(args=common + ["--export-top", "1"]).start()
    prom = None
    try:
        T = (now_ns() // (10 * S) + 1) * 10 * S + 10 * S   # a 10 s boundary, 10-20 s ahead
        raw = encode(fx.script(T, D))
        for srv in (s, s1):
            code, body = srv.ingest(raw)
            check(code == 204, f"fixture stored ahead of time: {code} {body}")
        port = int(s.url.rsplit(":", 1)[1])
        port1 = int(s1.url.rsplit(":", 1)[1])
        prom_port = free_port()
        with open(os.path.join(tmp, "prometheus.yml"), "w") as f:
            f.write("global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
                    "  evaluation_interval: 1s\n"
                    "scrape_configs:\n  - job_name: a\n    static_configs:\n"
                    f"      - targets: ['127.0.0.1:{port}']\n"
                    "  - job_name: b\n    static_configs:\n"
                    f"      - targets: ['127.0.0.1:{port1}']\n")
        prom = subprocess.Popen(
            [PROM, f"--config.file={tmp}/prometheus.yml", f"--storage.tsdb.path={tmp}/data",
             f"--web.listen-address=127.0.0.1:{prom_port}"],
            stdout=open(os.path.join(tmp, "prometheus.log"), "w"), stderr=subprocess.STDOUT)
        end_ns = T + D * S

        def covered():
            try:
                v = query(prom_port, 'gpuscope_server_export_window_seconds{edge="end"}')
            except OSError:
                return False
            return len(v) == 2 and min(x[1] for x in v) * 1e9 >= end_ns + 2 * S
        wait = (end_ns - now_ns()) / 1e9 + 60
        if not check(wait_until(covered, wait, step=0.5),
                     "Prometheus scraped a window past the fixture"):
            return
        exp = fx.expected(D)
        b = exp["team-b"]
        a = exp["team-a"]
        # Server A: every workload has its series.
        states = {(m["state"], m.get("namespace", ""), m.get("pod", "")): v
                  for m, v, _ in query(prom_port, 'gpuscope_server_gpu_seconds_total{job="a"}')}
        for st in ("busy", "idle", "unknown"):
            for ns, pod, e in (("team-b", "train-b", b), ("team-a", "train-a", a)):
                check(close(states.get((st, ns, pod)), e[st]),
                      f"A: {st} seconds of {pod}: {states.get((st, ns, pod))} want {e[st]}")
            check(close(states.get((st, "other", "other")), 0), f"A: nothing in other ({st})")
        check(close(states.get(("unheld", "", "")), exp["unheld"]["held"]),
              f"A: unheld seconds {states.get(('unheld', '', ''))}")
        dollars = {(m["namespace"], m["pod"]): v for m, v, _ in
                   query(prom_port, 'gpuscope_server_gpu_idle_cost_dollars_total{job="a"}')}
        check(close(dollars.get(("team-b", "train-b")), b["idle_dollars"]) and
              close(dollars.get(("team-a", "train-a")), a["idle_dollars"]),
              f"A: idle dollars {dollars}")
        check(close(one(prom_port, 'gpuscope_server_gpu_unheld_cost_dollars_total{job="a"}'),
                    exp["unheld"]["dollars"]), "A: unheld dollars")
        # Server B, --export-top 1: bounded, and nothing lost.
        states = {(m["state"], m.get("namespace", ""), m.get("pod", "")): v
                  for m, v, _ in query(prom_port, 'gpuscope_server_gpu_seconds_total{job="b"}')}
        check(len(states) == 7 and ("idle", "team-b", "train-b") in states,
              f"B: train-b (highest idle cost) + other + unheld: {sorted(states)}")
        for st in ("busy", "idle", "unknown"):
            got = sum(v for (s_, ns, _), v in states.items() if s_ == st)
            check(close(got, a[st] + b[st]), f"B: {st} seconds add up: {got} want {a[st] + b[st]}")
        got = one(prom_port, 'sum(gpuscope_server_gpu_idle_cost_dollars_total{job="b"})')
        check(close(got, a["idle_dollars"] + b["idle_dollars"], 2e-6), f"B: idle dollars add up {got}")
        # The alert of docs/efficiency.md is one PromQL expression.
        alert = query(prom_port, 'increase(gpuscope_server_gpu_idle_cost_dollars_total{job="a"}[5m]) > 0.01')
        check([m["pod"] for m, _, _ in alert] == ["train-b"], f"alert rule fires for train-b: {alert}")

        # Profile queries equal the flame graph over the range the counters cover, read from
        # the same scrape.
        r = query(prom_port, 'gpuscope_profile_value_total{job="a"} or '
                  'gpuscope_server_export_window_seconds{job="a"}')
        vals = {m.get("query") or m.get("edge"): (v, t) for m, v, t in r}
        t_scrape = vals["end"][1]
        check(len({t for _, t in vals.values()}) == 1, "one scrape")
        start, end = vals["start"][0], vals["end"][0]
        rng = f"from={start:.3f}&to={end:.3f}"
        sel = urllib.parse.quote('{pod="train-b"}')
        fg = s.get_json(f"/api/v1/flamegraph?{rng}&gpu_idle=1&selector={sel}")
        lb = find_total(fg["root"], "load_batch")
        check(vals["loader_cpu"][0] == lb == exp["causes_b"]["load_batch"],
              f"loader_cpu {vals['loader_cpu'][0]} = flame graph load_batch {lb}"
              f" = {exp['causes_b']['load_batch']}")
        check(vals["train_b_idle_cpu"][0] == fg["total"],
              f"train_b_idle_cpu {vals['train_b_idle_cpu'][0]} = flame graph total {fg['total']}")
        check(t_scrape > 0, "scrape time")
        cpu = s.metric("gpuscope_server_export_cpu_seconds_total")
        n = s.metric('gpuscope_server_export_windows_total{result="ok"}')
        print(f"exporter: {n:.0f} windows, {cpu * 1e3 / max(n, 1):.2f} ms CPU per window")
    finally:
        if prom:
            prom.terminate()
            prom.wait(timeout=30)
        s.stop()
        s1.stop()
    finish()


if __name__ == "__main__":
    main()
