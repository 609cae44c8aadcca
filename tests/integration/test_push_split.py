#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""A server that answers 413 (--max-body 4KiB, smaller than the agent's batches of a 999 Hz
sampler over 3 s) makes a real agent split its batches and deliver everything: no sample
rejected or dropped, the server holds exactly what the agent says it delivered, and the
summary line adds up."""
import os
from pushlib import (Agent, PROGS, Scratch, Server, check, cpu_sampler_up, finish, http,
                     need_root_and_binaries, skip, start_workload, wait_until)

need_root_and_binaries()
tmp = Scratch("push-split")
server = Server(tmp.path("data"), log=tmp.path("server.log"), args=["--max-body", "4KiB"])
server.start()
work = start_workload(os.path.join(PROGS, "burn"), "600")  # killed at the end
node = "split-%d" % os.getpid()
agent = None
try:
    agent = Agent(server.url, ["--modules", "cpu-sampler", "--pid", str(work.pid),
                               "--push-interval", "3s", "--frequency", "999", "--node", node,
                               "--spool-dir", tmp.path("spool")], tmp.path("agent.log"),
                  hold=[work])
    if not cpu_sampler_up(agent):
        skip("the agent has no CPU sampler module (oncpu) here")
    check(wait_until(lambda: agent.metric("gpuscope_agent_batches_split_total") >= 2 and
                     agent.metric("gpuscope_agent_samples_sent_total") >= 3000, 60),
          "the agent split batches after 413s and delivered (split %d, sent %d)" %
          (agent.metric("gpuscope_agent_batches_split_total"),
           agent.metric("gpuscope_agent_samples_sent_total")))
    rc = agent.stop()
    s = agent.summary()
    check(rc == 0, "agent exits 0 (rc %s)" % rc)
    check(s is not None and s["split"] >= 2 and s["delivered"] == s["submitted"] and
          s["rejected"] == 0 and s["dropped"] == 0 and s["spooled"] == 0,
          "everything delivered in halves: %s" % s)
    fg = server.query("flamegraph", since="10m", selector='{node="%s"}' % node)
    check(fg["total"] == s["delivered"],
          "server holds exactly the delivered samples (%s vs %s)" % (fg["total"], s["delivered"]))
    body = http(server.url + "/metrics")[1].decode()
    too_large = [float(l.split()[-1]) for l in body.splitlines()
                 if l.startswith('gpuscope_server_rejected_total{reason="too_large"}')]
    check(too_large and too_large[0] >= 2, "the server's 413s counted: %s" % too_large)
    print("split %d batches, %d samples delivered" % (s["split"], s["delivered"]))
finally:
    if agent:
        agent.stop()
    work.kill()
    server.stop()
finish()
