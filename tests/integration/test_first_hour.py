#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""What a new user meets in the first hour, against a live agent sampling every process of this
machine: processes ranked by samples, samples over time, the flame graph grouped by process,
the server's pprof typed and labelled like `record`'s (read by `go tool pprof`), plain HTML for a
client that takes no gzip, and both /metrics through promtool."""
import gzip
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.parse
import urllib.request

sys.path.insert(0, os.path.dirname(__file__))
from lib import go_tool, run  # noqa: E402
from pushlib import (Agent, PROGS, Scratch, Server, check, cpu_sampler_up, finish, http,  # noqa: E402
                     need_root_and_binaries, skip, start_workload, wait_until)

need_root_and_binaries()
tmp = Scratch("first-hour")
server = Server(tmp.path("data"), log=tmp.path("server.log"))
server.start()
# burn outlasts the test, however long the agents take to start (it is killed at the end)
work = start_workload(os.path.join(PROGS, "burn"), "900", "2")
node = "fh-%d" % os.getpid()
agent = None


def raw_get(url, headers=None):
    """GET with exactly these headers (urllib adds no Accept-Encoding); (status, headers, body)."""
    req = urllib.request.Request(url, headers=headers or {})
    with urllib.request.urlopen(req, timeout=10) as r:
        return r.status, r.headers, r.read()


try:
    # burn's two threads stay stopped while the agent starts (seconds of BPF verification on a
    # loaded machine, which two spinning threads only slow down), and again once the checks
    # that read its samples are done
    agent = Agent(server.url, ["--modules", "meta,cpu-sampler", "--push-interval", "1s",
                               "--frequency", "99", "--node", node], tmp.path("agent.log"),
                  hold=[work])
    if not cpu_sampler_up(agent):
        skip("the agent has no CPU sampler module (oncpu) here")
    pid = str(work.pid)
    nsel = '{node="%s"}' % node
    psel = '{node="%s",pid="%s"}' % (node, pid)
    # burn's two threads get at least a share of a CPU even on a loaded 2-core machine
    # the ranges below end 5 s ago, where every sample has arrived (1 s pushes) and totals hold
    # still: wait until that much of burn's history lies before them, however fast the agent came up
    def settled():
        t = time.time() - 5
        return server.query("flamegraph", selector=psel, **{
            "from": "%.3f" % (t - 300), "to": "%.3f" % t})["total"] >= 300
    ok = wait_until(settled, 90)
    check(ok, "the agent's samples of burn arrive")
    now = time.time() - 5
    rng = {"from": "%.3f" % (now - 300), "to": "%.3f" % now}

    # --- processes ranked by samples: every process that ran (burn, this test, the server: at
    # least two even on an idle machine), burn with its comm
    pr = server.query("processes", selector=nsel, limit=500, **rng)
    procs = pr["processes"]
    vals = [p["value"] for p in procs]
    check(vals == sorted(vals, reverse=True) and sum(vals) <= pr["total"] and pr["count"] >= 2,
          "processes sorted by samples, %d of them, %d samples" % (pr["count"], pr["total"]))
    mine = [p for p in procs if p["pid"] == pid]
    fl = server.query("flamegraph", selector=psel, **rng)
    check(len(mine) == 1 and mine[0]["comm"] == "burn" and mine[0]["value"] == fl["total"],
          "burn listed with its comm and as many samples as its flame graph (%r, %d)" %
          (mine[:1], fl["total"]))

    # --- samples over time: buckets add up to the flame graph's total
    sm = server.query("samples", selector=psel, buckets=30, **rng)
    vals = sm["series"][0]["values"] if sm["series"] else []
    check(len(vals) == 30 and sum(vals) == fl["total"] and abs(sm["step_ms"] - 10000) < 1,
          "samples over time: 30 buckets of 10 s summing to the flame graph's total (%d vs %d)" %
          (sum(vals), fl["total"]))
    near = {"from": "%.3f" % (now - 30), "to": "%.3f" % now}
    v1 = server.query("samples", selector=psel, buckets=30, **near)["series"][0]["values"]
    check(sum(1 for v in v1 if v) >= 2 and
          sum(v1) == server.query("flamegraph", selector=psel, **near)["total"],
          "1 s buckets: samples spread over several, adding up (%r)" % v1)
    sg = server.query("samples", selector=nsel, buckets=10, group_by="pid", **rng)
    byg = {s["group"]: s["total"] for s in sg["series"]}
    check(byg.get(pid) == fl["total"], "samples grouped by pid: burn's series (%r)" % byg.get(pid))

    # --- the flame graph of the node grouped by process: one root child per process
    fg = server.query("flamegraph", selector=nsel, group_by="pid,comm", **rng)
    kids = {k["name"]: k["value"] for k in fg["root"]["children"]}
    check(kids.get(pid + " burn") == fl["total"] and sum(kids.values()) == fg["total"],
          "group_by=pid,comm: root children are processes, '%s burn' has its samples" % pid)
    fgt = server.query("flamegraph", selector=psel, group_by="thread", **rng)
    check({k["name"] for k in fgt["root"]["children"]} >= {"burn"} and fgt["total"] == fl["total"],
          "group_by=thread: the threads of burn (%r)" % [k["name"] for k in fgt["root"]["children"]])
    st, body = http("%s/api/v1/flamegraph?group_by=a%%20b" % server.url)
    check(st == 400 and b"group_by" in body, "a bad group_by is a 400 that says why")

    # --- pprof: sample types, period and labels as `gpuscope-agent record`'s
    st, body = http("%s/api/v1/pprof?selector=%s&from=%s&to=%s" % (
        server.url, urllib.parse.quote(psel), rng["from"], rng["to"]))
    pp = tmp.path("cpu.pb.gz")
    open(pp, "wb").write(body)
    check(st == 200 and len(gzip.decompress(body)) > 100, "pprof answered")
    go = go_tool()
    if go:
        r = run([go, "tool", "pprof", "-raw", pp], env={"HOME": tmp.dir, "GOFLAGS": "-mod=mod"})
        check(r.returncode == 0 and "Period: 10101010" in r.stdout and
              "samples/count cpu/nanoseconds" in r.stdout,
              "pprof: samples/count and cpu/nanoseconds, Period 1e9/99 ns")
        check(re.search(r"comm:\[burn\]", r.stdout) is not None and
              re.search(r"pid:\[%s\]" % pid, r.stdout) is not None and
              re.search(r"node:\[%s\]" % node, r.stdout) is not None,
              "pprof samples carry comm, pid and node labels")
        r = run([go, "tool", "pprof", "-tags", pp], env={"HOME": tmp.dir})
        check(r.returncode == 0 and re.search(r"comm: Total", r.stdout) and
              re.search(r"\bburn\b", r.stdout) and re.search(r"tid: Total", r.stdout),
              "go tool pprof -tags lists comm and tid")
        r = run([go, "tool", "pprof", "-top", "-tagfocus", "comm=burn", pp], env={"HOME": tmp.dir})
        check(r.returncode == 0 and "File: burn" in r.stdout and "leaf_alpha" in r.stdout,
              "pprof: named after the program (File: burn), -tagfocus comm=burn keeps its samples")
    else:
        print("go not installed: pprof not read by go tool pprof")

    # --- the web UI in a real browser against this live agent (tests/e2e/ui_live.mjs)
    root = os.path.join(os.path.dirname(__file__), "..", "..")
    if os.access("/usr/bin/chromium", os.X_OK) and os.path.exists(
            os.path.join(root, "ui/node_modules/playwright-core/package.json")):
        r = subprocess.run(["node", os.path.join(root, "tests/e2e/ui_live.mjs"), "--url", server.url,
                            "--node", node, "--pid", pid, "--comm", "burn",
                            "--out", os.path.join(root, ".output/e2e-live")],
                           capture_output=True, text=True, timeout=180)
        print(r.stdout + r.stderr)
        check(r.returncode == 0, "UI against the live agent: picker, samples chart and brush, "
              "group-by, URL round trip (tests/e2e/ui_live.mjs)")
    else:
        print("chromium or playwright-core missing: the live UI check did not run")

    # nothing below reads burn's samples: its CPU goes to the agent with every module instead
    work.send_signal(signal.SIGSTOP)

    # --- HTTP: no Accept-Encoding, plain HTML; with gzip, gzip
    st, hdr, body = raw_get(server.url + "/")
    check(st == 200 and hdr.get("Content-Encoding") is None and body.lstrip().startswith(b"<!"),
          "GET / without Accept-Encoding: plain HTML (%r)" % body[:20])
    st, hdr, body = raw_get(server.url + "/", {"Accept-Encoding": "gzip, deflate"})
    check(st == 200 and hdr.get("Content-Encoding") == "gzip" and
          gzip.decompress(body).lstrip().startswith(b"<!"), "GET / with Accept-Encoding: gzip")
    st, hdr, body = raw_get(server.url + "/", {"Accept-Encoding": "gzip;q=0, br"})
    check(st == 200 and hdr.get("Content-Encoding") is None, "gzip;q=0 refuses gzip")
    # --- both /metrics pass promtool, with one prefix scheme and versioned _info: an agent with
    # every module (NVML from the replay library of the H200 trace) beside the server
    promtool = shutil.which("promtool")
    out = os.path.join(os.path.dirname(__file__), "..", "..", ".output")
    replay = os.path.join(out, "tests", "nvml", "libnvidia-ml.so.1")
    trace = os.path.join(os.path.dirname(__file__), "..", "data", "nvml", "h200.trace.gz")
    alog = tmp.path("agent-all.log")
    # cuda_probe stays off: on a shared test machine it attaches to every libcuda stand-in of
    # other test runs, which holds /metrics for seconds (its families: test_cuda_probe)
    env = dict(os.environ, GPUSCOPE_NVML_REPLAY=trace, GPUSCOPE_NVML_REPLAY_SPEED="10",
               GPUSCOPE_AGENT_MODULES_OFF="cuda_probe")
    # the kernel's BPF run-time accounting on, so that the agent's per-program families are
    # exported (and linted) too; restored below
    stats_path = "/proc/sys/kernel/bpf_stats_enabled"
    stats_was = open(stats_path).read().strip()
    with open(stats_path, "w") as f:
        f.write("1")
    full = subprocess.Popen([os.path.join(out, "gpuscope-agent"), "run", "--server", server.url,
                             "--push-interval", "1s", "--node", node + "-all", "--metrics-listen",
                             "127.0.0.1:0"] + (["--nvml-library", replay] if os.path.exists(replay) else []),
                            stdout=open(alog, "ab"), stderr=subprocess.STDOUT, env=env)
    try:
        m = wait_until(lambda: full.poll() is not None or
                       re.search(r"metrics: (http://\S+/metrics)", open(alog, errors="replace").read()), 60)
        check(full.poll() is None and m, "agent with every module up (%s)" % open(alog).read()[-300:])
        # utilization comes from the driver's sample buffer: its first value takes a few polls
        want = b"DCGM_FI_DEV_GPU_UTIL" if os.path.exists(replay) else b"gpuscope_agent_info"

        def scrape():
            body = http(m.group(1), timeout=20)[1]
            return body if want in body else None
        got = (wait_until(scrape, 60) or http(m.group(1), timeout=20)[1]) if m else b""
        texts = {"agent": (got or b"").decode(), "server": http(server.url + "/metrics")[1].decode()}
        for who, text in texts.items():
            fams = re.findall(r"^# TYPE (\S+) (\S+)$", text, re.M)
            names = {f for f, _ in fams}
            helps = set(re.findall(r"^# HELP (\S+) ", text, re.M))
            samples = set(re.findall(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)[{ ]", text, re.M))
            check(len(fams) >= 20 and names == helps, "%s: %d families, each with HELP and TYPE" % (who, len(fams)))
            own = "gpuscope_%s_" % who
            odd = sorted(n for n in names if not n.startswith(own) and not n.startswith("DCGM_FI_"))
            check(not odd, "%s: every family is %s* (or dcgm-exporter's DCGM_FI_*) %r" % (who, own, odd[:5]))
            untyped = sorted(x for x in samples if not any(x == n or x.startswith(n + "_") for n in names))
            check(not untyped, "%s: every sample belongs to a declared family %r" % (who, untyped[:5]))
            labels = set(re.findall(r"[{,]([a-zA-Z_][a-zA-Z0-9_]*)=\"", "\n".join(
                l for l in text.splitlines() if l.startswith("gpuscope_"))))
            check(all(l == l.lower() for l in labels), "%s: snake_case labels on gpuscope_* (%s)" % (who, sorted(labels)))
            check(re.search(r'^gpuscope_%s_info\{[^}]*version="[^"]+"' % who, text, re.M) is not None,
                  "%s: gpuscope_%s_info carries the version" % (who, who))
            if promtool:
                # dcgm-exporter's families keep its camelCase labels (UUID, modelName): the one
                # lint promtool may report, and only on DCGM_FI_* families
                r = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True)
                lint = [l for l in (r.stdout + r.stderr).splitlines() if l.strip()]
                other = [l for l in lint if not re.match(
                    r"DCGM_FI_\S+ label names should be written in 'snake_case' not 'camelCase'$", l)]
                check(r.returncode in (0, 3) and not other,
                      "%s: promtool check metrics: clean but for dcgm-exporter's own labels (%d lines; %s)" %
                      (who, len(lint), "; ".join(other[:6])))
        if not promtool:
            print("promtool missing (Debian: prometheus): not run")
        runs = {p: float(v) for p, v in re.findall(
            r'^gpuscope_agent_bpf_runs_total\{program="(\w+)",id="\d+"\} (\S+)$', texts["agent"], re.M)}
        check(runs.get("on_switch", 0) > 0 and "gpuscope_agent_bpf_stats_enabled 1" in texts["agent"],
              "the agent's BPF programs' runs and run time on /metrics (%s)" % sorted(runs.items())[:4])
        check("DCGM_FI_DEV_GPU_UTIL" in texts["agent"] or not os.path.exists(replay),
              "the agent's NVML families are dcgm-exporter's names (%s)" %
              sorted(set(re.findall(r"^(DCGM_FI_\w+)", texts["agent"], re.M))))
    finally:
        with open(stats_path, "w") as f:
            f.write(stats_was)
        full.terminate()
        try:
            full.wait(60)
        except subprocess.TimeoutExpired:
            full.kill()
            full.wait()

    # --- a request the client gives up on (the UI aborts superseded queries) is no error
    import socket
    for _ in range(10):
        so = socket.create_connection(("127.0.0.1", server.port))
        so.sendall(b"GET /api/v1/pprof?since=1h HTTP/1.1\r\nHost: x\r\n\r\n")
        so.close()
    time.sleep(1)
    log = open(server.log, errors="replace").read()
    check("warning: http" not in log and "error: http" not in log,
          "cancelled requests: no error in the server log (%r)" % log[-300:])
    # the server may still be computing the abandoned profiles (seconds each on a loaded
    # 2-core machine), which holds /metrics back: wait for it rather than for 10 s
    got = []
    wait_until(lambda: got.append(http(server.url + "/metrics", timeout=30)) or
               got[-1][0] == 200, 120)
    check(got and got[-1][0] == 200 and b"gpuscope_server_http_cancelled_total" in got[-1][1],
          "cancelled requests counted apart")
finally:
    if agent:
        agent.stop()
    work.kill()
    work.wait()
    server.stop()
    tmp.cleanup()
finish()
