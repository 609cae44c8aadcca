#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Busy/idle sources between trace windows and the idle trigger, no GPU: a real agent (cupti and
nvml modules) polls the libnvidia-ml replay of a recorded H200x8 trace and runs the real
libgpuscope_cupti.so (over the libcupti stand-in) in tests/cupti/cupti_window, pushing to a real
server. Checked: a GPU that the replay shows idle opens a trace window with reason=idle; the
agent labels NVML-derived ranges gpu_observed/gpu_busy source=nvml, and only where the
utilization points say 0 (idle) or 100 (busy) -- partly busy points decide nothing (unknown)."""
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(__file__))
from pushlib import (OUT, ROOT, Agent, Server, check, finish,  # noqa: E402
                     need_root_and_binaries, start_cupti_window, window_reasons)

need_root_and_binaries()
TRACE = os.path.join(ROOT, "tests", "data", "nvml", "h200x8.trace.gz")
REPLAY = os.path.join(OUT, "tests", "nvml", "libnvidia-ml.so.1")

tmp = tempfile.mkdtemp(prefix="gpuscope-trigger-")
srv = Server(os.path.join(tmp, "data"))
srv.start()
app = start_cupti_window()
os.environ.update(GPUSCOPE_NVML_REPLAY=TRACE, GPUSCOPE_NVML_REPLAY_SPEED="1")
agent = None
try:
    agent = Agent(srv.url, ["--node", "trig", "--pid", str(app.pid), "--push-interval", "1s",
                            "--modules", "cupti,nvml", "--nvml-library", REPLAY,
                            "--gpu-trace-budget", "50%", "--gpu-trace-window", "200ms",
                            "--gpu-trace-idle-trigger", "90%"], os.path.join(tmp, "agent.log"))
    end = time.time() + 40
    while time.time() < end and agent.metric('gpuscope_agent_cupti_windows_total{reason="idle"}') < 1:
        time.sleep(0.5)
    check(agent.metric('gpuscope_agent_cupti_windows_total{reason="idle"}') >= 1,
          "an idle GPU in the NVML replay opened a window (reason=idle)")
    time.sleep(12)	# the replay's 16 s play out; spans are emitted as they close
    rc = agent.stop()
    check(rc == 0, "agent exits 0 (%s)" % rc)
    agent = None
    rng = {"from": "%.3f" % (time.time() - 3600), "to": "%.3f" % (time.time() + 3600)}
    reasons = window_reasons(srv, "trig")
    check("idle" in reasons, "gpu_trace_window reasons %s include idle" % reasons)
    obs = srv.query("intervals", kind="gpu_observed", selector='{node="trig",source="nvml"}',
                    limit=100000, **rng)["intervals"]
    busy = srv.query("intervals", kind="gpu_busy", selector='{node="trig",source="nvml"}',
                     limit=100000, **rng)["intervals"]
    check(len(obs) > 0, "NVML-observed ranges: %d" % len(obs))
    pts = srv.query("series", name="gpu_utilization", selector='{node="trig"}', buckets="100000",
                    **rng)["series"]
    bad_partial = bad_busy = zero = zero_cov = 0
    for ser in pts:
        g = ser["labels"].get("gpu")
        if "mig_uuid" in ser["labels"]:
            continue
        o = [(i["start_ms"], i["end_ms"]) for i in obs if i["labels"].get("gpu") == g]
        b = [(i["start_ms"], i["end_ms"]) for i in busy if i["labels"].get("gpu") == g]
        for t, lo, v, hi in ser["points"][1:]:
            if lo != hi:
                continue	# a bucket of several points
            inside_o = any(s < t <= e for s, e in o)
            inside_b = any(s < t <= e for s, e in b)
            if 0 < v < 100:
                bad_partial += inside_o
            if v == 0:
                zero += 1
                zero_cov += inside_o
                bad_busy += inside_b
    check(bad_partial == 0, "no partly-busy point inside an observed range (%d)" % bad_partial)
    check(bad_busy == 0, "no idle point inside a busy range (%d)" % bad_busy)
    check(zero > 0 and zero_cov >= 0.8 * zero,
          "idle points covered by observed ranges: %d of %d" % (zero_cov, zero))
    # the windows' kernel-decided ranges name why they opened (the estimator lets only budget
    # and continuous windows stand for the time around them: docs/estimator.md)
    kobs = srv.query("intervals", kind="gpu_observed", selector='{node="trig",source="kernels"}',
                     limit=100000, **rng)["intervals"]
    kreasons = {i["labels"].get("reason") for i in kobs}
    check(kobs and "idle" in kreasons and kreasons <= {"idle", "budget", "sync_wait", "capture"},
          "kernel-observed ranges carry their window's reason: %s" % kreasons)
    # and a GPU-idle answer says how it was made
    fg = srv.query("flamegraph", gpu_idle="0", selector='{node="trig"}', **rng)
    est = (fg.get("gpu_sources") or {}).get("estimate") or {}
    check("summary" in est and abs(sum(est.get(k, 0) for k in
                                       ("exact", "traced", "extrapolated", "unknown")) - 1) < 0.01,
          "the GPU-idle answer's estimate: %s" % est)
finally:
    if agent:
        agent.stop()
    app.stdin.close()
    app.wait(timeout=30)
    srv.stop()
finish()
