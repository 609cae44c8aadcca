#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Slow-client load beside the fleet benchmark: N sockets from ADDRS loopback addresses
(127.0.1.1 ...), each sending one byte of an ingest request's headers every PERIOD seconds and
reconnecting when the server cuts it. Runs until killed; on SIGTERM prints one line: sockets
opened, cut by the server, refused. Usage: trickle.py HOST:PORT [N=1000] [ADDRS=20] [PERIOD=8]"""
import selectors
import signal
import socket
import sys
import time

host, port = sys.argv[1].rsplit(":", 1)
n = int(sys.argv[2]) if len(sys.argv) > 2 else 1000
naddr = int(sys.argv[3]) if len(sys.argv) > 3 else 20
period = float(sys.argv[4]) if len(sys.argv) > 4 else 8.0
HEAD = b"POST /api/v1/ingest HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 10\r\nX-Slow: " + b"a" * 4096
stats = {"opened": 0, "cut": 0, "refused": 0}
socks = [None] * n           # per slot: [socket, bytes sent, next send time]
sel = selectors.DefaultSelector()


def stop(*_):
    print(f"trickle: {n} slots from {naddr} addresses: {stats['opened']} connections opened, "
          f"{stats['cut']} cut by the server, {stats['refused']} refused", flush=True)
    sys.exit(0)


def connect(i, now):
    s = socket.socket()
    s.setblocking(False)
    try:
        s.bind((f"127.0.1.{1 + i % naddr}", 0))
        s.connect_ex((host, int(port)))
    except OSError:
        stats["refused"] += 1
        s.close()
        socks[i] = None
        return
    stats["opened"] += 1
    socks[i] = [s, 0, now + (i % 100) * period / 100]
    sel.register(s, selectors.EVENT_READ, i)


signal.signal(signal.SIGTERM, stop)
t = time.monotonic()
for i in range(n):
    connect(i, t)
while True:
    for key, _ in sel.select(timeout=0.2):
        i = key.data
        try:
            data = key.fileobj.recv(4096)
        except OSError:
            data = b""
        if not data:         # cut (or answered and closed): reconnect
            sel.unregister(key.fileobj)
            key.fileobj.close()
            stats["cut"] += 1
            connect(i, time.monotonic())
    now = time.monotonic()
    for i in range(n):
        if socks[i] is None:
            connect(i, now)
            continue
        s, sent, due = socks[i]
        if now >= due:
            try:
                s.send(HEAD[sent % len(HEAD):sent % len(HEAD) + 1])
                socks[i][1] += 1
            except OSError:
                pass
            socks[i][2] = now + period
