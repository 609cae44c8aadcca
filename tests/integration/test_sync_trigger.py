#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The trace windows' sync trigger, no GPU: tests/cupti/cupti_window runs the real
libgpuscope_cupti.so over the libcupti stand-in and, after 12 quiet seconds, waits 20 ms in
cuCtxSynchronize of the libcuda stand-in after every step (its sync-wait share jumps from 0 to
~95 %). A real agent (cupti and cuda_probe modules, 5 % budget, NVML off so the idle trigger
cannot fire) sees the jump through its driver probes and opens a window with reason=sync_wait;
the window reaches the server as a gpu_trace_window interval; none opened before the jump."""
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(__file__))
from pushlib import (OUT, Agent, Server, check, finish,  # noqa: E402
                     need_root_and_binaries, start_cupti_window, window_reasons)

need_root_and_binaries()
LIBCUDA = os.path.join(OUT, "tests", "cuda", "libcuda.so.1")
tmp = tempfile.mkdtemp(prefix="gpuscope-sync-trigger-")
srv = Server(os.path.join(tmp, "data"))
srv.start()
# the agent is up within the quiet seconds even on a loaded machine, and its budget allows a
# trigger at the jump: with 1 % a duty-cycle window at start (200 ms) left none for 20 s, and a
# run saw the window 39.5 s late
QUIET = 12
app = start_cupti_window("sync:%s:%d" % (LIBCUDA, QUIET))
t_app = time.time()
agent = None
try:
    agent = Agent(srv.url, ["--node", "synctrig", "--pid", str(app.pid), "--push-interval", "1s",
                            "--modules", "cupti,cuda_probe", "--no-gpu",
                            "--gpu-trace-window", "200ms", "--gpu-trace-sync-trigger", "50%",
                            "--gpu-trace-budget", "5%"],
                  os.path.join(tmp, "agent.log"), modules_off="")
    m = 'gpuscope_agent_cupti_windows_total{reason="sync_wait"}'
    print("agent up %.1f s after the process (its waits begin at %d s)" % (time.time() - t_app, QUIET))
    early = None
    end = time.time() + 45
    while time.time() < end and agent.metric(m) < 1:
        if early is None and time.time() >= t_app + QUIET - 1:
            early = agent.metric(m)	# just before the waits start
        time.sleep(0.5)
    check(early == 0, "no sync_wait window while the process did not wait (%s)" % early)
    check(agent.metric(m) >= 1, "the jump in sync wait opened a window (reason=sync_wait) %.1f s "
          "after the waits began" % (time.time() - t_app - QUIET))
    check(agent.metric('gpuscope_agent_cuda_calls_total{api="cuCtxSynchronize"}') > 0,
          "the driver probes saw the synchronize calls")
    time.sleep(2)
    rc = agent.stop()
    check(rc == 0, "agent exits 0 (%s)" % rc)
    agent = None
    reasons = window_reasons(srv, "synctrig")
    check("sync_wait" in reasons, "gpu_trace_window reasons %s include sync_wait" % reasons)
finally:
    if agent:
        agent.stop()
    app.stdin.close()
    app.wait(timeout=30)
    srv.stop()
finish()
