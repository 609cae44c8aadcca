#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The agent's one HTTP link to the server (issue #32, item 4): the push and the capture poll
share its settings, so both go
- through a TLS front that requires a client certificate (a relay to the real server, as an
  mTLS proxy in front of it would be): the agent with --ca-file, --client-cert and --client-key
  delivers its samples and answers a capture request; one without --client-cert is refused at
  the handshake and keeps its batches;
- through an HTTP forward proxy (--proxy) to a server name only the proxy knows: samples and
  capture polls arrive, and the proxy saw both kinds of request.
Three agents, started together, each with the NVML poller over the recorded H200 trace (no BPF
to load: the agents are up in seconds)."""
import http.client
import os
import re
import select
import socket
import ssl
import subprocess
import sys
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

sys.path.insert(0, os.path.dirname(__file__))
from pushlib import (CLI, OUT, Agent, Scratch, Server, check, finish,  # noqa: E402
                     need_root_and_binaries, skip, wait_until)

need_root_and_binaries()
NVML_REPLAY = os.path.join(OUT, "tests", "nvml", "libnvidia-ml.so.1")
NVML_TRACE = os.path.join(os.path.dirname(__file__), "..", "data", "nvml", "h200x8.trace.gz")
if not os.path.exists(NVML_REPLAY):
    raise AssertionError(NVML_REPLAY + " is not built")
os.environ.update(GPUSCOPE_NVML_REPLAY=NVML_TRACE, GPUSCOPE_NVML_REPLAY_SPEED="4")
tmp = Scratch("http-link")


def openssl(*args):
    r = subprocess.run(["openssl"] + list(args), capture_output=True, text=True)
    if r.returncode:
        skip("openssl: " + r.stderr[-200:])


for name, cn, ext in (("front", "127.0.0.1", ["-addext", "subjectAltName=IP:127.0.0.1"]),
                      ("client", "gpuscope-agent", [])):
    openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
            "-nodes", "-keyout", tmp.path(name + ".key"), "-out", tmp.path(name + ".pem"),
            "-days", "2", "-subj", "/CN=" + cn, *ext)


class Front:
    """TLS on a port, a client certificate required (the client's own, as its CA); each
    connection that passes the handshake is relayed byte for byte to the server's port."""

    def __init__(self, target_port):
        self.ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.ctx.load_cert_chain(tmp.path("front.pem"), tmp.path("front.key"))
        self.ctx.verify_mode = ssl.CERT_REQUIRED
        self.ctx.load_verify_locations(tmp.path("client.pem"))
        self.target = target_port
        self.ok = self.refused = 0
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self.accept, daemon=True).start()

    def accept(self):
        while True:
            c, _ = self.sock.accept()
            threading.Thread(target=self.relay, args=(c,), daemon=True).start()

    def relay(self, c):
        try:
            t = self.ctx.wrap_socket(c, server_side=True)
        except (ssl.SSLError, OSError):
            self.refused += 1
            c.close()
            return
        self.ok += 1
        u = socket.create_connection(("127.0.0.1", self.target))
        try:
            while True:
                r, _, _ = select.select([t, u], [], [], 60)
                if not r:
                    break
                for s in r:
                    data = s.recv(65536)
                    if not data:
                        return
                    (u if s is t else t).sendall(data)
        except (ssl.SSLError, OSError):
            pass
        finally:
            t.close()
            u.close()


class Proxy(BaseHTTPRequestHandler):
    """An HTTP forward proxy that alone knows where PROXIED_HOST is; counts paths seen."""
    seen = {}
    target = None

    def forward(self):
        u = urllib.parse.urlsplit(self.path)
        if u.hostname != PROXIED_HOST:
            self.send_error(502)
            return
        path = u.path + ("?" + u.query if u.query else "")
        Proxy.seen[u.path] = Proxy.seen.get(u.path, 0) + 1
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        conn = http.client.HTTPConnection("127.0.0.1", Proxy.target, timeout=30)
        hdrs = {k: v for k, v in self.headers.items() if k.lower() not in
                ("proxy-connection", "connection", "host")}
        conn.request(self.command, path, body=body or None, headers=hdrs)
        r = conn.getresponse()
        data = r.read()
        self.send_response(r.status)
        for k, v in r.getheaders():
            if k.lower() not in ("transfer-encoding", "connection", "content-length"):
                self.send_header(k, v)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
        conn.close()

    do_GET = do_POST = forward

    def log_message(self, *a):
        pass


