#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
# GPU metric points end to end: `gpuscope-agent run` with the replay library playing the 8-GPU
# trace pushes to a real gpuscope-server; /api/v1/series must return, per GPU, exactly the
# trace's buffered power samples (same values, same spacing, each once), downsampled on request;
# the Xid event arrives as a gpu_event interval on its GPU.
import gzip
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pushlib import (OUT, ROOT, Agent, Server, check, finish,  # noqa: E402
                     need_root_and_binaries)

TRACE = os.path.join(ROOT, "tests", "data", "nvml", "h200x8.trace.gz")
REPLAY = os.path.join(OUT, "tests", "nvml", "libnvidia-ml.so.1")
SPEED = 4
need_root_and_binaries()


def trace_power():
    """{gpu: [(ts_us, watts)...]} sorted: every power sample the trace holds."""
    out = {}
    with gzip.open(TRACE, "rt") as f:
        for line in f:
            tok = line.split()
            if len(tok) > 8 and tok[1] == "samples" and tok[3] == "0" and tok[5] == "0":
                d = out.setdefault(tok[2], {})
                for p in tok[8:]:
                    ts, v = p.split(":")
                    d.setdefault(int(ts), int(v) / 1000.0)
    return {g: sorted(d.items()) for g, d in out.items()}


tmp = tempfile.mkdtemp(prefix="nvml-server-")
server = Server(os.path.join(tmp, "data"), log=os.path.join(tmp, "server.log"))
server.start()
os.environ.update(GPUSCOPE_NVML_REPLAY=TRACE, GPUSCOPE_NVML_REPLAY_SPEED=str(SPEED))
agent = None


def clock_offset():
    return time.time_ns() - time.monotonic_ns()


try:
    # the agent moves NVML's wall-clock timestamps onto its own clock (monotonic + the offset at
    # its start) once the two are more than 1 ms apart: a wall clock stepped or slewed during the
    # run (a VM's time sync did, 2026-12-05) shifts the samples after it by that much
    offset0 = clock_offset()
    agent = Agent(server.url, ["--pid", str(os.getpid()), "--push-interval", "1s",
                               "--node", "nvml-e2e", "--nvml-library", REPLAY],
                  os.path.join(tmp, "agent.log"))
    want = trace_power()
    # At SPEED x the replay hands out samples whose timestamps run up to 16 s past its start
    # (their spacing is the driver's): query a range that holds the future ones too.
    RANGE = {"from": "%.3f" % (time.time() - 3600), "to": "%.3f" % (time.time() + 3600)}
    # The trace plays in 16/SPEED s; the agent's exit drains every buffer and pushes.
    time.sleep(16 / SPEED + 1.5)
    check(agent.stop() == 0, "agent exits 0 on SIGTERM")
    moved_ms = abs(clock_offset() - offset0) / 1e6
    tol_ms = 0.0011 + (moved_ms if moved_ms > 1 else 0)
    if tol_ms > 0.0011:
        print(f"note: the wall clock moved {moved_ms:.3f} ms against the monotonic one during "
              f"the run: gaps compared within {tol_ms:.4f} ms")
    s = agent.summary()
    check(s is not None and s["rejected"] == 0 and s["dropped"] == 0 and s["spooled"] == 0,
          f"every batch delivered ({s})")
    res = server.query("series", name="gpu_power_watts", **RANGE, buckets="100000",
                       selector='{node="nvml-e2e"}')
    got = {}
    for ser in res["series"]:
        if "mig_uuid" in ser["labels"]:
            continue
        got[ser["labels"]["gpu"]] = (ser["labels"].get("gpu_uuid"), ser["points"])
    check(sorted(got) == [str(k) for k in range(8)], f"8 power series, one per gpu ({sorted(got)})")
    uuids = {u for u, _ in got.values()}
    check(len(uuids) == 8, "each with its own gpu_uuid")
    for g, samples in sorted(want.items()):
        pts = got.get(g, (None, []))[1]
        check(len(pts) == len(samples),
              f"gpu {g}: {len(pts)} points stored, {len(samples)} samples in the trace")
        if len(pts) != len(samples) or not pts:
            continue
        check(all(p[1] == p[2] == p[3] for p in pts), f"gpu {g}: raw points (min=avg=max)")
        check([round(p[1], 6) for p in pts] == [round(v, 6) for _, v in samples],
              f"gpu {g}: the same values in the same order")
        # timestamps are shifted to the replay's start; the spacing is the driver's, to 1 us
        # (the store keeps times to the microsecond: a gap between two floored times may read
        # 1 us off the true one, as the replay's start falls within a microsecond)
        gaps = [b[0] - a[0] for a, b in zip(pts, pts[1:])]
        tgaps = [(b[0] - a[0]) / 1000.0 for a, b in zip(samples, samples[1:])]
        check(len(gaps) == len(tgaps) and all(abs(x - y) <= tol_ms for x, y in zip(gaps, tgaps)),
              f"gpu {g}: the driver's spacing between samples, to the µs")
    raw = got.get("2", (None, [[0]]))[1]
    res = server.query("series", name="gpu_power_watts", buckets="20",
                       selector='{node="nvml-e2e",gpu="2"}', **{
                           "from": "%.3f" % (raw[0][0] / 1000.0),
                           "to": "%.3f" % (raw[-1][0] / 1000.0 + 0.001)})
    pts = [p for ser in res["series"] for p in ser["points"]]
    check(10 <= len(pts) <= 20, f"downsampled to {len(pts)} points for 20 buckets over the trace")
    check(pts and abs(max(p[3] for p in pts) - max(v for _, v in want["2"])) < 1e-6,
          "downsampled max == the trace's max")
    ev = server.query("intervals", kind="gpu_event", **RANGE, limit="100",
                      selector='{node="nvml-e2e"}')
    evs = ev.get("intervals", [])
    check(len(evs) == 1 and evs[0]["labels"].get("gpu") == "3" and
          evs[0]["attrs"].get("xid") == "79", f"the Xid of gpu 3 as a gpu_event ({evs})")
    mem = server.query("series", name="gpu_memory_used_bytes", **RANGE, buckets="100000",
                       selector='{node="nvml-e2e",gpu="7"}')
    migs = {ser["labels"].get("mig_uuid", "") for ser in mem["series"]}
    check(len(migs - {""}) == 2, f"memory of gpu 7's two MIG devices ({migs})")
finally:
    if agent:
        agent.stop()
    server.stop()
finish()
