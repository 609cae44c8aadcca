#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""`gpuscope mcp` driven by a test client over its stdin/stdout (docs/mcp.md): a real
gpuscope-server with a query token holding the efficiency fixture (one minute of node n1), reached
through a loopback proxy that can hold a request until told to let it go. initialize, ping,
tools/list, each tool with answers derived from the fixture, malformed messages (JSON-RPC errors),
a held (slow) query while a fast one is answered (and with one worker, ping answered while the
next call waits), and a held query cancelled
(notifications/cancelled: its transfer ends, it gets no answer), a wrong token, an https://
server trusted through --ca-file. Every stdout line must be a JSON-RPC message."""
import http.server
import json
import os
import queue
import select
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpuscope_server import ROOT, Server, encode, now_ns, skip_if_unbuilt  # noqa: E402
from lib import check, finish  # noqa: E402
import efficiency_fixture as fx  # noqa: E402

CLI = os.path.join(ROOT, ".output", "gpuscope")
skip_if_unbuilt()
S = 10**9
D = 60
T = (now_ns() // S - 600) * S
TOKEN = "mcp-test-token"


def wide_script(t0):
    """Process 400 (pod wide, namespace team-w): 300 distinct stacks, one sample each, so a
    folded flame graph outgrows a small max_bytes."""
    c = "pid=400,comm=wide,pod=wide,namespace=team-w,tid=400,thread=wide"
    L = ["node n1"]
    for k in range(300):
        L.append(f"sample {t0 + k * 100 * 10**6} cpu {k + 1} {c} "
                 f"main;dispatch;handler_number_{k:03d}_with_a_long_name")
    return "\n".join(L) + "\n"


class Proxy:
    """Forwards GETs to the server; a request whose URL holds 'hold' waits until release(), or
    until its client goes away (noted in self.gone)."""

    def __init__(self, target):
        self.target = target
        self.held = queue.Queue()
        self.release_ev = threading.Event()
        self.gone = queue.Queue()
        proxy = self

        class H(http.server.BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_GET(self):
                path = urllib.parse.unquote(self.path)
                if "hold" in path:
                    proxy.held.put(path)
                    while not proxy.release_ev.wait(0.05):
                        r, _, _ = select.select([self.connection], [], [], 0)
                        if r and self.connection.recv(1, socket.MSG_PEEK) == b"":
                            proxy.gone.put(path)
                            return
                h = {k: v for k, v in self.headers.items() if k.lower() == "authorization"}
                req = urllib.request.Request(proxy.target + self.path, headers=h)
                try:
                    with urllib.request.urlopen(req, timeout=60) as r:
                        code, body = r.status, r.read()
                except urllib.error.HTTPError as e:
                    code, body = e.code, e.read()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.httpd.daemon_threads = True
        self.url = "http://127.0.0.1:%d" % self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()


class Client:
    """A `gpuscope mcp` process; every stdout line is parsed (a non-JSON-RPC line fails)."""

    def __init__(self, server_url, token_file, *extra):
        self.p = subprocess.Popen([CLI, "mcp", "--server", server_url, "--token-file", token_file,
                                   *extra], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE)
        self.msgs = queue.Queue()
        self.all = []
        self.bad_lines = []
        self.next_id = 1
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.p.stdout:
            try:
                m = json.loads(line)
                if m.get("jsonrpc") != "2.0":
                    raise ValueError("not JSON-RPC 2.0")
            except ValueError:
                self.bad_lines.append(line)
                continue
            self.all.append(m)
            self.msgs.put(m)

    def send_raw(self, data):
        self.p.stdin.write(data if isinstance(data, bytes) else data.encode())
        self.p.stdin.flush()

    def send(self, method, params=None, id=True):
        m = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            m["params"] = params
        if id is True:
            id = self.next_id
            self.next_id += 1
        if id is not None:
            m["id"] = id
        self.send_raw(json.dumps(m) + "\n")
        return id

    def wait(self, id, timeout=60):
        """The answer to id (others that come first are kept for later)."""
        end = time.time() + timeout
        kept = []
        try:
            while True:
                m = self.msgs.get(timeout=max(0.01, end - time.time()))
                if m.get("id") == id:
                    return m
                kept.append(m)
        except queue.Empty:
            return None
        finally:
            for m in kept:
                self.msgs.put(m)

    def call(self, method, params=None, timeout=60):
        return self.wait(self.send(method, params), timeout)

    def tool(self, name, args=None, timeout=60):
        p = {"name": name}
        if args is not None:
            p["arguments"] = args
        return self.call("tools/call", p, timeout)

    def close(self):
        self.p.stdin.close()
        rc = self.p.wait(timeout=30)
        time.sleep(0.1)
        return rc


def text(res):
    return res["result"]["content"][0]["text"]


def main():
    srv = Server(token=TOKEN, args=["--gpu-hour-price", "2.00",
                                    "--gpu-hour-price", "NVIDIA H200=4.00"]).start()
    try:
        for script in (fx.script(T, D), wide_script(T)):
            code, body = srv.ingest(encode(script))
            assert code == 204, (code, body)
        proxy = Proxy(srv.url)
        tf = os.path.join(srv.tmp, "token")
        run(srv, proxy, tf)
    finally:
        srv.stop()
    finish()


def run(srv, proxy, tf):
    c = Client(proxy.url, tf)
    rng = {"from": str(T // S), "to": str(T // S + D)}
    ex = fx.expected(D)

    # -- lifecycle
    r = c.call("initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                              "clientInfo": {"name": "test", "version": "1"}})
    res = r and r.get("result", {})
    check(res.get("protocolVersion") == "2025-06-18" and "tools" in res.get("capabilities", {})
          and res.get("serverInfo", {}).get("name") == "gpuscope", f"initialize: {r}")
    r = c.call("initialize", {"protocolVersion": "1999-01-01"})
    check(r["result"]["protocolVersion"] == "2025-06-18", "an unknown version gets ours")
    c.send("notifications/initialized", id=None)
    r = c.call("ping")
    check(r == {"jsonrpc": "2.0", "id": r["id"], "result": {}}, f"ping: {r}")
    r = c.call("tools/list")
    tools = {t["name"]: t for t in r["result"]["tools"]}
    check(sorted(tools) == ["efficiency", "findings", "flamegraph", "nodes", "processes",
                            "timeline_summary", "top"], f"tools: {sorted(tools)}")
    check(all(t["inputSchema"]["type"] == "object" and t["inputSchema"]["additionalProperties"]
              is False and t["annotations"]["readOnlyHint"] for t in tools.values()),
          "every tool: an object schema, no extra properties, read-only")
    check(tools["top"]["inputSchema"]["properties"]["kind"]["enum"] ==
          ["cpu", "offcpu_ns", "gpu_kernel_ns", "cuda_sync_ns"], "top: kind enum")

    # -- each tool, against the fixture
    r = c.tool("nodes")
    check(not r["result"]["isError"] and
          [n["node"] for n in r["result"]["structuredContent"]["nodes"]] == ["n1"] and
          "n1: data from" in text(r), f"nodes: {r}")
    r = c.tool("processes", dict(rng, limit=2))
    procs = r["result"]["structuredContent"]["processes"]
    # train-b: 100 samples per 10 s cycle; wide: 300 samples of weight 1..300
    check([(p["pid"], p["value"]) for p in procs] == [("400", 45150), ("200", 10 * D)] and
          "pid 200 comm train" in text(r), f"processes: {[(p['pid'], p['value']) for p in procs]}")
    r = c.tool("flamegraph", dict(rng, selector='{pod="train-b"}'))
    lines = text(r).splitlines()
    check(lines[1:] == [f"main;train_loop;cuda_launch {5 * D}",
                        f"loader_main;next_batch;load_batch {4 * D}",
                        f"main;train_loop;log_metrics {1 * D}"] and
          lines[0].startswith(f"# unit samples, total {10 * D}, 3 stack(s); shown 3"),
          f"flamegraph folded: {lines}")
    r = c.tool("flamegraph", dict(rng, selector='{pod="wide"}', max_bytes=1024))
    lines = text(r).splitlines()
    body = "\n".join(x for x in lines if not x.startswith("#")) + "\n"
    sc = r["result"]["structuredContent"]
    check(len(body) <= 1024 and sc["stacks"] == 300 and 0 < sc["shown"] < 300 and
          lines[1].endswith(" 300") and "raise max_bytes" in lines[0] and
          len(lines) - 1 == sc["shown"], f"flamegraph bounded: {len(body)} bytes, {lines[:2]}")
    r = c.tool("top", dict(rng, selector='{pod="train-b",node="n1"}', gpu_idle="1", limit=5))
    fns = {f["name"]: f["self"] for f in r["result"]["structuredContent"]["functions"]
           if f["self"]}
    check(fns == {"load_batch": ex["causes_b"]["load_batch"],
                  "log_metrics": ex["causes_b"]["log_metrics"]} and
          any(x.startswith("80.00 ") and x.endswith(" load_batch") for x in text(r).splitlines()), f"top while GPU 1 idle: {fns}")
    r = c.tool("timeline_summary", dict(rng, selector='{pod="train-b"}'))
    sc = r["result"]["structuredContent"]
    gpus = {(g["node"], g["gpu"]): (round(g["busy_seconds"], 1), round(g["idle_seconds"], 1))
            for g in sc["gpus"]}
    ts = sc["thread_states"]
    check(gpus == {("n1", "1"): (ex["team-b"]["busy"], ex["team-b"]["idle"])},
          f"timeline_summary GPUs: {gpus}")
    check(round(ts["running_seconds"], 3) == 10 * D / 10 and
          {k: round(v, 3) for k, v in ts["blocked_by_reason"].items()} ==
          {"futex": 4 * D / 10, "io": 6 * D / 10} and len(sc["threads"]) == 2 and
          "busy share 50.0%" in text(r), f"timeline_summary states: {ts}")
    r = c.tool("timeline_summary", rng)
    gpus = {g["gpu"]: round(g["idle_seconds"], 1) for g in r["result"]["structuredContent"]["gpus"]}
    check(gpus == {"0": ex["team-a"]["idle"], "1": ex["team-b"]["idle"],
                   "2": ex["unheld"]["held"]}, f"timeline_summary, every GPU idle: {gpus}")
    r = c.tool("efficiency", dict(rng, limit=1, causes=1))
    sc = r["result"]["structuredContent"]
    w = sc["workloads"]
    check(len(w) == 1 and w[0]["workload"] == "team-b" and sc["workloads_left_out"] == 1 and
          abs(w[0]["idle_dollars"] - ex["team-b"]["idle_dollars"]) < 1e-6 and
          json.loads(text(r))["workloads"][0]["workload"] == "team-b" and
          w[0]["causes"]["functions"][0]["name"] == "load_batch", f"efficiency: {w}")
    check_findings(c, rng)

    # -- malformed input: JSON-RPC errors
    def err(line, code, id=None):
        c.send_raw(line + "\n")
        m = c.wait(id, 10)
        ok = m is not None and m.get("error", {}).get("code") == code and m["id"] == id
        check(ok, f"{line[:50]!r} -> {code}: {m}")

    err("this is not json", -32700)
    err('{"jsonrpc":"2.0","id":1,"method":', -32700)
    err("[]", -32600)
    err('[{"jsonrpc":"2.0","id":70,"method":"ping"}]', -32600)
    err('"ping"', -32600)
    err('{"jsonrpc":"2.0","id":71}', -32600, 71)
    err('{"jsonrpc":"1.0","id":72,"method":"ping"}', -32600, 72)
    err('{"jsonrpc":"2.0","id":{"a":1},"method":"ping"}', -32600)
    err('{"jsonrpc":"2.0","id":73,"method":"resources/read"}', -32601, 73)
    err('{"jsonrpc":"2.0","id":"s74","method":"tools/call","params":{"name":"rm"}}', -32602, "s74")
    err('{"jsonrpc":"2.0","id":75,"method":"tools/call","params":[1]}', -32602, 75)
    err('{"jsonrpc":"2.0","id":76,"method":"tools/call","params":{"name":"top",'
        '"arguments":{"since":"forever"}}}', -32602, 76)
    err('{"jsonrpc":"2.0","id":77,"method":"tools/call","params":{"name":"top",'
        '"arguments":{"limit":0}}}', -32602, 77)
    err('{"jsonrpc":"2.0","id":78,"method":"tools/call","params":{"name":"top",'
        '"arguments":{"color":"red"}}}', -32602, 78)
    err('{"jsonrpc":"2.0","id":79,"method":"tools/call","params":{"name":"top",'
        '"arguments":{"to":"1700000000"}}}', -32602, 79)
    err('{"jsonrpc":"2.0","id":80,"method":"tools/call","params":{"name":"flamegraph",'
        '"arguments":{"kind":"gpu"}}}', -32602, 80)
    err('{"jsonrpc":"2.0","id":81,"method":"initialize","params":{}}', -32602, 81)
    c.send_raw(b'{"jsonrpc":"2.0","id":82,"method":"\xff"}\n')
    m = c.wait(None, 10)
    check(m is not None and m["error"]["code"] == -32700, f"bytes that are not UTF-8: {m}")
    # a quoted argument cut inside a character (100 bytes of two-byte ones, then one more)
    err(json.dumps({"jsonrpc": "2.0", "id": 83, "method": "tools/call", "params": {
        "name": "top", "arguments": {"since": "x" + "\u00e9" * 80}}}), -32602, 83)
    # a notification of an unknown method gets nothing; the ping after it is the next answer
    c.send("notifications/whatever", {}, id=None)
    pid = c.send("ping")
    m = c.msgs.get(timeout=10)
    check(m.get("id") == pid and "result" in m, f"unknown notification unanswered: {m}")
    # the server's refusals are tool results with isError
    r = c.tool("top", {"selector": '{pod="'})
    check(r["result"]["isError"] and "HTTP 400" in text(r), f"bad selector: {r}")
    r = c.tool("efficiency", {"by": "no_such_label", "since": "2h"})
    check(r["result"]["isError"] and "HTTP 400" in text(r), f"unknown by: {r}")

    # -- a slow query beside fast ones, and a cancelled one
    slow = c.send("tools/call", {"name": "top", "arguments": {"selector": '{comm="hold1"}'}})
    held = proxy.held.get(timeout=30)
    t0 = time.time()
    fast = c.tool("nodes", timeout=30)
    check(fast is not None and not fast["result"]["isError"],
          f"a fast query answered while a slow one waits ({time.time() - t0:.2f} s)")
    check(c.wait(slow, 0.5) is None, f"the slow query is still waiting ({held})")
    cancelled = c.send("tools/call", {"name": "processes",
                                      "arguments": {"selector": '{comm="hold2"}'}})
    proxy.held.get(timeout=30)
    c.send("notifications/cancelled", {"requestId": cancelled, "reason": "test"}, id=None)
    try:
        gone = proxy.gone.get(timeout=20)
    except queue.Empty:
        gone = None
    check(gone is not None and "hold2" in gone, f"the cancelled query's transfer ended: {gone}")
    # one worker (--workers 1): ping is answered at once, a second call waits for the worker
    c3 = Client(proxy.url, tf, "--workers", "1")
    h3 = c3.send("tools/call", {"name": "top", "arguments": {"selector": '{comm="hold3"}'}})
    proxy.held.get(timeout=30)
    q3 = c3.send("tools/call", {"name": "nodes"})
    p3 = c3.call("ping", timeout=10)
    check(p3 is not None and "result" in p3 and c3.wait(q3, 0.5) is None,
          "one worker busy: ping answered at once, the next call waits its turn")
    q4 = c3.send("tools/call", {"name": "nodes"})  # queued too, then cancelled there
    c3.send("notifications/cancelled", {"requestId": q4}, id=None)
    proxy.release_ev.set()
    r = c.wait(slow, 30)
    check(r is not None and not r["result"]["isError"], f"the slow query answered once let go: {r}")
    r3, n3 = c3.wait(h3, 30), c3.wait(q3, 30)
    check(r3 is not None and n3 is not None and not n3["result"]["isError"],
          "one worker: both calls answered once the held one is let go")
    check(c3.close() == 0 and not c3.bad_lines, "one-worker client exits 0")
    check(not any(m.get("id") == q4 for m in c3.all), "a call cancelled in the queue got no answer")

    # -- a wrong token: the server's 401 as a tool error
    bad = os.path.join(os.path.dirname(tf), "bad-token")
    with open(bad, "w") as f:
        f.write("wrong\n")
    c2 = Client(srv.url, bad)
    r = c2.tool("nodes")
    check(r["result"]["isError"] and "HTTP 401" in text(r), f"wrong token: {r}")
    check(c2.close() == 0, "second client exits 0 at the end of its input")

    check_tls(tf)

    rc = c.close()
    check(rc == 0, f"exit 0 at the end of input (rc {rc})")
    check(not any(m.get("id") == cancelled for m in c.all), "the cancelled call got no answer")
    check(not c.bad_lines and not c2.bad_lines,
          f"stdout carries only JSON-RPC: {c.bad_lines[:3] + c2.bad_lines[:3]}")


def check_tls(tf):
    """An https:// server with a self-signed certificate: --ca-file trusts it (the CLI's TLS
    options), without it the transfer fails and the tool says why."""
    d = os.path.dirname(tf)
    cert, key = os.path.join(d, "cert.pem"), os.path.join(d, "key.pem")
    r = subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                        "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", key, "-out", cert,
                        "-days", "2", "-subj", "/CN=127.0.0.1", "-addext",
                        "subjectAltName=IP:127.0.0.1"], capture_output=True, text=True)
    if r.returncode:
        print("note: no openssl, TLS not checked: " + r.stderr[-200:])
        return
    srv = Server(token=TOKEN, args=["--tls-cert-file", cert, "--tls-key-file", key]).start()
    try:
        check(srv.url.startswith("https://"), f"TLS server: {srv.url}")
        c = Client(srv.url, tf, "--ca-file", cert)
        r = c.tool("nodes")
        check(not r["result"]["isError"] and r["result"]["structuredContent"]["nodes"] == [],
              f"https with --ca-file: {r}")
        check(c.close() == 0, "TLS client exits 0")
        c = Client(srv.url, tf)
        r = c.tool("nodes")
        check(r["result"]["isError"] and "certificate" in text(r).lower(),
              f"https without the CA: {text(r)}")
        c.close()
    finally:
        srv.stop()


def check_findings(c, rng):
    """findings: /api/v1/insights through the tool (its answer rendered, its JSON kept): team-b's
    starved data loader (GPU 1 idle 30 s, the launching thread blocked on a futex 80 % of it:
    24 GPU-s at $4/h), nothing for team-a (GPU 0 busy 90 %)."""
    r = c.tool("findings", dict(rng, by="namespace"))
    sc = r["result"].get("structuredContent", {})
    fs = [(f["id"], round(f["gpu_seconds_at_stake"], 1), round(f["dollars_at_stake"], 4),
           f["confidence"]) for f in sc.get("findings", [])]
    check(not r["result"]["isError"] and sc["by"] == "namespace" and
          fs == [("starved_dataloader:team-b", 24.0, round(24 / 3600 * 4, 4), "measured")],
          f"findings: {fs}")
    t = text(r)
    check("1. [starved_dataloader] team-b: " in t and "$0.03; confidence measured" in t and
          t.count("   evidence: ") == 2 and "-> /api/v1/flamegraph?" in t and "fix: " in t,
          f"findings text: {t[:400]}")
    r = c.tool("findings", dict(rng, selector='{namespace="team-a"}'))
    check(r["result"]["structuredContent"]["findings"] == [] and "no finding" in text(r),
          f"no finding for the healthy team-a: {text(r)[:200]}")


main()