PROXIED_HOST = "gpuscope-behind-proxy.invalid"
server = Server(tmp.path("data"), log=tmp.path("server.log"))
server.start()
front = Front(server.port)
Proxy.target = server.port
proxy = ThreadingHTTPServer(("127.0.0.1", 0), Proxy)
threading.Thread(target=proxy.serve_forever, daemon=True).start()
agents = []
RANGE = {"from": "%.3f" % (time.time() - 600), "to": "%.3f" % (time.time() + 3600)}


def samples(node):
    """GPU power series the server holds of node."""
    return len(server.query("series", name="gpu_power_watts", selector='{node="%s"}' % node,
                            **RANGE)["series"])


try:
    common = ["--modules", "nvml", "--nvml-library", NVML_REPLAY, "--push-interval", "1s",
              "--retry-max", "1s"]
    front_url = "https://127.0.0.1:%d" % front.port
    mtls = Agent(front_url, common + ["--node", "link-mtls", "--ca-file", tmp.path("front.pem"),
                                      "--client-cert", tmp.path("client.pem"),
                                      "--client-key", tmp.path("client.key")],
                 tmp.path("agent-mtls.log"), wait=False)
    agents.append(mtls)
    nocert = Agent(front_url, common + ["--node", "link-nocert",
                                        "--ca-file", tmp.path("front.pem")],
                   tmp.path("agent-nocert.log"), wait=False)
    agents.append(nocert)
    proxied = Agent("http://%s:%d" % (PROXIED_HOST, server.port),
                    common + ["--node", "link-proxy",
                              "--proxy", "http://127.0.0.1:%d" % proxy.server_address[1]],
                    tmp.path("agent-proxy.log"), wait=False)
    agents.append(proxied)
    for a in agents:
        a.wait_up()
    check(wait_until(lambda: samples("link-mtls") > 0, 60),
          "client certificate: GPU series delivered through the TLS front")
    r = subprocess.run([CLI, "capture", "--server", server.url, "--node", "link-mtls", "--pid",
                        "1", "--duration", "200ms", "-o", tmp.path("trace.json")],
                       capture_output=True, text=True, timeout=60)
    # no CUDA here: the agent's answer says so, which it posted through the front
    m = re.search(r"agent: (ok|not_injected|unavailable)\b.*", r.stderr)
    check(m is not None, "client certificate: the capture poll answered through the same front "
          "(%s)" % (m.group(0) if m else r.stderr.strip()[-200:]))
    check(wait_until(lambda: samples("link-proxy") > 0, 60) and
          wait_until(lambda: Proxy.seen.get("/api/v1/capture/pending", 0) > 0, 10),
          "proxy: GPU series delivered and captures polled through it (%s)" % Proxy.seen)
    wait_until(lambda: nocert.metric("gpuscope_agent_push_failures_total") > 0, 20)
    res = {k.split('result="')[1].rstrip('"}'): v for k, v in nocert.metrics().items()
           if k.startswith('gpuscope_agent_http_requests_total{link="server"')}
    check(nocert.metric("gpuscope_agent_push_failures_total") > 0 and
          samples("link-nocert") == 0 and front.refused > 0 and res.get("ok") == 0 and
          sum(res.values()) > 0,
          "no client certificate: refused at the handshake (%d refused; the agent's requests "
          "by result: %s), nothing stored" % (front.refused, {k: v for k, v in res.items() if v}))
    res = {k.split('result="')[1].rstrip('"}'): v for k, v in mtls.metrics().items()
           if k.startswith('gpuscope_agent_http_requests_total{link="server"')}
    check(res.get("ok", 0) > 0, "with the certificate: requests ok (%s)"
          % {k: v for k, v in res.items() if v})
finally:
    for a in agents:
        a.stop()
    proxy.shutdown()
    server.stop()
tmp.cleanup()
finish()
