#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Request deadlines and connection limits a slow client cannot exhaust (issue 36 item 2), on
loopback: 2 000 sockets from 100 loopback addresses trickle request headers (one byte a second)
at twice the server's --max-connections (1 000), reconnecting when cut, the way 10 000 would
against the default 8 192; a new client's upload and query are answered within 1 s meanwhile;
the trickling ones are cut (header deadline, or closed to make room) and counted on /metrics and
in the log with their address; bodies below --min-body-rate are cut; an address whose
connections are all mid-body is refused its next one, counted."""
import os
import selectors
import socket
import threading
import time

from gpuscope_server import Server, check, encode, now_ns, skip_if_unbuilt

skip_if_unbuilt()
T = now_ns() - 60 * 10**9
N_TRICKLE = 2000
N_ADDRS = 100


def host_port(s):
    h, p = s.url.split("://", 1)[1].rsplit(":", 1)
    return h, int(p)


def batch(i):
    return encode(f"node dl{i}\nsample {T + i} cpu 1 pid={i},comm=d{i} main;dl{i}\n")


def http_once(addr, source, method, path, token, body=b""):
    """One request on a new connection from source; (status, seconds)."""
    t0 = time.monotonic()
    s = socket.create_connection(addr, timeout=10, source_address=(source, 0))
    try:
        s.sendall((f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
                   f"Authorization: Bearer {token}\r\nContent-Length: {len(body)}\r\n\r\n")
                  .encode() + body)
        data = b""
        while b"\r\n" not in data:
            chunk = s.recv(4096)
            if not chunk:
                break
            data += chunk
    finally:
        s.close()
    code = int(data.split(b" ", 2)[1]) if data.startswith(b"HTTP/") else 0
    return code, time.monotonic() - t0


class Trickler:
    """N sockets from many loopback addresses, each sending one more byte of a request's
    headers every second, reconnecting when the server cuts it."""

    HEAD = b"POST /api/v1/ingest HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 10\r\nX-Slow: " + \
        b"a" * 4000

    def __init__(self, addr, n, n_addrs):
        self.addr, self.n, self.n_addrs = addr, n, n_addrs
        self.sel = selectors.DefaultSelector()
        self.stop = threading.Event()
        self.opened = self.cut = 0
        self.th = threading.Thread(target=self.run, daemon=True)

    def source(self, i):
        k = i % self.n_addrs
        return f"127.{10 + k // 250}.{k % 250}.{1 + k // 62500}"

    def open(self, i):
        s = socket.socket()
        s.setblocking(False)
        try:
            s.bind((self.source(i), 0))
            s.connect_ex(self.addr)
        except OSError:
            s.close()
            return
        self.sel.register(s, selectors.EVENT_READ, [i, 0])
        self.opened += 1

    def run(self):
        # first under the server's limit (the header deadline cuts them), then past it
        for i in range(self.n // 2 - 200):
            self.open(i)
        more = time.monotonic() + 5
        next_tick = time.monotonic()
        while not self.stop.is_set():
            if more and time.monotonic() >= more:
                more = None
                for i in range(self.n // 2 - 200, self.n):
                    self.open(i)
            for key, _ in self.sel.select(timeout=0.1):
                s = key.fileobj
                try:
                    gone = not s.recv(4096)
                except BlockingIOError:
                    gone = False
                except OSError:
                    gone = True
                if gone:
                    i = key.data[0]
                    self.sel.unregister(s)
                    s.close()
                    self.cut += 1
                    if not self.stop.is_set():
                        self.open(i)
            if time.monotonic() >= next_tick:
                next_tick += 1.0
                for key in list(self.sel.get_map().values()):
                    st = key.data
                    try:
                        key.fileobj.send(self.HEAD[st[1]:st[1] + 1])
                        st[1] = min(st[1] + 1, len(self.HEAD) - 1)
                    except OSError:
                        pass
        for key in list(self.sel.get_map().values()):
            key.fileobj.close()


def trickling_headers():
    s = Server(token="tok", args=["--max-connections", "1000", "--header-timeout", "3s",
                                  "--max-connections-per-address", "64"]).start()
    tr = None
    try:
        addr = host_port(s)
        # the machine's own delay for one upload and one query, before any trickling
        base = max(http_once(addr, "127.0.0.1", "POST", "/api/v1/ingest", "tok", batch(0))[1],
                   http_once(addr, "127.0.0.1", "GET", "/api/v1/nodes", "tok")[1])
        tr = Trickler(addr, N_TRICKLE, N_ADDRS)
        tr.th.start()
        time.sleep(3)
        worst = 0.0
        ups = 0
        for r in range(16):
            src = f"127.200.{r}.1"	# a fresh address each round
            code, dt = http_once(addr, src, "POST", "/api/v1/ingest", "tok", batch(r + 1))
            check(code == 204, f"upload from a new address under trickling: {code}")
            worst = max(worst, dt)
            ups += 1
            code, dt = http_once(addr, src, "GET", "/api/v1/nodes", "tok")
            check(code == 200, f"query from a new address under trickling: {code}")
            worst = max(worst, dt)
            time.sleep(0.5)
        opened = tr.opened
        tr.stop.set()
        tr.th.join(timeout=30)
        limit = max(1.0, 5 * base)
        check(worst < limit, f"new client answered within {limit:.2f} s under trickling: "
              f"{worst:.3f} s")
        hdr = s.metric('gpuscope_server_connections_cut_total{reason="header_timeout"}')
        ev = s.metric('gpuscope_server_connections_cut_total{reason="evicted"}')
        errs = s.metric("gpuscope_server_http_errors_total")

        check(hdr > 0, f"trickling headers cut at the deadline: {hdr}")
        check(ev > 0, f"trickling headers closed to make room at the limit: {ev}")
        check(errs >= hdr + ev, f"http_errors_total counts them: {errs}")
        check(tr.cut >= N_TRICKLE, f"the trickling sockets saw their cut: {tr.cut}")
        log = s.logtext()
        check("connection from 127." in log and "cut:" in log, f"cut logged with address: "
              f"{log[-600:]}")
        code, dt = http_once(addr, "127.0.0.1", "GET", "/api/v1/nodes", "tok")
        check(code == 200, "served after the trickling stopped")
        print(f"trickling headers: {opened} sockets opened from {N_ADDRS} addresses "
              f"({N_TRICKLE} at a time, --max-connections 1000), {ups} uploads and queries from "
              f"new addresses, worst {worst * 1000:.0f} ms (alone: {base * 1000:.0f} ms); cut: "
              f"{hdr:.0f} at the header deadline, {ev:.0f} to make room")
    finally:
        if tr:
            tr.stop.set()
        s.stop()


def slow_bodies():
    """Bodies under --min-body-rate are cut; an address whose connections are all mid-body is
    refused its next one (nothing of theirs to close), counted and logged."""
    s = Server(token="tok", args=["--header-timeout", "2s", "--min-body-rate", "1KiB",
                                  "--max-connections-per-address", "16"]).start()
    socks = []
    try:
        addr = host_port(s)
        for _ in range(16):
            c = socket.create_connection(addr, timeout=10, source_address=("127.9.9.9", 0))
            c.sendall(b"POST /api/v1/ingest HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                      b"Authorization: Bearer tok\r\nContent-Length: 100000\r\n\r\nab")
            socks.append(c)
        time.sleep(0.5)
        extra = socket.create_connection(addr, timeout=10, source_address=("127.9.9.9", 0))
        try:
            extra.sendall(b"GET /api/v1/nodes HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            refused = extra.recv(100) == b""
        except OSError:
            refused = True
        extra.close()
        check(refused, "a 17th connection from an address whose 16 are mid-body is refused")
        check(s.metric('gpuscope_server_connections_refused_total{limit="per_address"}') >= 1,
              "the refusal counted")
        t0 = time.monotonic()
        alive = list(socks)
        while alive and time.monotonic() - t0 < 20:
            for c in list(alive):
                try:
                    c.send(b"x")	# 1 byte a second: far below 1 KiB/s
                except OSError:
                    alive.remove(c)
            time.sleep(1)
        dt = time.monotonic() - t0
        check(not alive, f"slow bodies cut: {len(alive)} of 16 still open after {dt:.0f} s")
        cut = s.metric('gpuscope_server_connections_cut_total{reason="slow_body"}')
        check(cut == 16, f"16 slow bodies counted: {cut}")
        check("refused: 16 connections from this address" in s.logtext(), "refusal logged")
        code, _ = http_once(addr, "127.9.9.9", "GET", "/api/v1/nodes", "tok")
        check(code == 200, "the address is served again once its slow bodies are cut")
        print(f"slow bodies: 16 at 1 byte/s cut within {dt:.0f} s (2 s grace + 1 KiB/s)")
    finally:
        for c in socks:
            c.close()
        s.stop()


def main():
    for part in (slow_bodies, trickling_headers):
        t0 = time.monotonic()
        part()
        print(f"{part.__name__}: ok ({time.monotonic() - t0:.1f} s)")
    print("ok")


main()
