#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""GPU efficiency (docs/efficiency.md) over a real server and SQLite: the fixture's exact
GPU-hours and dollars by namespace, pod and an absent label; the causes of team-b's idle time
(load_batch first); selectors; the hourly rollup giving the same answer, and redoing an hour when
late data arrives; `gpuscope report` against its golden table; every bad input refused."""
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpuscope_server import ROOT, SERVER, Server, encode, now_ns, skip_if_unbuilt  # noqa: E402
from lib import check, finish  # noqa: E402
import efficiency_fixture as fx  # noqa: E402

skip_if_unbuilt()
CLI = os.path.join(ROOT, ".output", "gpuscope")
GOLDEN = os.path.join(ROOT, "tests", "integration", "data", "efficiency_report.txt")
H = 3600 * 10**9
S = 10**9
T = (now_ns() // H - 3) * H     # an hour-aligned hour, 3 hours ago
D = 3600
PRICES = ["--gpu-hour-price", "2.00", "--gpu-hour-price", "NVIDIA H200=4.00"]
q = urllib.parse.quote


def close(a, b, tol=1e-9):
    return a is not None and abs(a - b) <= tol * max(1.0, abs(b))


def rng(t0=T, t1=T + D * S):
    return f"from={t0 / 1e9:.3f}&to={t1 / 1e9:.3f}"


def rows(ans):
    return {w["workload"]: w for w in ans["workloads"]}


def check_exact(ans, what, b_busy=None):
    exp = fx.expected(D)
    r = rows(ans)
    check(list(r) == ["team-b", "team-a"], f"{what}: rows by idle dollars: {list(r)}")
    for ns in ("team-a", "team-b"):
        e, w = exp[ns], r.get(ns, {})
        busy = e["busy"] if not (ns == "team-b" and b_busy) else b_busy
        idle = e["idle"] if not (ns == "team-b" and b_busy) else D - b_busy
        ok = (close(w.get("held_gpu_hours"), e["held"] / 3600) and
              close(w.get("busy_gpu_hours"), busy / 3600) and
              close(w.get("idle_gpu_hours"), idle / 3600) and
              close(w.get("unknown_gpu_hours"), e["unknown"] / 3600) and
              close(w.get("idle_dollars"), round(idle / 3600 * 4.0, 6)))
        check(ok, f"{what}: {ns} held {w.get('held_gpu_hours')} busy {w.get('busy_gpu_hours')}"
              f" idle {w.get('idle_gpu_hours')} unknown {w.get('unknown_gpu_hours')}"
              f" idle ${w.get('idle_dollars')}")
        check(w.get("gpus", [{}])[0].get("source") == "kernels", f"{what}: {ns} source kernels")
    un = ans["unheld"]
    check(len(un) == 1 and un[0]["gpu"] == "2" and un[0]["source"] == "nvml" and
          close(un[0]["gpu_hours"], exp["unheld"]["held"] / 3600) and
          close(un[0]["dollars"], round(exp["unheld"]["dollars"], 6)),
          f"{what}: unheld GPU 2, nvml, {un}")


def main():
    s = Server(args=PRICES + ["--settle", "1s"]).start()
    try:
        code, body = s.ingest(encode(fx.script(T, D)))
        check(code == 204, f"ingest: {code} {body}")
        ans = s.get_json(f"/api/v1/efficiency?{rng()}&by=namespace")
        check_exact(ans, "by namespace")
        c = rows(ans)["team-b"].get("causes", {})
        e = fx.expected(D)["causes_b"]
        fns = [(f["name"], f["samples"]) for f in c.get("functions", [])]
        check(fns[:2] == [("load_batch", e["load_batch"]), ("log_metrics", e["log_metrics"])],
              f"causes: data loader first: {fns}")
        blk = {b["reason"]: b["thread_seconds"] for b in c.get("blocked", [])}
        check(close(blk.get("futex"), e["futex"]) and close(blk.get("io"), e["io"]),
              f"causes: blocked by reason {blk}")
        check(close(c.get("no_cpu_share"), e["no_cpu_share"]), f"causes: no CPU {c.get('no_cpu_share')}")
        check(c.get("gpu") == "1" and c.get("selector") == '{namespace="team-b",node="n1"}',
              f"causes: GPU and selector {c.get('gpu')} {c.get('selector')}")
        # The causes are the GPU-idle flame graph of the row's selector.
        fg = s.get_json(f"/api/v1/flamegraph?{rng()}&gpu_idle=1&selector=" + q(c["selector"]))
        check(fg["total"] == c["samples"], f"causes = flame graph total {fg['total']} {c['samples']}")
        tot = ans["totals"]
        check(close(tot["idle_dollars"], round(2.0 + 330 / 3600 * 4, 6), 1e-6) and
              close(tot["unheld_gpu_hours"], 3000 / 3600), f"totals {tot}")

        # Grouping: pod, and a label nobody has: one "(none)" row, counted not dropped.
        ans = s.get_json(f"/api/v1/efficiency?{rng()}&by=pod&causes=0")
        check(sorted(rows(ans)) == ["train-a", "train-b"], f"by pod: {list(rows(ans))}")
        ans = s.get_json(f"/api/v1/efficiency?{rng()}&by=ray_cluster&causes=0")
        r = rows(ans)
        check(list(r) == ["(none)"] and r["(none)"]["processes"] == 2 and
              close(r["(none)"]["held_gpu_hours"], 2.0), f"by ray_cluster: {r}")
        check(r["(none)"]["selector"] == '{pid=~"100|200"}' or
              r["(none)"]["selector"] == '{pid=~"200|100"}', f"(none) selector {r['(none)']['selector']}")
        ans = s.get_json(f"/api/v1/efficiency?{rng()}&by=pod&causes=0&selector=" +
                         q('{namespace="team-b"}'))
        check(list(rows(ans)) == ["train-b"] and ans["unheld"] == [], f"selector: {ans['workloads']}")
        ans = s.get_json(f"/api/v1/efficiency?{rng()}&causes=0&selector=" + q('{gpu="2"}'))
        check(ans["workloads"] == [] and len(ans["unheld"]) == 1, "selector on GPU labels")

        # The source ladder on node n2: GPM over NVML, NVML alone, a hole in both is unknown.
        T2 = T + 2 * H
        L = ["node n2", f"sample {T2 + S} cpu 1 pid=300,comm=infer,namespace=team-c,pod=infer-0 main"]
        g = "gpu=0,gpu_uuid=GPU-dddd,gpu_model=NVIDIA%20H200"
        for t in range(1, 101):
            L.append(f"metric gpu_process_memory_bytes {g},pid=300,comm=infer {T2 + t * S} 1e9")
            if t <= 60:
                L.append(f"metric gpu_sm_active {g} {T2 + t * S} 0.25")
            if not 81 <= t <= 90:
                L.append(f"metric gpu_utilization {g} {T2 + t * S} 80")
        code, _ = s.ingest(encode("\n".join(L) + "\n"))
        ans = s.get_json(f"/api/v1/efficiency?{rng(T2, T2 + 100 * S)}&causes=0&selector=" +
                         q('{node="n2"}'))
        w = rows(ans).get("team-c", {})
        check(code == 204 and close(w.get("held_gpu_hours"), 100 / 3600) and
              close(w.get("busy_gpu_hours"), 39 / 3600) and close(w.get("idle_gpu_hours"), 51 / 3600)
              and close(w.get("unknown_gpu_hours"), 10 / 3600) and
              close(w.get("sources", {}).get("gpm"), 60 / 3600) and
              close(w.get("sources", {}).get("nvml"), 30 / 3600),
              f"source ladder: gpm 60 s at 25 %, nvml 30 s at 80 %, 10 s unknown: {w}")

        # Bad input: 4xx with a message.
        for path, want, what in [
            (f"by=nosuchlabel&{rng()}", 400, "unknown label 'nosuchlabel'"),
            (f"by=bad%20label&{rng()}", 400, "'by' must be a label name"),
            (f"selector={q('{pod=~(}')}&{rng()}", 400, ""),
            (f"{rng(T - 10 * H, T - 9 * H)}", 404, "no GPU data"),
            (f"{rng(T + H, T)}", 400, "after"),
            (f"causes=x&{rng()}", 400, "causes"),
        ]:
            code, body, _ = s.request("/api/v1/efficiency?" + path)
            msg = json.loads(body).get("error", "") if body else ""
            check(code == want and what in msg, f"bad input {path[:40]}: {code} {msg}")

        # The CLI: golden table, markdown, json, errors.
        base = [CLI, "report", "--server", s.url, "--from", f"{T / 1e9:.0f}",
                "--to", f"{(T + D * S) / 1e9:.0f}"]
        r = subprocess.run(base + ["--by", "namespace"], capture_output=True, text=True)
        out = r.stdout
        if os.environ.get("GPUSCOPE_UPDATE_GOLDEN"):
            with open(GOLDEN, "w") as f:
                f.write(out)
        with open(GOLDEN) as f:
            golden = f.read()
        check(r.returncode == 0 and out == golden,
              f"report table = golden ({r.returncode}):\n{out}\n--- golden:\n{golden}{r.stderr}")
        r = subprocess.run(base + ["--format", "markdown"], capture_output=True, text=True)
        check(r.returncode == 0 and "| team-b " in r.stdout and "|---" in r.stdout.replace(
            "| -", "|-").replace(" ", ""), f"markdown:\n{r.stdout}")
        r = subprocess.run(base + ["--format", "json", "--by", "pod"], capture_output=True, text=True)
        check(r.returncode == 0 and json.loads(r.stdout)["workloads"][0]["workload"] == "train-b",
              "json")
        r = subprocess.run(base + ["--by", "nosuchlabel"], capture_output=True, text=True)
        check(r.returncode == 1 and len(r.stderr.strip().splitlines()) == 1 and
              "nosuchlabel" in r.stderr, f"CLI unknown by: {r.returncode} {r.stderr!r}")
        r = subprocess.run(base + ["--format", "xml"], capture_output=True, text=True)
        check(r.returncode == 2, f"CLI bad format: {r.returncode}")

        # The hourly rollup: the same answer once the hour is rolled up.
        deadline = time.time() + 60
        while time.time() < deadline:
            ans = s.get_json(f"/api/v1/efficiency?{rng()}&by=namespace&causes=0")
            if ans["rollup_hours"] == 1:
                break
            time.sleep(0.5)
        check(ans["rollup_hours"] == 1, f"answer from the rollup: {ans['rollup_hours']}")
        check_exact(ans, "from the rollup")
        # Partial hours at both ends come from records.
        ans2 = s.get_json(f"/api/v1/efficiency?{rng(T + 1800 * S, T + H + 1800 * S)}&causes=0")
        check(close(rows(ans2)["team-b"]["held_gpu_hours"], 0.5), "half an hour, raw")

        # Late data for a rolled-up hour: the hour is redone.
        late = f"node n1\ninterval gpu_busy gpu=1 {T + 5 * S} {T + 10 * S} -\n"
        code, _ = s.ingest(encode(late))
        check(code == 204, "late batch stored")
        deadline = time.time() + 60
        while time.time() < deadline:
            ans = s.get_json(f"/api/v1/efficiency?{rng()}&by=namespace&causes=0")
            if ans["rollup_hours"] == 1 and close(rows(ans)["team-b"]["busy_gpu_hours"],
                                                  1805 / 3600):
                break
            time.sleep(0.5)
        check_exact(ans, "late data, rolled up again", b_busy=1805)
        check(ans["rollup_hours"] == 1, "late data: answer from the redone hour")

    finally:
        s.stop()

    # The server refuses a bad price and a bad queries file at start: file, line, reason.
    tmp = tempfile.mkdtemp(prefix="gpuscope-eff-")
    r = subprocess.run([SERVER, "--data", tmp + "/d", "--listen", "127.0.0.1:0",
                        "--gpu-hour-price", "NVIDIA H200=cheap"], capture_output=True, text=True,
                       timeout=30)
    check(r.returncode == 2 and "is not a price" in r.stderr, f"bad price: {r.returncode} {r.stderr}")
    bad = os.path.join(tmp, "queries.yaml")
    with open(bad, "w") as f:
        f.write("queries:\n  - name: ok\n    selector: '{pod=\"a\"}'\n"
                "  - name: broken\n    kind: cpu\n    function: 'load_(('\n")
    r = subprocess.run([SERVER, "--data", tmp + "/d", "--listen", "127.0.0.1:0",
                        "--export-queries", bad], capture_output=True, text=True, timeout=30)
    check(r.returncode == 2 and f"{bad}:6:" in r.stderr and "function regex" in r.stderr,
          f"bad query refused with file:line: {r.returncode} {r.stderr.strip()}")
    with open(bad, "w") as f:
        f.write("queries:\n  - name: a\n    gpu_idle: x\n")
    r = subprocess.run([SERVER, "--data", tmp + "/d", "--listen", "127.0.0.1:0",
                        "--export-queries", bad], capture_output=True, text=True, timeout=30)
    check(r.returncode == 2 and f"{bad}:3:" in r.stderr and "gpu_idle" in r.stderr,
          f"bad gpu_idle: {r.stderr.strip()}")
    finish()


if __name__ == "__main__":
    main()
