#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The global in-flight body budget (--max-inflight-bodies, default 4 x --max-body): 12 clients
send 3.3 MiB ingest bodies at once and hold their last byte; while they are held the server's RSS
grows by no more than the budget (16 MiB at --max-body 4MiB; without it 12 x 4 MiB) and the
gauge stays within it; the bodies past the budget are answered 503 with Retry-After and counted
(rejected_total{reason="busy"}), the others 204; every client then retries until 204 and every
acknowledged sample is stored, exactly once. A budget below --max-body is refused at start."""
import socket
import subprocess
import threading
import time

from gpuscope_server import SERVER, Server, check, encode, now_ns, run_test, skip_if_unbuilt

skip_if_unbuilt()
MIB = 1 << 20
N = 12
SAMPLES = 600000                 # about 3.3 MiB a body


def rss_kb(pid):
    with open(f"/proc/{pid}/status") as f:
        return int(next(ln for ln in f if ln.startswith("VmRSS:")).split()[1])


def body(node, t0):
    lines = [f"node {node}"]
    lines += [f"sample {t0 + i * 1000} cpu 1 comm=c{i % 50},pid={i % 50} main;f{i % 3000};g{i % 7}"
              for i in range(SAMPLES)]
    return encode("\n".join(lines) + "\n")


def post_held(url, raw, ready, go, out, i):
    """POSTs raw, all but the last byte, then waits for go; out[i] = (status, headers text)."""
    host, port = url.split("//")[1].split(":")
    s = socket.create_connection((host, int(port)), timeout=60)
    try:
        s.sendall((f"POST /api/v1/ingest HTTP/1.1\r\nHost: {host}:{port}\r\n"
                   f"Content-Type: application/x-protobuf\r\nContent-Length: {len(raw)}\r\n"
                   "Connection: close\r\n\r\n").encode())
        s.sendall(raw[:-1])
        ready.release()
        go.wait()
        s.sendall(raw[-1:])
        resp = b""
        while b"\r\n\r\n" not in resp:
            chunk = s.recv(4096)
            if not chunk:
                break
            resp += chunk
        head = resp.split(b"\r\n\r\n")[0].decode(errors="replace")
        out[i] = (int(head.split()[1]), head)
    finally:
        s.close()


def main():
    r = subprocess.run([SERVER, "--data", "/nonexistent-unused", "--max-body", "4MiB",
                        "--max-inflight-bodies", "1MiB"], capture_output=True, timeout=30)
    check(r.returncode == 2 and b"below --max-body" in r.stderr,
          f"budget below --max-body: exit {r.returncode} {r.stderr[-200:]!r}")

    t0 = now_ns() - 600 * 10**9
    raws = [body(f"n{i}", t0 + i * SAMPLES * 1000) for i in range(N)]
    print(f"{N} bodies of {len(raws[0]) / MIB:.2f} MiB")
    s = Server(args=["--max-body", "4MiB"]).start()
    srv = s
    try:
        budget = s.metric("gpuscope_server_inflight_body_bytes_limit")
        check(budget == 16 * MIB, f"default budget {budget}, want 4 x --max-body")
        check(s.ingest(encode(f"node warm\nsample {t0} cpu 1 comm=w main\n"))[0] == 204, "warm")
        base = rss_kb(s.proc.pid)
        ready, go, out = threading.Semaphore(0), threading.Event(), [None] * N
        th = [threading.Thread(target=post_held, args=(s.url, raws[i], ready, go, out, i))
              for i in range(N)]
        for t in th:
            t.start()
        for _ in range(N):
            check(ready.acquire(timeout=60), "a client could not send its body")
        time.sleep(1.0)           # the server reads what is in the sockets
        held = s.metric("gpuscope_server_inflight_body_bytes")
        grown = (rss_kb(s.proc.pid) - base) / 1024
        print(f"held: gauge {held / MIB:.1f} MiB, RSS +{grown:.1f} MiB (budget {budget / MIB:.0f} MiB)")
        check(0 < held <= budget, f"gauge {held} outside (0, {budget}]")
        check(grown < budget / MIB + 4, f"RSS grew {grown:.1f} MiB with the budget at "
              f"{budget / MIB:.0f} MiB")
        go.set()
        for t in th:
            t.join(timeout=120)
        codes = [o[0] if o else None for o in out]
        busy = [i for i, o in enumerate(out) if o and o[0] == 503]
        print(f"answers: {sorted(codes)}")
        check(all(c in (204, 503) for c in codes), f"answers {codes}")
        check(1 <= len(busy) < N, f"{len(busy)} busy of {N}")
        check(all("Retry-After: 1" in out[i][1] for i in busy), "503 without Retry-After")
        check(s.metric('gpuscope_server_rejected_total{reason="busy"}') == len(busy),
              "busy refusals counted")
        for i in busy:            # the clients retry, as agents do
            for _ in range(50):
                code, b = s.ingest(raws[i])
                if code == 204:
                    break
                check(code == 503, f"retry: {code} {b[:200]!r}")
                time.sleep(0.2)
            else:
                check(False, f"body {i} never accepted")
        # a body's bytes are given back when its request completes, which the server may do
        # just after the client has its 204: released within 2 s, not at that very instant
        for _ in range(40):
            left = s.metric("gpuscope_server_inflight_body_bytes")
            if left == 0:
                break
            time.sleep(0.05)
        check(left == 0, f"budget released ({left} bytes still held after 2 s)")
        fg = s.get_json("/api/v1/flamegraph?since=1h")
        print(f"stored {fg['total']} samples, acked {N * SAMPLES + 1}")
        check(fg["total"] == N * SAMPLES + 1, f"stored {fg['total']}, acked {N * SAMPLES + 1}")
    finally:
        srv.stop()
    print("PASS")


run_test(main)
