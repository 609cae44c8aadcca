#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
# `gpuscope timeline` against an HTTP endpoint that answers /api/v1/intervals exactly as
# docs/design.md specifies (the query parameters it receives are checked too): the strips
# put each state in the right buckets, fold summaries by their shares, mark CUDA syncs, and
# bad options get a usage error.
import http.server
import json
import os
import subprocess
import sys
import threading
import urllib.parse

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
CLI = os.path.join(ROOT, ".output", "gpuscope")
T0 = 1764669720.0  # Unix seconds, start of the range; 100 buckets of 10 ms over 1 s
seen = {}


def iv(tid, thread, s_ms, e_ms, **attrs):
    return {"labels": {"pid": "42", "tid": str(tid), "thread": thread, "comm": "train"},
            "kind": "thread_state", "start_ms": T0 * 1000 + s_ms,
            "end_ms": T0 * 1000 + e_ms, "attrs": attrs}


ANSWER = {"intervals": [
    # tid 42: running 0-300 ms, blocked (sleep) 300-500, runnable 500-520, running 520-1000
    iv(42, "train", 0, 300, state="running", cpu="1"),
    iv(42, "train", 300, 500, state="blocked", reason="sleep", stack_id="3"),
    iv(42, "train", 500, 520, state="runnable"),
    iv(42, "train", 520, 1000, state="running", cpu="0"),
    # tid 43: blocked in a CUDA sync 0-600, then a summary 600-1000 mostly runnable
    iv(43, "launcher", 0, 600, state="blocked", reason="cuda_sync"),
    iv(43, "launcher", 600, 1000, state="runnable", summary="1", running_ns="100000000",
       runnable_ns="300000000", blocked_ns="0"),
], "truncated": False}


class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        u = urllib.parse.urlparse(self.path)
        seen["path"] = u.path
        seen["q"] = urllib.parse.parse_qs(u.query)
        body = json.dumps(ANSWER).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *a):
        pass


def main():
    if not os.access(CLI, os.X_OK):
        print("skip: gpuscope not built")
        return 77
    srv = http.server.HTTPServer(("127.0.0.1", 0), H)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    url = "http://127.0.0.1:%d" % srv.server_port
    out = subprocess.run([CLI, "timeline", "--server", url, "--pid", "42", "--from", str(T0),
                          "--to", str(T0 + 1), "--width", "100", "--selector",
                          '{node="n1"}'], capture_output=True, text=True, timeout=30)
    print(out.stdout, out.stderr)
    assert out.returncode == 0, out.returncode
    q = seen["q"]
    assert seen["path"] == "/api/v1/intervals", seen
    assert q["kind"] == ["thread_state"], q
    assert q["selector"] == ['{pid="42",node="n1"}'], q
    assert abs(float(q["from"][0]) - T0) < 1e-6 and abs(float(q["to"][0]) - T0 - 1) < 1e-6, q
    rows = {}
    for line in out.stdout.splitlines():
        if "|" in line and "(" in line and not line.startswith("THREAD"):
            name, strip, pcts = line.split("|")
            rows[name.strip()] = (strip, pcts.split())
    a, b = rows["train (42)"][0], rows["launcher (43)"][0]
    assert len(a) == 100 and len(b) == 100, (len(a), len(b))
    assert a == "#" * 30 + "." * 20 + "-" * 2 + "#" * 48, a
    assert b == "S" * 60 + "-" * 40, b
    pa = rows["train (42)"][1]
    assert pa == ["78.0%", "2.0%", "20.0%"], pa
    pb = rows["launcher (43)"][1]
    assert pb == ["10.0%", "30.0%", "60.0%"], pb
    # usage errors: exit 2 with a message
    for bad in (["--width", "0"], ["--pid", "x"], []):
        args = [CLI, "timeline", "--server", url, "--since", "5m"] + bad
        if bad != []:
            args += ["--pid", "1"] if bad[0] != "--pid" else []
        r = subprocess.run(args, capture_output=True, text=True, timeout=30)
        assert r.returncode == 2 and "usage" in r.stderr, (bad, r.returncode, r.stderr)
    srv.shutdown()
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
