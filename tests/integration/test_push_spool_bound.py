#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The agent's spool is bounded: with the server unreachable, real eBPF samples of a workload are
spooled to disk (one file per batch), the oldest batches are dropped past --spool-max, and every
drop shows on /metrics; the files left are the newest ones."""
import os
import re
import time
from pushlib import (Agent, PROGS, Scratch, check, cpu_sampler_up, finish, free_port,
                     need_root_and_binaries, skip, start_workload, wait_until)

need_root_and_binaries(server=False)
tmp = Scratch("spool-bound")
spool = tmp.path("spool")
work = start_workload(os.path.join(PROGS, "dutyburn"), "600", "30")  # killed at the end
dead = "http://127.0.0.1:%d" % free_port()		# nothing listens there
agent = Agent(dead, ["--modules", "cpu-sampler", "--pid", str(work.pid), "--push-interval", "200ms", "--spool-dir", spool,
                     "--spool-max", "3KiB", "--retry-max", "500ms", "--node", "spool-bound"],
              tmp.path("agent.log"))
try:
    if not cpu_sampler_up(agent):
        skip("the agent has no CPU sampler module (oncpu) here")
    dropped = wait_until(lambda: agent.metric("gpuscope_agent_spool_dropped_batches_total") >= 3, 20)
    m = agent.metrics()
    check(dropped, "oldest batches dropped past --spool-max: %s" %
          m.get("gpuscope_agent_spool_dropped_batches_total"))
    check(m.get("gpuscope_agent_spool_dropped_samples_total", 0) > 0,
          "dropped samples counted: %s" % m.get("gpuscope_agent_spool_dropped_samples_total"))
    check(0 < m.get("gpuscope_agent_spool_bytes", 0) <= 3072,
          "spool within its bound: %s bytes" % m.get("gpuscope_agent_spool_bytes"))
    check(m.get("gpuscope_agent_push_failures_total", 0) >= 1, "push failures counted")
    check(m.get("gpuscope_agent_batches_pushed_total", 1) == 0, "nothing pushed")
    rc = agent.stop()
    check(rc == 0, "agent exits 0 on SIGTERM (rc %s)" % rc)
    s = agent.summary()
    check(s is not None and s["delivered"] == 0 and s["dropped"] > 0,
          "exit summary counts the drops: %s" % s)
    files = sorted(f for f in os.listdir(spool) if re.match(r"^[0-9a-f]{16}-\d+\.zst$", f))
    check(len(files) >= 1 and len(files) == len(os.listdir(spool)),
          "only complete batch files on disk: %s" % files)
    seqs = [int(f[:16], 16) for f in files]
    check(seqs and min(seqs) > 1, "the oldest batch files are the ones gone (left: %s)" % seqs)
    in_spool = sum(int(f[17:].split(".")[0]) for f in files)
    check(s is not None and s["submitted"] == in_spool + s["dropped"] and s["spooled"] == len(files),
          "every sample is either in the spool or counted as dropped (%s: %d in %d files)" %
          (s, in_spool, len(files)))
finally:
    agent.stop()
    work.kill()
    work.wait()
    tmp.cleanup()
finish()
