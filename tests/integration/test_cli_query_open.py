#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The opening `gpuscope flamegraph`, `top`, `pprof` and `report` share (query_open() in
src/cli/client.c): the request each sends to a real HTTP server on loopback (endpoint, the
default range: 1h, a report's 24h; a report's default grouping), the exit status after -h (0)
and on a usage error (2, nothing sent). The server answers 500, so each command ends there."""
import os
import subprocess
import sys
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CLI = os.path.join(ROOT, ".output", "gpuscope")
fails = []
seen = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        fails.append(what)


class Handler(BaseHTTPRequestHandler):
    def do_GET(self):
        seen.append(self.path)
        body = b'{"error":"test server"}'
        self.send_response(500)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *a):
        pass


def run(url, *args):
    env = dict(os.environ)
    env.pop("GPUSCOPE_SERVER", None)
    env.pop("GPUSCOPE_TOKEN_FILE", None)
    seen.clear()
    r = subprocess.run([CLI] + list(args) + (["--server", url] if url else []),
                       capture_output=True, text=True, timeout=60, env=env)
    req = None
    if seen:
        u = urllib.parse.urlsplit(seen[-1])
        req = (u.path, dict(urllib.parse.parse_qsl(u.query)))
    return r, req


def main():
    if not os.access(CLI, os.X_OK):
        print("skip: .output/gpuscope is not built")
        return 77
    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{srv.server_address[1]}"
    try:
        cases = [
            (["top"], "/api/v1/top", {"since": "1h"}),
            (["top", "--since", "5m", "--selector", "comm=x"], "/api/v1/top",
             {"since": "5m", "selector": "comm=x"}),
            (["pprof", "-o", os.devnull], "/api/v1/pprof", {"since": "1h"}),
            (["flamegraph", "-o", os.devnull, "--gpu-idle", "0"], "/api/v1/flamegraph",
             {"since": "1h", "gpu_idle": "0"}),
            (["report"], "/api/v1/efficiency", {"since": "24h", "by": "namespace"}),
            (["report", "--since", "2h", "--by", "pod"], "/api/v1/efficiency",
             {"since": "2h", "by": "pod"}),
            (["report", "--sin", "3h"], "/api/v1/efficiency", {"since": "3h", "by": "namespace"}),
            (["report", "--from", "1700000000", "--to", "1700003600"], "/api/v1/efficiency",
             {"from": "1700000000.000000000", "to": "1700003600.000000000", "by": "namespace"}),
        ]
        for args, path, want in cases:
            r, req = run(url, *args)
            what = "gpuscope " + " ".join(args)
            check(r.returncode == 1, f"{what}: exit 1 on the server's 500 (got {r.returncode})")
            check(req is not None and req[0] == path, f"{what}: asks {path} (got {req})")
            if req:
                got = {k: v for k, v in req[1].items() if k in want or k in ("since", "from")}
                check(got == want, f"{what}: parameters {want} (got {req[1]})")
        for cmd in ("top", "pprof", "flamegraph", "report"):
            r, req = run(None, cmd, "-h")
            check(r.returncode == 0 and "usage: gpuscope " + cmd in r.stdout and req is None,
                  f"gpuscope {cmd} -h: usage on stdout, exit 0 (got {r.returncode})")
            r, req = run(url, cmd, "--no-such-option")
            check(r.returncode == 2 and req is None and "unknown option" in r.stderr,
                  f"gpuscope {cmd} --no-such-option: exit 2, nothing sent (got {r.returncode})")
        r, req = run(None, "top")
        check(r.returncode == 2 and "--server" in r.stderr, "gpuscope top without --server: exit 2")
    finally:
        srv.shutdown()
    print("FAILED: " + "; ".join(fails) if fails else "all passed")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
