#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Bounded captures, server side (issue 36 item 3): with split tokens the agent's paths
(pending, result) take the ingest token and refuse the query token, the CLI's (request, status)
the query token; a result is accepted only for a request an agent took, once; 8 requests in
flight per node and 64 in all, past them 429 (the probe's 64 x node=ghost no longer locks other
nodes out); pending and delivered-but-unanswered requests expire (--capture-timeout) and free
their slots."""
import json
import os
import time

from gpuscope_server import Server, check, running, skip_if_unbuilt

skip_if_unbuilt()


def main():
    s = Server()
    with open(os.path.join(s.tmp, "itok"), "w") as f:
        f.write("ingest-secret\n")
    with open(os.path.join(s.tmp, "qtok"), "w") as f:
        f.write("query-secret\n")
    s.args = ["--ingest-token-file", os.path.join(s.tmp, "itok"),
              "--query-token-file", os.path.join(s.tmp, "qtok"), "--capture-timeout", "2s"]
    Q, I = "query-secret", "ingest-secret"
    with running(s):
        s.token = Q  # s.metric(): /metrics takes the query token

        def call(path, token, post=False):
            code, body, _ = s.request(path, b"" if post else None, method="POST" if post else
                                      "GET", token=token)
            return code, (json.loads(body) if body.startswith(b"{") else body)

        # split tokens: each side with its own
        code, c = call("/api/v1/capture?node=n1&duration=100ms", Q, post=True)
        check(code == 200, f"the CLI's request with the query token: {code} {c}")
        cid = c["id"]
        code, _ = call("/api/v1/capture?node=n1&duration=100ms", I, post=True)
        check(code == 401, f"a request with the ingest token: {code}")
        code, _ = call("/api/v1/capture/pending?node=n1", Q)
        check(code == 401, f"pending with the query token: {code}")
        code, _ = call(f"/api/v1/capture/result?id={cid}&status=ok", I, post=True)
        check(code == 409, f"a result for a request no agent took: {code}")
        code, p = call("/api/v1/capture/pending?node=n1", I)
        check(code == 200 and [x["id"] for x in p["captures"]] == [cid],
              f"the agent (ingest token) takes it: {code} {p}")
        code, _ = call(f"/api/v1/capture/result?id={cid}&status=ok", Q, post=True)
        check(code == 401, f"a result with the query token: {code}")
        code, _ = call(f"/api/v1/capture/result?id={cid}&status=ok&node=n2", I, post=True)
        check(code == 404, f"a result naming another node: {code}")
        code, r = call(f"/api/v1/capture/result?id={cid}&status=ok&from=1&to=2", I, post=True)
        check(code == 200 and r["state"] == "done", f"the agent's result: {code} {r}")
        code, _ = call(f"/api/v1/capture/result?id={cid}&status=forged", I, post=True)
        check(code == 409, f"a second result: {code}")
        code, st = call(f"/api/v1/capture/status?id={cid}", Q)
        check(code == 200 and st["status"] == "ok", f"status keeps the first answer: {st}")

        # the probe: 64 x node=ghost and one pending; now 8 per node, then 429
        codes = [call("/api/v1/capture?node=ghost&duration=10m", Q, post=True)[0]
                 for _ in range(64)]
        check(codes[:8] == [200] * 8 and set(codes[8:]) == {429},
              f"8 in flight for ghost, then 429: {codes}")
        code, p = call("/api/v1/capture/pending?node=ghost", I)
        check(len(p["captures"]) == 8, f"the 8 delivered: {p}")
        code, c = call("/api/v1/capture?node=real&duration=1s", Q, post=True)
        check(code == 200, f"another node's capture still taken: {code} {c}")
        # 64 in all: 7 more nodes of 8 (ghost holds 8, real 1)
        flying = 9
        for n in range(8):
            for _ in range(8):
                code, _ = call(f"/api/v1/capture?node=g{n}&duration=10m", Q, post=True)
                if code == 200:
                    flying += 1
        check(flying == 64, f"64 in flight in all: {flying}")
        code, body = call("/api/v1/capture?node=fresh&duration=1s", Q, post=True)
        check(code == 429 and b"64" in json.dumps(body).encode(), f"the 65th: 429 {body}")
        check(s.metric('gpuscope_server_rejected_total{reason="over_limit"}') >= 57,
              "429s counted")

        # expiry: pending ones after --capture-timeout, delivered ones after their duration
        # plus it (ghost's are 10 min: still in flight); slots come back
        time.sleep(2.5)
        code, st = call(f"/api/v1/capture/status?id={c['id']}", Q)
        check(st["state"] == "expired" and "no agent" in st["message"], f"pending expired: {st}")
        code, c2 = call("/api/v1/capture?node=fresh&duration=100ms", Q, post=True)
        check(code == 200, f"a slot is free again once pending ones expired: {code} {c2}")
        code, p = call("/api/v1/capture/pending?node=fresh", I)
        check(len(p["captures"]) == 1, "fresh's agent takes it")
        time.sleep(2.6)	# 100 ms + 2 s: the agent never answered (dropped it)
        code, st = call(f"/api/v1/capture/status?id={c2['id']}", Q)
        check(st["state"] == "expired" and "did not answer" in st["message"],
              f"a delivered request its agent never answered expires: {st}")
        code, _ = call(f"/api/v1/capture/result?id={c2['id']}&status=ok", I, post=True)
        check(code == 409, f"a result after the expiry: {code}")
        code, _ = call("/api/v1/capture?node=ghost&duration=1s", Q, post=True)
        check(code == 429, "ghost's delivered 10-minute captures still count")
    print("ok")


main()
