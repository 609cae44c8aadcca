#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""A server that answers 413 makes a real agent split its batches and deliver everything, and the
agent then sizes its batches to the limits the 413 told: the agent starts against a server with
--max-body 1MiB (it learns that limit before its first batch and its batches of a 999 Hz sampler
over 2 s fit), the server is restarted on the same port and data with --max-body 2KiB: the next
batch is answered 413 and sent in halves, and from the limits that answer carried the later
batches are split before sending. No sample rejected or dropped, the server holds exactly what
the agent says it delivered, and the summary line adds up."""
import os
import time
from pushlib import (Agent, PROGS, Scratch, Server, check, cpu_sampler_up, finish, http,
                     need_root_and_binaries, skip, start_workload, wait_until)

need_root_and_binaries()
tmp = Scratch("push-split")
server = Server(tmp.path("data"), log=tmp.path("server.log"), args=["--max-body", "1MiB"])
server.start()
work = start_workload(os.path.join(PROGS, "burn"), "600")  # killed at the end
node = "split-%d" % os.getpid()
agent = None
try:
    agent = Agent(server.url, ["--modules", "cpu-sampler", "--pid", str(work.pid),
                               "--push-interval", "2s", "--frequency", "999", "--node", node,
                               "--spool-dir", tmp.path("spool"), "--retry-max", "1s"],
                  tmp.path("agent.log"), hold=[work])
    if not cpu_sampler_up(agent):
        skip("the agent has no CPU sampler module (oncpu) here")
    check(wait_until(lambda: agent.metric("gpuscope_agent_batches_pushed_total") >= 1, 30),
          "a batch delivered whole under --max-body 1MiB")
    check(agent.metric("gpuscope_agent_batches_split_total") == 0 and
          agent.metric("gpuscope_agent_batches_fitted_total") == 0, "no split under 1 MiB")
    server.stop()
    server.args = ["--max-body", "2KiB"]
    server.start()
    check(wait_until(lambda: agent.metric("gpuscope_agent_batches_split_total") >= 1 and
                     agent.metric("gpuscope_agent_batches_fitted_total") >= 2 and
                     agent.metric("gpuscope_agent_samples_sent_total") >= 3000, 60),
          "the agent split a batch after a 413, then split batches before sending (split %d, "
          "fitted %d, sent %d)" % (agent.metric("gpuscope_agent_batches_split_total"),
                                   agent.metric("gpuscope_agent_batches_fitted_total"),
                                   agent.metric("gpuscope_agent_samples_sent_total")))
    split = agent.metric("gpuscope_agent_batches_split_total")
    time.sleep(2)  # more pushes: sized beforehand, no further 413
    rc = agent.stop()
    s = agent.summary()
    check(rc == 0, "agent exits 0 (rc %s)" % rc)
    check(s is not None and s["split"] >= 1 and s["delivered"] == s["submitted"] and
          s["rejected"] == 0 and s["dropped"] == 0 and s["spooled"] == 0,
          "everything delivered in pieces: %s" % s)
    fg = server.query("flamegraph", since="10m", selector='{node="%s"}' % node)
    check(fg["total"] == s["delivered"],
          "server holds exactly the delivered samples (%s vs %s)" % (fg["total"], s["delivered"]))
    body = http(server.url + "/metrics")[1].decode()
    too_large = [float(l.split()[-1]) for l in body.splitlines()
                 if l.startswith('gpuscope_server_rejected_total{reason="too_large"}')]
    check(too_large and 1 <= too_large[0] <= split,
          "the server's 413s counted, none after the agent learnt the limit: %s (agent split "
          "%d after 413s)" % (too_large, split))
    print("split %d batches after 413s; %d samples delivered" % (s["split"], s["delivered"]))
finally:
    if agent:
        agent.stop()
    work.kill()
    server.stop()
finish()
