#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""A blocked state's user stack re-used while a thread blocks from the same call site again
(docs/strips.md): Debian's python3 sleeps 3 ms twice from Python function nap_a, then twice from
nap_b, and so on: one C call site (time.sleep), the same syscall, so only the Python frames tell
the two apart. A live agent (cpu-sampler and sched, --pid, every switch-out allowed a walk, no
event budget) reports each sleep as a blocked thread_state with its stack: every one must carry
its own Python function, never the other's, and the repeats must have re-used the stack
(gpuscope_agent_bpf_events_total{program="sched",event="ustack_same"}). Fails when the re-use
ignores the Python frames of the call site."""
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(__file__))
from pushlib import (Agent, Server, need_root_and_binaries, site_stacks,  # noqa: E402
                     run_under_agent, two_site_script)
from lib import check, finish  # noqa: E402

need_root_and_binaries()
WORKLOAD = two_site_script("", "time.sleep(0.003)",
                           "x = sum(j * j for j in range(2000))  # run a little between the naps",
                           "nap_a", "nap_b")

tmp = tempfile.mkdtemp(prefix="gpuscope-offcpu-reuse-")
srv = Server(os.path.join(tmp, "data"))
srv.start()
script = os.path.join(tmp, "w.py")
open(script, "w").write(WORKLOAD)
naps_log = os.path.join(tmp, "naps.txt")
app = subprocess.Popen(["/usr/bin/python3", script, naps_log, "5"], stdin=subprocess.PIPE, text=True)
agent = None
try:
    agent = Agent(srv.url, ["--node", "offreuse", "--pid", str(app.pid), "--push-interval", "1s",
                            "--modules", "cpu-sampler,sched", "--no-gpu",
                            "--offcpu-walk-share", "0", "--strip-event-rate", "0"],
                  os.path.join(tmp, "agent.log"), modules_off="")
    # the process's tables first, then its calls
    same, rc = run_under_agent(agent, app, 2,
                               'gpuscope_agent_bpf_events_total{program="sched",event="ustack_same"}')
    agent = None
    check(rc == 0, "agent exits 0 (%s)" % rc)
    calls = naps = [ln.split() for ln in open(naps_log)]
    ivs = srv.query("intervals", kind="thread_state", since="1h", limit=100000,
                    selector='{node="offreuse"}')["intervals"]
    ivs = [iv for iv in ivs if iv["attrs"].get("state") == "blocked" and
           iv["attrs"].get("summary") != "1"]
    good, bad = site_stacks(srv, calls, ivs, ("nap_a", "nap_b"), min_ms=2)
    print("%d naps, %d blocked states under their own function, %d under the wrong one or none; "
          "%d user stacks re-used" % (len(naps), good, len(bad), same))
    check(len(naps) >= 300 and good >= len(naps) * 0.8,
          "the naps' blocked states carry their caller's stack (%d of %d)" % (good, len(naps)))
    check(not [b for b in bad if b[1] and ("nap_a" in b[1] or "nap_b" in b[1])],
          "no nap under the other call site's stack: %s" % bad[:3])
    check(same >= len(naps) / 4, "repeated call sites re-used their stack (%d)" % same)
finally:
    if agent:
        agent.stop()
    if app.poll() is None:
        app.kill()
    srv.stop()
finish()
