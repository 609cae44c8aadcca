#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Auth that covers every path (issue 36 items 7 and 8): /metrics refused without the query
token (or --metrics-token-file's) when one is set, /healthz for probes with none; on the
loopback default a request naming a foreign Host (DNS rebinding) is refused 403 while
localhost, IP literals and --allowed-hosts are served; a browser's cross-origin POST (ingest,
capture) is refused 403 and stores nothing."""
import os
import socket

from gpuscope_server import Server, check, encode, now_ns, running, skip_if_unbuilt

skip_if_unbuilt()
T = now_ns() - 60 * 10**9


def raw(s, method, path, host, token=None, body=b"", extra=""):
    """One request with the Host header given; the status code."""
    hp = s.url.split("://", 1)[1]
    h, p = hp.rsplit(":", 1)
    c = socket.create_connection((h, int(p)), timeout=20)
    try:
        req = f"{method} {path} HTTP/1.1\r\nConnection: close\r\nContent-Length: {len(body)}\r\n"
        if host is not None:
            req += f"Host: {host}\r\n"
        if token:
            req += f"Authorization: Bearer {token}\r\n"
        c.sendall((req + extra + "\r\n").encode() + body)
        data = b""
        while b"\r\n" not in data:
            chunk = c.recv(4096)
            if not chunk:
                break
            data += chunk
    finally:
        c.close()
    return int(data.split(b" ", 2)[1]) if data.startswith(b"HTTP/") else 0


def hosts():
    with running(Server(token="tok")) as s:
        port = s.url.rsplit(":", 1)[1]
        for host in (f"127.0.0.1:{port}", f"localhost:{port}", "localhost", "LOCALHOST.",
                     f"ui.localhost:{port}", "[::1]:7070", "10.1.2.3", socket.gethostname()):
            code = raw(s, "GET", "/api/v1/nodes", host, "tok")
            check(code == 200, f"Host {host!r} served: {code}")
        for host in (f"evil.example:{port}", "evil.example", "127.0.0.1.evil.example",
                     "localhost.evil.example", ""):
            code = raw(s, "GET", "/api/v1/nodes", host, "tok")
            check(code == 403, f"Host {host!r} refused: {code}")
            code = raw(s, "GET", "/", host)
            check(code == 403, f"Host {host!r}: the UI refused too: {code}")
        check(raw(s, "GET", "/healthz", "evil.example") == 200, "/healthz for any Host")
        check(s.metric('gpuscope_server_rejected_total{reason="foreign_host"}') == 10,
              "foreign Hosts counted")

        # a browser's cross-origin simple POSTs: refused, nothing stored
        body = encode(f"node xo\nsample {T} cpu 1 pid=1,comm=xo main;xo\n")
        evil = "Origin: http://evil.example\r\nContent-Type: text/plain\r\n"
        code = raw(s, "POST", "/api/v1/ingest", f"127.0.0.1:{port}", "tok", body, evil)
        check(code == 403, f"cross-origin ingest refused: {code}")
        code = raw(s, "POST", "/api/v1/capture?node=n&duration=1s", f"127.0.0.1:{port}", "tok",
                   b"", evil)
        check(code == 403, f"cross-origin capture refused: {code}")
        code = raw(s, "POST", "/api/v1/capture?node=n&duration=1s", f"127.0.0.1:{port}", "tok",
                   b"", "Origin: null\r\n")
        check(code == 403, f"an opaque origin's capture refused: {code}")
        nodes = s.get_json("/api/v1/nodes")
        check(not any(n.get("node") == "xo" for n in nodes["nodes"]), f"nothing stored: {nodes}")
        same = f"Origin: http://127.0.0.1:{port}\r\n"
        code = raw(s, "POST", "/api/v1/capture?node=n&duration=1s", f"127.0.0.1:{port}", "tok",
                   b"", same)
        check(code == 200, f"a same-origin POST (the UI) served: {code}")
        code = raw(s, "POST", "/api/v1/ingest", f"127.0.0.1:{port}", "tok", body)
        check(code == 204, f"the agent's POST (no Origin) served: {code}")
        check(s.metric('gpuscope_server_rejected_total{reason="cross_origin"}') == 3,
              "cross-origin POSTs counted")
    s = Server(token="tok", args=["--allowed-hosts", "gpuscope.example, other.example"])
    with running(s):
        check(raw(s, "GET", "/api/v1/nodes", "gpuscope.example:7070", "tok") == 200,
              "--allowed-hosts: a listed name served")
        check(raw(s, "GET", "/api/v1/nodes", "OTHER.example", "tok") == 200,
              "--allowed-hosts: case-insensitive")
        check(raw(s, "GET", "/api/v1/nodes", "evil.example", "tok") == 403,
              "--allowed-hosts: another name refused")
    # beyond loopback without a list: names we cannot know are served
    s = Server(token="tok", args=["--listen", "0.0.0.0:0"])
    with running(s):
        s.url = s.url.replace("0.0.0.0", "127.0.0.1")
        check(raw(s, "GET", "/api/v1/nodes", "gpu-box.corp:7070", "tok") == 200,
              "a non-loopback listen serves any Host")
    print("hosts: foreign Host 403 on loopback, localhost/IPs/--allowed-hosts served; "
          "cross-origin POSTs 403")


def metrics():
    s = Server()
    for name, tok in (("itok", "ingest-secret"), ("qtok", "query-secret"),
                      ("mtok", "metrics-secret")):
        with open(os.path.join(s.tmp, name), "w") as f:
            f.write(tok + "\n")
    split = ["--ingest-token-file", os.path.join(s.tmp, "itok"),
             "--query-token-file", os.path.join(s.tmp, "qtok")]
    s.args = split
    with running(s):
        for tok, want in ((None, 401), ("ingest-secret", 401), ("wrong", 401),
                          ("query-secret", 200)):
            code, _, _ = s.request("/metrics", token=tok if tok else False)
            check(code == want, f"/metrics with {tok}: {code}, want {want}")
        code, body, _ = s.request("/healthz", token=False)
        check(code == 200 and body == b"ok\n", f"/healthz without a token: {code} {body!r}")
    s2 = Server(data=os.path.join(s.tmp, "d2"),
                args=split + ["--metrics-token-file", os.path.join(s.tmp, "mtok")])
    with running(s2):
        for tok, want in ((None, 401), ("ingest-secret", 401), ("metrics-secret", 200),
                          ("query-secret", 200)):
            code, _, _ = s2.request("/metrics", token=tok if tok else False)
            check(code == want, f"--metrics-token-file: /metrics with {tok}: {code}")
        code, _, _ = s2.request("/api/v1/labels", token="metrics-secret")
        check(code == 401, f"the metrics token reads no profiles: {code}")
    with running(Server(data=os.path.join(s.tmp, "d3"))) as s3:
        code, _, _ = s3.request("/metrics")
        check(code == 200, f"no tokens: /metrics open as before: {code}")
    print("metrics: 401 without the query or metrics token; /healthz open")


def main():
    hosts()
    metrics()
    print("ok")


main()
