#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""A server outage loses nothing: a real agent pushes real eBPF samples (gzip) to a real server, the
server goes away for 60 s, the agent spools every batch to disk (retrying with backoff), and once
the server is back on the same port and data the spool drains oldest-first; the server then holds
exactly the samples the agent took (no loss, no duplicate), with their original timestamps."""
import os
import time
from pushlib import (Agent, PROGS, Scratch, Server, check, cpu_sampler_up, finish,
                     need_root_and_binaries, skip, start_workload, wait_until)

OUTAGE_S = 60
need_root_and_binaries()
tmp = Scratch("push-outage")
server = Server(tmp.path("data"), log=tmp.path("server.log"))
server.start()
work = start_workload(os.path.join(PROGS, "dutyburn"), str(OUTAGE_S + 40), "30")
node = "outage-%d" % os.getpid()
agent = None
try:
    agent = Agent(server.url, ["--modules", "cpu-sampler", "--pid", str(work.pid), "--push-interval", "1s", "--retry-max", "2s",
                               "--compression", "gzip", "--spool-dir", tmp.path("spool"),
                               "--node", node], tmp.path("agent.log"))
    if not cpu_sampler_up(agent):
        skip("the agent has no CPU sampler module (oncpu) here")
    check(wait_until(lambda: agent.metric("gpuscope_agent_batches_pushed_total") >= 2, 15),
          "pushing before the outage")
    before = agent.metric("gpuscope_agent_samples_sent_total")
    rc = server.stop()
    t_down = time.time()
    check(rc == 0, "server stopped (rc %s)" % rc)
    time.sleep(OUTAGE_S / 2)
    m = agent.metrics()
    check(m.get("gpuscope_agent_push_failures_total", 0) >= 1, "push failures counted during the outage")
    check(m.get("gpuscope_agent_spool_files", 0) >= OUTAGE_S / 4,
          "batches spooled during the outage: %s" % m.get("gpuscope_agent_spool_files"))
    time.sleep(t_down + OUTAGE_S - time.time())
    m = agent.metrics()
    spooled = m.get("gpuscope_agent_spool_files", 0)
    files = len(os.listdir(tmp.path("spool")))
    # A batch per push interval once the retry backoff has let go of the previous one: on a quiet
    # machine about 35 of 60 s (CI), more under load. What matters is checked below: every
    # sample of the outage is delivered once the server is back.
    check(spooled >= OUTAGE_S * 0.4 and spooled <= files <= spooled + 1,	# one may land in between
          "%d batches spooled after %d s, %d files on disk" % (spooled, OUTAGE_S, files))
    check(m.get("gpuscope_agent_spool_dropped_batches_total", 1) == 0, "nothing dropped")
    check(m.get("gpuscope_agent_samples_sent_total") == before, "nothing acknowledged while down")
    t_up = time.time()
    server.start()
    drained = wait_until(lambda: agent.metric("gpuscope_agent_spool_files", -1) == 0, 20)
    check(drained, "spool drained %.1f s after the server came back" % (time.time() - t_up))
    check(len(os.listdir(tmp.path("spool"))) == 0, "spool directory empty")
    time.sleep(1.5)
    rc = agent.stop()
    s = agent.summary()
    check(rc == 0, "agent exits 0 (rc %s)" % rc)
    check(s is not None and s["delivered"] == s["submitted"] and s["dropped"] == 0 and
          s["rejected"] == 0 and s["spooled"] == 0, "every sample delivered: %s" % s)
    fg = server.query("flamegraph", since="10m", selector='{node="%s"}' % node)
    check(s is not None and fg["total"] == s["delivered"],
          "server holds exactly the samples taken: %d stored, %s delivered" %
          (fg["total"], s and s["delivered"]))
    during = server.query("flamegraph", selector='{node="%s"}' % node,
                          **{"from": "%.3f" % (t_down + 2), "to": "%.3f" % (t_down + OUTAGE_S - 2)})
    check(during["total"] >= (OUTAGE_S - 4) * 10,
          "samples taken during the outage stored with their own timestamps: %d" % during["total"])
finally:
    if agent:
        agent.stop()
    work.kill()
    work.wait()
    server.stop()
    tmp.cleanup()
finish()
