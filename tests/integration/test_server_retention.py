#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Retention deletes what is older and nothing newer: with --retention 1h --raw-retention 10m,
samples, points and intervals older than 1 h disappear; samples between 10 min and 1 h old lose
their raw per-sample chunks but stay queryable from the rollups; recent data stays whole."""
import time
import urllib.parse

from gpuscope_server import Server, check, encode, now_ns, running, skip_if_unbuilt

skip_if_unbuilt()
MIN = 60 * 10**9
q = urllib.parse.quote


def main():
    # Uploads older than the retention are refused, so the data goes in under a 3 h retention
    # (retention not due for an hour) and the server restarts with 1 h over the same store.
    s = Server(args=["--retention", "3h", "--raw-retention", "10m",
                     "--retention-period", "1h"])
    now = now_ns()
    ages = {"old": now - 2 * 60 * MIN, "mid": now - 30 * MIN, "new": now - 2 * MIN}
    counts = {"old": 30, "mid": 40, "new": 50}
    lines = ["node ret"]
    for age, t in ages.items():
        for i in range(counts[age]):
            lines.append(f"sample {t + i * 10**6} cpu 1 age={age} main;{age}_fn")
        lines.append(f"metric temp age={age} {t} 1")
        lines.append(f"interval gpu_busy age={age},gpu=0 {t + 10**9} {t + 2 * 10**9} -")
        # GPU 5: observed idle over the samples (gpu_idle=5 below keeps them all)
        lines.append(f"interval gpu_observed age={age},gpu=5,source=nvml {t} {t + 10**9} -")
    with running(s):
        code, body = s.ingest(encode("\n".join(lines) + "\n"))
        check(code == 204, f"ingest {code} {body}")
        s.stop()
        s.args = ["--retention", "1h", "--raw-retention", "10m", "--retention-period", "300ms"]
        s.start()
        code, body = s.ingest(encode(f"node ret\nsample {now - 2 * 60 * MIN} cpu 1 age=x f\n"))
        check(code == 400 and b"outside" in body, f"an upload older than retention: {code} {body}")
        check(s.metric('gpuscope_server_rejected_total{reason="time_out_of_range"}') == 1,
              "counted as time_out_of_range")
        deadline = time.time() + 30
        while time.time() < deadline:
            if (s.metric('gpuscope_server_retention_deleted_total{table="chunks"}') >= 2 and
                    s.metric('gpuscope_server_retention_deleted_total{table="rollups"}') >= 2):
                break
            time.sleep(0.2)
        check(s.metric('gpuscope_server_retention_deleted_total{table="chunks"}') == 2,
              "the raw chunks of 'old' and 'mid' deleted, not 'new'")
        rng = f"from={(now - 3 * 60 * MIN) / 1e9:.3f}&to={now / 1e9:.3f}"
        # points and intervals go in the same retention pass, after the rollups are counted
        old = q('{age="old"}')
        while time.time() < deadline and (
                any(x["points"] for x in
                    s.get_json(f"/api/v1/series?name=temp&{rng}&selector={old}")["series"]) or
                s.get_json(f"/api/v1/intervals?kind=gpu_busy&{rng}&selector={old}")["intervals"]):
            time.sleep(0.2)
        for age, want in [("old", 0), ("mid", counts["mid"]), ("new", counts["new"])]:
            fg = s.get_json(f"/api/v1/flamegraph?{rng}&selector=" + q('{age="%s"}' % age))
            check(fg["total"] == want, f"{age}: {fg['total']} samples, want {want}")
            sr = s.get_json(f"/api/v1/series?name=temp&{rng}&selector=" + q('{age="%s"}' % age))
            npts = sum(len(x["points"]) for x in sr["series"])
            check(npts == (0 if age == "old" else 1), f"{age}: {npts} points")
            iv = s.get_json(f"/api/v1/intervals?kind=gpu_busy&{rng}&selector=" +
                            q('{age="%s"}' % age))
            check(len(iv["intervals"]) == (0 if age == "old" else 1), f"{age}: intervals {iv}")
        # Per-sample timestamps (needed by gpu_idle) are gone for 'mid', kept for 'new'.
        for age, want in [("mid", 0), ("new", counts["new"])]:
            fg = s.get_json(f"/api/v1/flamegraph?{rng}&gpu_idle=5&selector=" +
                            q('{age="%s"}' % age))
            check(fg["total"] == want, f"{age} raw samples: {fg['total']}, want {want}")
        fg = s.get_json(f"/api/v1/flamegraph?{rng}")
        check(fg["total"] == counts["mid"] + counts["new"], f"total {fg['total']}")
    print("ok")


main()
