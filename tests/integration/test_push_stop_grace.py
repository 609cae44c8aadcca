#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Stopping does not wait on a server that does not answer, and loses nothing: a real agent
pushes to a listener that accepts connections and never answers (a server stuck under load);
SIGINT with --stop-grace 1s ends it within a few seconds, not after the 10-s request timeout,
with its batches in the disk spool; a second agent with the same spool delivers them to a real
server ("more samples from an earlier run's spool")."""
import os
import socket
import threading
import time
from pushlib import (Agent, PROGS, Scratch, Server, check, cpu_sampler_up, finish,
                     need_root_and_binaries, skip, start_workload, wait_until)

need_root_and_binaries()
tmp = Scratch("push-stop-grace")

# a listener that takes every connection and its request, and never answers
lsock = socket.socket()
lsock.bind(("127.0.0.1", 0))
lsock.listen(16)
held = []


def hold():
    while True:
        try:
            c, _ = lsock.accept()
        except OSError:
            return
        held.append(c)


threading.Thread(target=hold, daemon=True).start()
mute_url = "http://127.0.0.1:%d" % lsock.getsockname()[1]
work = start_workload(os.path.join(PROGS, "dutyburn"), "60", "30")
spool = tmp.path("spool")
agent = second = server = None
try:
    agent = Agent(mute_url, ["--modules", "cpu-sampler", "--pid", str(work.pid), "--push-interval",
                             "1s", "--spool-dir", spool, "--stop-grace", "1s"],
                  tmp.path("agent.log"))
    if not cpu_sampler_up(agent):
        skip("the agent has no CPU sampler module (oncpu) here")
    check(wait_until(lambda: agent.metric("gpuscope_agent_samples_submitted_total") > 0 and
                     len(held) >= 1, 15), "the agent's first push hangs on the mute server")
    time.sleep(2)
    t0 = time.time()
    rc = agent.stop()
    took = time.time() - t0
    # 1 s of grace plus the modules' stop on a loaded 2-core machine; the request's own timeout
    # is 10 s, which is what a stop waited before
    check(rc == 0 and took < 6, "stopped in %.1f s with --stop-grace 1s (rc %s)" % (took, rc))
    s = agent.summary() or {}
    files = len(os.listdir(spool)) if os.path.isdir(spool) else 0
    check(s.get("spooled", 0) >= 1 and files >= 1 and s.get("delivered", -1) == 0,
          "its batches kept in the disk spool: %s, %d files" % (s, files))
    lsock.close()

    server = Server(tmp.path("data"), log=tmp.path("server.log"))
    server.start()
    second = Agent(server.url, ["--modules", "cpu-sampler", "--pid", str(work.pid),
                                "--push-interval", "1s", "--spool-dir", spool],
                   tmp.path("agent2.log"))
    check(wait_until(lambda: second.metric("gpuscope_agent_spool_files", -1) == 0, 20),
          "the second agent drained the spool")
    second.stop()
    s2 = second.summary() or {}
    check(s2.get("earlier", 0) >= s.get("submitted", 1) > 0,
          "the first agent's %d samples delivered by the second (%s)" % (s.get("submitted", 0), s2))
finally:
    for a in (agent, second):
        if a:
            a.stop()
    if server:
        server.stop()
    work.kill()
    for c in held:
        c.close()
    tmp.cleanup()
finish()
