#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""gpuscope-server over real HTTP, on each backend with the same expectations -- a real SQLite
file, then a real two-shard ClickHouse cluster (Distributed tables): ingest (none/gzip/zstd),
flame graph shares, selectors, kinds, gpu_idle, top, diff, pprof, series buckets, intervals,
labels, nodes, stacks, auth, and every bad input refused with a JSON error, counted, and nothing
stored."""
import gzip
import json
import sys
import urllib.parse

import clickhouse
from gpuscope_server import Server, check, encode, find, now_ns, running, skip_if_unbuilt

skip_if_unbuilt()
q = urllib.parse.quote
T = (now_ns() // 60_000_000_000 - 30) * 60_000_000_000  # a minute boundary, 30 min ago
MS = 1_000_000
PID1, PID2, NODE1 = q('{pid="1"}'), q('{pid="2"}'), q('{node="n1"}')
BADRE = q('{comm=~"("}')


def script():
    lines = ["node n1"]
    # pid 1 (train): 60 x main;step;matmul, 30 x main;step;load, 10 x main -> shares 60/30/10
    for i in range(100):
        t = T + i * 10 * MS
        frames = "main;step;matmul" if i < 60 else "main;step;load" if i < 90 else "main"
        lines.append(f"sample {t} cpu 1 pid=1,comm=train {frames}")
    # pid 2 (other): 50 samples of k:schedule under idle_loop
    for i in range(50):
        lines.append(f"sample {T + i * 10 * MS + 5} cpu 1 pid=2,comm=other idle_loop;k:schedule")
    # off-CPU: 2 blocking events
    lines.append(f"sample {T} offcpu_ns 5000000 pid=1,comm=train main;step;futex_wait")
    lines.append(f"sample {T + MS} offcpu_ns 3000000 pid=1,comm=train main;step;read")
    # GPU 0 busy during [T, T+300ms): samples of pid 1 at 0..290 ms are busy, others idle
    lines.append(f"interval gpu_busy gpu=0,source=kernels {T} {T + 300 * MS} -")
    # a trace window saw GPU 0 over [T, T+800ms): after it nobody knows (unknown, not idle)
    lines.append(f"interval gpu_observed gpu=0,source=kernels {T} {T + 800 * MS} -")
    lines.append(f"interval gpu_kernel gpu=0,pid=1 {T + 10 * MS} {T + 20 * MS} name=gemm,stream=7")
    # its kernel time, inside a CUPTI window of 60 s (a tenth of the 10-minute range)
    lines.append(f"sample {T + 10 * MS} gpu_kernel_ns 10000000 pid=1,comm=train,gpu=0 main;step;gemm")
    lines.append(f"interval gpu_trace_window pid=1,comm=train {T} {T + 60000 * MS} reason=budget")
    # a CPU launch naming its stack (batch index 0: main;step;matmul, the first stack)
    lines.append(f"interval cuda_launch pid=1,comm=train {T + 9 * MS} {T + 10 * MS} stack_id=0")
    # metric: 1000 points 1 ms apart, value = i
    for i in range(1000):
        lines.append(f"metric gpu_utilization gpu=0 {T + i * MS} {i}")
    return "\n".join(lines) + "\n"


def run(store_args):
    s = Server(token="s3cret", args=["--max-body", "1MiB"], store_args=store_args)
    rng = f"from={T / 1e9:.3f}&to={(T + 10 * 60 * 10**9) / 1e9:.3f}"
    with running(s):
        raw = encode(script())
        # auth
        code, _, _ = s.request("/api/v1/labels", token=False)
        check(code == 401, f"no token: {code}")
        code, body, _ = s.request("/api/v1/labels", token="wrong")
        check(code == 401 and b"error" in body, f"wrong token: {code}")
        code, _, _ = s.request("/api/v1/ingest", body=raw, method="POST", token="wrong")
        check(code == 401, f"ingest with wrong token: {code}")
        check(s.metric('gpuscope_server_rejected_total{reason="unauthorized"}') == 3,
              "unauthorized counted")

        code, body = s.ingest(raw)
        check(code == 204, f"ingest: {code} {body}")
        fg = s.get_json(f"/api/v1/flamegraph?{rng}")
        check(fg["unit"] == "samples" and fg["total"] == 150, f"total {fg['total']}")
        main_ = find(fg["root"], "main")
        step = find(main_, "step")
        check(main_["value"] == 100 and main_["self"] == 10, f"main {main_}")
        check(find(step, "matmul")["value"] == 60 and find(step, "load")["value"] == 30, "shares")
        check(find(find(fg["root"], "idle_loop"), "schedule")["value"] == 50, "kernel frame")

        # selectors
        for sel, total in [('{comm="train"}', 100), ('{comm!="train"}', 50),
                           ('{comm=~"tr.*"}', 100), ('{comm!~"tr.*",pid="2"}', 50),
                           ('{node="n1"}', 150), ('{node="n2"}', 0), ('{comm=~"t"}', 0)]:
            fg = s.get_json(f"/api/v1/flamegraph?{rng}&selector={q(sel)}")
            check(fg["total"] == total, f"selector {sel}: {fg['total']} != {total}")
        # kind
        fg = s.get_json(f"/api/v1/flamegraph?{rng}&kind=offcpu_ns")
        check(fg["unit"] == "ns" and fg["total"] == 8000000, f"offcpu {fg['total']}")
        # time range: the first 295 ms only holds samples 0..29 of each pid
        fg = s.get_json(f"/api/v1/flamegraph?from={T / 1e9:.3f}&to={(T + 295 * MS) / 1e9:.3f}")
        check(fg["total"] == 60, f"narrow range: {fg['total']}")
        # gpu_idle: samples in [T+300ms, T+800ms) -> pid1 50, pid2 20; pid 1's last 20
        # (800..990 ms) fall where no source observed the GPU: unknown, not kept
        fg = s.get_json(f"/api/v1/flamegraph?{rng}&gpu_idle=0")
        check(fg["total"] == 70, f"gpu_idle total {fg['total']}")
        fg = s.get_json(f"/api/v1/flamegraph?{rng}&gpu_idle=0&selector={PID1}")
        check(fg["total"] == 50, f"gpu_idle pid 1: {fg['total']}")
        # which source decided, and for how much of the range (0.8 s of 10 min; the rest unknown)
        src = fg.get("gpu_sources") or {}
        check(src.get("gpu") == 0 and abs(src.get("observed", -1) - 0.8 / 600) < 1e-9 and
              src.get("by_source") == {"kernels": src.get("observed")} and not src.get("truncated"),
              f"gpu_idle: the deciding source and its share: {src}")
        node2 = q('{node="n2"}')
        src = s.get_json(f"/api/v1/flamegraph?{rng}&gpu_idle=0&selector={node2}")["gpu_sources"]
        check(src["observed"] == 0 and src["by_source"] == {}, f"another node's GPU: no source {src}")
        # top
        top = s.get_json(f"/api/v1/top?{rng}")
        fns = {f["name"]: f for f in top["functions"]}
        check(top["functions"][0]["name"] == "matmul" and fns["matmul"]["self"] == 60, "top")
        check(fns["main"]["total"] == 100 and fns["main"]["self"] == 10, f"top main {fns['main']}")
        # processes ranked by samples; samples over time; flame graph grouped by process
        pr = s.get_json(f"/api/v1/processes?{rng}")
        check([(p["pid"], p["comm"], p["value"]) for p in pr["processes"]] ==
              [("1", "train", 100), ("2", "other", 50)] and pr["total"] == 150, f"processes {pr}")
        sm = s.get_json(f"/api/v1/samples?buckets=10&from={T / 1e9:.3f}"
                        f"&to={(T + 1000 * MS) / 1e9:.3f}")
        check(sm["series"][0]["values"] == [20] * 5 + [10] * 5 and sm["step_ms"] == 100,
              f"samples in 100 ms buckets {sm}")
        sm = s.get_json(f"/api/v1/samples?buckets=2&group_by=comm&from={T / 1e9:.3f}"
                        f"&to={(T + 1000 * MS) / 1e9:.3f}")
        check({x["group"]: x["values"] for x in sm["series"]} ==
              {"train": [50, 50], "other": [50, 0]}, f"samples by comm {sm}")
        fg = s.get_json(f"/api/v1/flamegraph?{rng}&group_by=pid,comm")
        check({k["name"]: k["value"] for k in fg["root"]["children"]} ==
              {"1 train": 100, "2 other": 50} and
              find(find(find(fg["root"], "1 train"), "main"), "step")["value"] == 90,
              f"flame graph grouped by pid,comm {[k['name'] for k in fg['root']['children']]}")
        fg = s.get_json(f"/api/v1/flamegraph?{rng}&group_by=gpu")
        check({k["name"]: k["value"] for k in fg["root"]["children"]} == {"[no gpu]": 150},
              "a label the samples lack: one [no gpu] group")
        d = s.get_json(f"/api/v1/diff?{rng}&group_by=comm&selector={PID1}&selector2={PID2}")
        check({k["name"]: (k["value"], k["value2"]) for k in d["root"]["children"]} ==
              {"train": (100, 0), "other": (0, 50)}, "diff grouped by comm")
        # diff: A = pid 1, B = pid 2
        d = s.get_json(f"/api/v1/diff?{rng}&selector={PID1}&selector2={PID2}")
        check(d["root"]["value"] == 100 and d["root"]["value2"] == 50, f"diff root {d['root']}")
        check(find(d["root"], "idle_loop")["value"] == 0, "diff node only in B")
        # pprof
        code, body, hdrs = s.request(f"/api/v1/pprof?{rng}")
        check(code == 200 and body[:2] == b"\x1f\x8b", f"pprof {code}")
        pb = gzip.decompress(body)
        check(b"matmul" in pb and b"samples" in pb, "pprof content")
        # series: 1000 points -> 10 buckets of 100: min/avg/max
        sr = s.get_json(f"/api/v1/series?name=gpu_utilization&buckets=10"
                        f"&from={T / 1e9:.3f}&to={(T + 1000 * MS) / 1e9:.3f}")
        pts = sr["series"][0]["points"]
        check(len(pts) == 10 and pts[0][1:] == [0, 49.5, 99] and pts[9][3] == 999,
              f"buckets {pts[:2]}")
        check(sr["series"][0]["labels"] == {"gpu": "0", "node": "n1"}, "series labels")
        sr = s.get_json(f"/api/v1/series?name=gpu_utilization&buckets=5000&{rng}")
        check(len(sr["series"][0]["points"]) == 1000, "raw points when fewer than buckets")
        check(s.get_json("/api/v1/metric_names")["names"] == ["gpu_utilization"], "names")
        # kernel time: the traced share of the range (one 60 s window in 10 minutes)
        for ep in ("flamegraph", "top"):
            tr = s.get_json(f"/api/v1/{ep}?{rng}&kind=gpu_kernel_ns&selector={PID1}").get("traced")
            check(tr and tr["windows"] == 1 and abs(tr["fraction"] - 0.1) < 1e-6 and
                  not tr["truncated"], f"{ep}: traced {tr}")
        tr = s.get_json(f"/api/v1/flamegraph?{rng}&kind=gpu_kernel_ns&selector={PID2}")["traced"]
        check(tr["windows"] == 0 and tr["fraction"] == 0, f"no window of pid 2: {tr}")
        # intervals
        iv = s.get_json(f"/api/v1/intervals?{rng}&kind=gpu_kernel")
        check(len(iv["intervals"]) == 1 and iv["intervals"][0]["attrs"]["name"] == "gemm",
              f"intervals {iv}")
        check(abs(iv["intervals"][0]["start_ms"] - (T + 10 * MS) / 1e6) < 0.01, "start_ms")
        iv = s.get_json(f"/api/v1/intervals?{rng}&limit=1")
        check(len(iv["intervals"]) == 1 and iv["truncated"], "limit")
        # labels, values, nodes, stacks
        check(s.get_json("/api/v1/labels")["labels"] == ["comm", "gpu", "node", "pid", "source"],
              "labels")
        check(s.get_json("/api/v1/label/comm/values")["values"] == ["other", "train"], "values")
        v = s.get_json("/api/v1/label/comm/values?limit=1")
        check(v["values"] == ["other"] and v["total"] == 2 and v["next_offset"] == 1, f"page 1: {v}")
        v = s.get_json("/api/v1/label/comm/values?limit=1&offset=1")
        check(v["values"] == ["train"] and "next_offset" not in v, f"page 2: {v}")
        code, _, _ = s.request("/api/v1/label/comm/values?limit=0")
        check(code == 400, f"limit=0 refused: {code}")
        v = s.get_json(f"/api/v1/label/comm/values?selector={PID2}")
        check(v["values"] == ["other"], "values with selector")
        nodes = s.get_json("/api/v1/nodes")["nodes"]
        check(len(nodes) == 1 and nodes[0]["node"] == "n1", f"nodes {nodes}")
        iv = s.get_json(f"/api/v1/intervals?{rng}&kind=cuda_launch")
        sid = iv["intervals"][0]["attrs"]["stack_id"]
        st = s.get_json(f"/api/v1/stack/{sid}")
        check([f["function"] for f in st["frames"]] == ["matmul", "step", "main"],
              f"stack {sid}: {st}")
        code, _, _ = s.request("/api/v1/stack/999999")
        check(code == 404, "unknown stack")

        # compressed bodies and duplicates: the same batch id is stored once
        for enc in ("gzip", "zstd"):
            raw2 = encode(script().replace("node n1", "node n-" + enc), enc)
            code, body = s.ingest(raw2, enc)
            check(code == 204, f"{enc}: {code} {body}")
        code, _ = s.ingest(raw)
        check(code == 204, "duplicate accepted")
        check(s.metric("gpuscope_server_duplicate_batches_total") == 1, "duplicate counted")
        fg = s.get_json(f"/api/v1/flamegraph?{rng}&selector={NODE1}")
        check(fg["total"] == 150, f"duplicate not stored twice: {fg['total']}")
        fg = s.get_json(f"/api/v1/flamegraph?{rng}")
        check(fg["total"] == 450, f"three nodes: {fg['total']}")

        # bad input: 4xx, JSON error, counted, nothing stored
        # a version after this server's (it reads 1 and 2)
        version3 = bytes([0x08, 0x03, 0x12, 0x00, 0x12, 0x01, ord("x"), 0x18, 0x01])
        bad = [
            ("garbage", b"\xff\xff\xff\xff\xff", None, 400, "malformed"),
            ("truncated", raw[: len(raw) // 2], None, 400, "malformed"),
            ("bad gzip", b"\x1f\x8b\x08\x00garbage", "gzip", 400, "bad_encoding"),
            ("truncated gzip", gzip.compress(raw)[:50], "gzip", 400, "bad_encoding"),
            ("bad zstd", b"\x28\xb5\x2f\xfd\x00\x00garbage", "zstd", 400, "bad_encoding"),
            ("unknown encoding", raw, "br", 415, "unknown_encoding"),
            ("too large", b"\x00" * (1 << 20 + 1), None, 413, "too_large"),
            ("gzip bomb", gzip.compress(b"\x00" * (4 << 20)), "gzip", 413, "too_large"),
            ("version 3", version3, None, 400, "unsupported_version"),
        ]
        for what, body, enc, want, reason in bad:
            before = s.metric(f'gpuscope_server_rejected_total{{reason="{reason}"}}')
            code, resp = s.ingest(body, enc)
            check(code == want, f"{what}: HTTP {code}, want {want}")
            check("error" in json.loads(resp), f"{what}: JSON error")
            after = s.metric(f'gpuscope_server_rejected_total{{reason="{reason}"}}')
            check(after == before + 1, f"{what}: counted as {reason}")
        code, resp = s.ingest(version3)
        check(b"version" in resp, f"version error says so: {resp}")
        for what, path in [("selector", f"/api/v1/flamegraph?selector={q('{comm=')}"),
                           ("regex", f"/api/v1/flamegraph?selector={BADRE}"),
                           ("stacked quantifiers", "/api/v1/flamegraph?selector="
                            + q('{comm=~"a*****************************b"}')),
                           ("from > to", "/api/v1/flamegraph?from=2000&to=1000"),
                           ("bad time", "/api/v1/top?from=yesterday"),
                           ("bad kind", "/api/v1/flamegraph?kind=gpu"),
                           ("bad since", "/api/v1/series?name=x&since=forever")]:
            code, resp, _ = s.request(path)
            check(code == 400 and "error" in json.loads(resp), f"{what}: {code} {resp}")
        code, _, _ = s.request("/nonexistent-page")
        check(code in (200, 404), "UI or 404")
        fg = s.get_json(f"/api/v1/flamegraph?{rng}")
        check(fg["total"] == 450, f"nothing partial stored: {fg['total']}")
        check(s.metric("gpuscope_server_ingest_batches_total") == 4, "batches counted")
        estimate(s, rng)


def estimate(s, rng):
    """The GPU-idle estimator, the same on both backends (idle_est.h): node n3, GPU 1: GPM
    decided idle over [T, T+100ms) (exact: 10 samples); a budget window [T+1s, T+1.5s) busy
    for its first half, then idle (25 samples), stands for the undecided rest of its reach:
    [T, T+121.5s) less 0.1 s exact and its own 0.5 s = 120.9 s, so each of its idle samples
    weighs 1 + 120.9 / 0.5 = 242.8: 10 + 25 x 242.8 = 6080 samples, 25 x 241.8 = 6045 of them estimated."""
    lines = ["node n3"]
    for i in range(300):
        lines.append(f"sample {T + i * 10 * MS + MS} cpu 1 pid=3,comm=est step;f{i // 100}")
    lines.append(f"interval gpu_observed gpu=1,source=gpm {T} {T + 100 * MS} -")
    lines.append(f"interval gpu_observed gpu=1,source=kernels,reason=budget {T + 1000 * MS} "
                 f"{T + 1500 * MS} -")
    lines.append(f"interval gpu_busy gpu=1,source=kernels {T + 1000 * MS} {T + 1250 * MS} -")
    code, body = s.ingest(encode("\n".join(lines) + "\n"))
    check(code == 204, f"estimate batch: {code} {body}")
    n3 = q('{node="n3"}')
    fg = s.get_json(f"/api/v1/flamegraph?{rng}&gpu_idle=1&selector={n3}")
    e = fg["gpu_sources"]["estimate"]
    check(abs(fg["total"] - 6080) <= 1 and find(find(fg["root"], "step"), "f0")["value"] == 10,
          f"estimated total {fg['total']}")
    check(e["windows"] == 1 and abs(e["max_weight"] - 242.8) < 0.01 and
          abs(e["estimated_share"] - 6045 / 6080) < 1e-6 and
          abs(e["extrapolated"] - 120.9 / 600) < 1e-6 and abs(e["exact"] - 0.1 / 600) < 1e-6,
          f"estimate {e}")
    # the same window opened by the idle trigger decides only its own time: 10 + 25
    lines = ["node n3", f"interval gpu_observed gpu=2,source=kernels,reason=idle "
             f"{T + 1000 * MS} {T + 1500 * MS} -",
             f"interval gpu_busy gpu=2,source=kernels {T + 1000 * MS} {T + 1250 * MS} -",
             f"interval gpu_observed gpu=2,source=gpm {T} {T + 100 * MS} -"]
    code, body = s.ingest(encode("\n".join(lines) + "\n"))
    check(code == 204, f"estimate batch 2: {code} {body}")
    fg = s.get_json(f"/api/v1/flamegraph?{rng}&gpu_idle=2&selector={n3}")
    check(fg["total"] == 35 and fg["gpu_sources"]["estimate"]["estimated_share"] == 0 and
          "no duty-cycle trace window" in fg["gpu_sources"]["estimate"]["summary"],
          f"a triggered window: {fg['total']} {fg['gpu_sources']}")


def main():
    run(None)
    print("ok: sqlite")
    if not clickhouse.available():
        raise AssertionError("clickhouse-server missing: scripts/install-deps installs it")
    cl = clickhouse.Cluster(2).start()
    try:
        run(cl.server_args("api"))
    except Exception:
        for srv in cl.servers:
            print(srv.logtext(), file=sys.stderr)
        raise
    finally:
        cl.cleanup()
    print("ok: clickhouse (2 shards)")


main()
