#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Findings (docs/insights.md) over a real server and SQLite: each detector's fixture workload
(insights_fixture.py) gets exactly its finding with the exact GPU-seconds and dollars at stake,
the healthy compute-bound one none; the functions and lines named; every evidence link answers;
the estimated finding says so; selectors, limit and every bad input (400/404/422);
`gpuscope explain` against its golden text; the counter on /metrics."""
import json
import os
import subprocess
import sys
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpuscope_server import ROOT, Server, encode, now_ns, skip_if_unbuilt  # noqa: E402
from lib import check, finish  # noqa: E402
import insights_fixture as fx  # noqa: E402

skip_if_unbuilt()
CLI = os.path.join(ROOT, ".output", "gpuscope")
GOLDEN = os.path.join(ROOT, "tests", "integration", "data", "insights_explain.txt")
S = 10**9
D = 600
T = (now_ns() // S - 3 * 3600) * S
q = urllib.parse.quote


def rng(t0=T, t1=T + D * S):
    return f"from={t0 / 1e9:.3f}&to={(t1) / 1e9:.3f}"


def close(a, b, tol=1e-3):
    return a is not None and abs(a - b) <= tol * max(1.0, abs(b))


def facts_off(x, want):
    """{fact: (got, want)} for the facts of x (facts=1) not as wanted: equal, numbers to 1e-3."""
    return {k: (x.get(k), v) for k, v in want.items()
            if not (x.get(k) == v or (isinstance(v, (int, float)) and not isinstance(v, bool)
                                      and close(x.get(k), v, 1e-3)))}


def check_item(s, ans):
    """The H100's per-step .item() loop as the default agent records it (insights_fixture.py
    ns-item): a per-step sync, estimated from the 2 % of the time the windows saw; not a starved
    loader, though the main thread blocks 35 % of the idle time while autograd's device thread
    runs 32.5 %: that thread launches the backward pass, it is no input worker. Its facts
    (facts=1) say what the rules compared."""
    mine = [f for f in ans["findings"] if f["workload"] == "ns-item"]
    check([f["kind"] for f in mine] == ["host_sync_per_step"],
          f"ns-item: host_sync_per_step alone: {[(f['kind'], f['summary']) for f in mine]}")
    f = mine[0] if mine else {}
    check(f.get("confidence") == "estimated" and f.get("estimated_share", 0) > 0.97 and
          "at step (train.py:95)" in f.get("summary", "") and
          "5.0 times a second at step (train.py:95), waiting 2.0 ms each; 100 % of the 60 syncs "
          "seen drained the GPU" in f.get("summary", "") and
          "Estimated: the gaps were seen over 0.6 s" in f.get("summary", ""),
          f"ns-item: the sync at train.py:95, estimated: {f.get('confidence')} "
          f"{f.get('estimated_share')} {f.get('summary')}")
    sel = q('{namespace="ns-item"}')
    one = s.get_json(f"/api/v1/insights?{rng()}&selector={sel}&facts=1")
    facts = one.get("facts", [])
    check(len(facts) == 1 and facts[0]["workload"] == "ns-item", f"facts: one GPU: {facts}")
    x = facts[0] if facts else {}
    want = {"fired": ["host_sync_per_step"], "launch_tid": "110", "launchers": 2,
            "sync_seen": 60, "sync_drained": 60, "drain": 1, "follow": 1, "checked": True,
            "on_cpu": 0.65, "side_on_cpu": 0.975, "helpers": 0.325, "workers": 0,
            "blocked_raw": 0.35, "blocked": 0.025, "blocked_reason": "other",
            "seg_idle_s": 31.5, "gap_idle_s": 0.63, "sync_rate": 5, "sync_steps": 3000}
    bad = facts_off(x, want)
    check(not bad, f"ns-item facts (got, want): {bad}")


def check_item_bare(s):
    """ns-item recorded with no trace window in the range (insights_fixture.item_bare_script):
    no launch seen, autograd's device thread known by its name as the launching side."""
    check(s.ingest(encode(fx.item_bare_script(T)))[0] == 204, "ingest ns-itemb")
    sel = q('{namespace="ns-itemb"}')
    a = s.get_json(f"/api/v1/insights?{rng()}&selector={sel}&facts=1")
    x = (a.get("facts") or [{}])[0]
    want = {"launch_tid": "130", "launchers": 0, "helpers": 0.325, "workers": 0,
            "blocked_raw": 0.35, "blocked": 0.025}
    bad = facts_off(x, want)
    check(not bad and "starved_dataloader" not in x.get("fired", []) and
          not any(f["kind"] == "starved_dataloader" for f in a["findings"]),
          f"ns-itemb: pt_autograd_0 a helper, no starved loader (got, want): {bad} "
          f"fired {x.get('fired')}")


def check_tok(s):
    """The tokenize workload's shape (insights_fixture.tok_script): the thread's own input work,
    not a per-step sync, though a sync returns in every step: it waited on nothing."""
    check(s.ingest(encode(fx.tok_script(T)))[0] == 204, "ingest ns-tok")
    sel = q('{namespace="ns-tok"}')
    a = s.get_json(f"/api/v1/insights?{rng()}&selector={sel}&facts=1")
    kinds = [f["kind"] for f in a["findings"]]
    x = (a.get("facts") or [{}])[0]
    check(kinds == ["input_on_launch_thread"] and "tokenize (train.py:42) 100 %" in
          a["findings"][0]["summary"], f"ns-tok: input work, no sync: {a['findings']}")
    check(x.get("launchers") == 2 and x.get("launch_tid") == "120" and x.get("helpers") == 0
          and x.get("workers") == 0, f"ns-tok: pid 121's launching thread neither a helper nor "
          f"a worker: {x}")
    check(x.get("sync_seen") == 64 and x.get("sync_drained") == 2 and
          close(x.get("drain"), 2 / 64, 1e-3) and x.get("fired") == ["input_on_launch_thread"],
          f"ns-tok facts: 64 syncs seen, 2 drained: {x}")


def main():
    s = Server(args=["--gpu-hour-price", str(fx.PRICE), "--settle", "1s"]).start()
    try:
        for w in fx.WORKLOADS:
            code, body = s.ingest(encode(fx.script(w, T, D)))
            check(code == 204, f"ingest {w}: {code} {body}")
        ans = s.get_json(f"/api/v1/insights?{rng()}")
        got = [(f["kind"], f["workload"], f["gpu_seconds_at_stake"], f["dollars_at_stake"])
               for f in ans["findings"]]
        exp = fx.expected(D)
        check([g[:2] for g in got] == [e[:2] for e in exp],
              f"findings, ranked by dollars: {[g[:2] for g in got]}")
        for g, e in zip(got, exp):
            check(close(g[2], e[2]) and close(g[3], e[2] * fx.PRICE / 3600, 1e-4),
                  f"{e[0]} {e[1]}: {g[2]} GPU-s (want {e[2]:.3f}), ${g[3]}")
        check(ans["workloads_checked"] == 10 and
              not any(f["workload"] == "ns-healthy" for f in ans["findings"]),
              f"10 workloads checked, none for the healthy one: {ans['workloads_checked']}")
        check("facts" not in ans, "no facts unless asked")
        by = {f["kind"]: f for f in ans["findings"] if f["workload"] != "ns-item"}
        for kind, text in [("input_on_launch_thread", "tokenize (train.py:42) 60 %, collate "
                            "(train.py:57) 30 %"),
                           ("host_sync_per_step", "at train_step (train.py:88), waiting 70.0 ms"),
                           ("starved_dataloader", "in _get_data (dataloader.py:1295)"),
                           ("sync_copies", "at to_gpu (train.py:30)"),
                           ("node_idle", "blocked in recv (dist.py:12)"),
                           ("throttled", "thermal slowdown")]:
            check(text in by.get(kind, {}).get("summary", ""),
                  f"{kind} names '{text}': {by.get(kind, {}).get('summary')}")
        lb = by.get("launch_bound", {})
        check(lb.get("confidence") == "estimated" and lb.get("estimated_share", 0) > 0.9 and
              "Estimated:" in lb.get("summary", ""),
              f"launch_bound rests on windows: estimated: {lb.get('confidence')} "
              f"{lb.get('estimated_share')}")
        check(all(f["confidence"] == "measured" for f in ans["findings"]
                  if f["kind"] != "launch_bound" and f["workload"] != "ns-item"),
              "the others measured")
        check_item(s, ans)
        inp = by["input_on_launch_thread"]
        sel_t = '{namespace="ns-input",node="n-in",pid="101",tid="101"}'
        check(inp["id"] == "input_on_launch_thread:ns-input" and inp["gpu"] == "0" and
              inp["node"] == "n-in" and inp["selector"] == '{namespace="ns-input"}' and
              close(inp["share_of_held"], 270 / 600, 1e-4), f"input finding's fields: {inp}")
        e0 = inp["evidence"][0]
        want_api = (f"/api/v1/top?{rng()}&selector={q(sel_t, safe='')}&kind=cpu&gpu_idle=0")
        want_ui = (f"/?node=n-in&gpu=0&pid=101&sel={q(sel_t, safe='').replace('%2C', ',')}"
                   f"&q=tokenize&from={T // 10**6}&to={(T + D * S) // 10**6}"
                   "&idle=1")
        check(e0["label"] == "tokenize (train.py:42) 60 % of GPU-idle CPU samples" and
              e0["value"] == 0.6 and e0["unit"] == "share" and e0["api"] == want_api and
              e0["ui"] == want_ui, f"evidence links:\n{e0}\nwant api {want_api}\nwant ui {want_ui}")
        top = s.get_json(e0["api"])
        tok = [f["total"] for f in top["functions"] if f["name"] == "tokenize"]
        check(tok == [1800], f"the api link shows tokenize's 1800 samples: {top['functions'][:3]}")
        bad = [(f["kind"], e["api"]) for f in ans["findings"] for e in f["evidence"]
               if s.request(e["api"])[0] != 200 or not e["ui"].startswith("/?")]
        check(not bad, f"every evidence link answers: {bad}")

        sel = q('{namespace=~"ns-(input|healthy)"}')
        one = s.get_json(f"/api/v1/insights?{rng()}&selector={sel}")
        check([f["id"] for f in one["findings"]] == ["input_on_launch_thread:ns-input"] and
              one["workloads_checked"] == 2, f"selector: {[f['id'] for f in one['findings']]}")
        two = s.get_json(f"/api/v1/insights?{rng()}&limit=2")
        check(len(two["findings"]) == 2, "limit=2")

        # Bad input: 4xx with a message.
        extra = ["node n-long"] + [
            f"metric gpu_process_memory_bytes gpu=0,pid=9,comm=x {T + k * S} 1" for k in
            range(1, 31)] + [f"metric gpu_utilization gpu=0 {T + k * S} 0" for k in range(1, 31)] + [
            f"interval thread_state pid=9,comm=x,tid=9,pod={'x' * 10 + 'c' + 'a' * 4085} "
            f"{T} {T + 30 * S} state=running"]
        check(s.ingest(encode("\n".join(extra) + "\n"))[0] == 204, "ingest a long label")
        code, body, _ = s.request(f"/api/v1/insights?{rng()}&by=pod")
        check(code == 200 and json.loads(body)["workloads_checked"] == 2,
              f"by=pod with a 4 KiB pod name (too long for the evidence's selectors): "
              f"{code} {body[:200]!r}")
        regex = q('{pod=~"(.{1,100}){1,100}c.*"}')
        for path, want, what in [
            (f"by=nosuchlabel&{rng()}", 400, "unknown label 'nosuchlabel'"),
            (f"by=&{rng()}", 400, "'by' is empty"),
            (f"by=bad%20label&{rng()}", 400, "'by' must be a label name"),
            (f"selector={q('{pod=~(}')}&{rng()}", 400, ""),
            (f"selector={regex}&{rng()}", 422, "matching limits"),
            (f"{rng(T - 10 * 3600 * S, T - 9 * 3600 * S)}", 404, "no GPU data"),
            (f"{rng(T + D * S, T)}", 400, "after"),
            (f"limit=x&{rng()}", 400, "limit"),
            (f"facts=2&{rng()}", 400, "facts must be 0 or 1"),
        ]:
            code, body, _ = s.request("/api/v1/insights?" + path)
            msg = json.loads(body).get("error", "") if body else ""
            check(code == want and what in msg, f"bad input {path[:40]}: {code} {msg}")

        # The CLI: golden text (the server's address written SERVER), markdown, json, errors.
        base = [CLI, "explain", "--server", s.url, "--from", f"{T / 1e9:.0f}",
                "--to", f"{(T + D * S) / 1e9:.0f}"]
        r = subprocess.run(base, capture_output=True, text=True)
        out = r.stdout.replace(s.url, "SERVER").replace(str(T // 10**6), "T0").replace(
            str((T + D * S) // 10**6), "T1").replace(f"{T // S}.000", "T0s").replace(
            f"{(T + D * S) // S}.000", "T1s")
        if os.environ.get("GPUSCOPE_UPDATE_GOLDEN"):
            with open(GOLDEN, "w") as f:
                f.write(out)
        with open(GOLDEN) as f:
            golden = f.read()
        check(r.returncode == 0 and out == golden,
              f"explain = golden ({r.returncode}):\n{out}\n--- golden:\n{golden}{r.stderr}")
        r = subprocess.run(base + ["--format", "markdown", "--limit", "1"], capture_output=True,
                           text=True)
        check(r.returncode == 0 and "#### 1. ns-held held_unused" in r.stdout and
              "(8 more findings; --limit)" in r.stdout, f"markdown:\n{r.stdout}")
        r = subprocess.run(base + ["--format", "json"], capture_output=True, text=True)
        check(r.returncode == 0 and len(json.loads(r.stdout)["findings"]) == 9, "json")
        r = subprocess.run(base + ["--by", "nosuchlabel"], capture_output=True, text=True)
        check(r.returncode == 1 and len(r.stderr.strip().splitlines()) == 1 and
              "nosuchlabel" in r.stderr, f"CLI unknown by: {r.returncode} {r.stderr!r}")
        r = subprocess.run(base + ["--format", "xml"], capture_output=True, text=True)
        check(r.returncode == 2, f"CLI bad format: {r.returncode}")

        code, body, _ = s.request("/metrics")
        text = body.decode()
        check(code == 200 and "# TYPE gpuscope_server_insight_gpu_seconds_total counter" in text
              and 'gpuscope_server_insight_gpu_seconds_total{kind="held_unused",workload="other"}'
              in text, "/metrics: the findings counter")
        check_tok(s)
        check_item_bare(s)
    finally:
        s.stop()
    return finish()


if __name__ == "__main__":
    sys.exit(main())
