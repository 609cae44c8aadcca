#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""A synchronizing CUDA call's stack re-used while a thread calls from the same place again
(docs/strips.md, "CUDA driver API"): Debian's python3 calls cuStreamSynchronize of the libcuda
stand-in after a 2-ms launch, twice from Python function sync_a, then twice from sync_b, and so on
(one C call site, ctypes, so only the Python frames tell the two apart). A live agent
(cpu-sampler and cuda_probe, --pid) reports each sync as a cuda_api interval with its caller's
stack: every one must carry its own Python function, never the other's, and the repeated ones
must have re-used the stack (gpuscope_agent_bpf_events_total{program="cuda",event="stack_same"}).
Fails when the re-use ignores the Python frames of the call site."""
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(__file__))
from pushlib import (OUT, Agent, Server, need_root_and_binaries, site_stacks,  # noqa: E402
                     run_under_agent, two_site_script)
from lib import check, finish  # noqa: E402

need_root_and_binaries()
LIBCUDA = os.path.join(OUT, "tests", "cuda", "libcuda.so.1")
WORKLOAD = two_site_script(
    "cuda = ctypes.CDLL(sys.argv[3], mode=ctypes.RTLD_GLOBAL)\n"
    "launch = cuda.cuLaunchKernel\n"
    "launch.argtypes = [ctypes.c_void_p] + [ctypes.c_uint] * 7 + [ctypes.c_void_p] * 3\n"
    "sync = cuda.cuStreamSynchronize\n"
    "sync.argtypes = [ctypes.c_void_p]",
    "launch(None, 2000, 1, 1, 1, 1, 1, 0, None, None, None); sync(None)",
    "time.sleep(0.003)", "sync_a", "sync_b")

tmp = tempfile.mkdtemp(prefix="gpuscope-cuda-sync-stacks-")
srv = Server(os.path.join(tmp, "data"))
srv.start()
script = os.path.join(tmp, "w.py")
open(script, "w").write(WORKLOAD)
calls_log = os.path.join(tmp, "calls.txt")
app = subprocess.Popen(["/usr/bin/python3", script, calls_log, "6", LIBCUDA], stdin=subprocess.PIPE,
                       text=True)
agent = None
try:
    agent = Agent(srv.url, ["--node", "syncstk", "--pid", str(app.pid), "--push-interval", "1s",
                            "--modules", "cpu-sampler,cuda_probe", "--no-gpu"],
                  os.path.join(tmp, "agent.log"), modules_off="")
    # the process's tables first, then its calls
    same, rc = run_under_agent(agent, app, 1,
                               'gpuscope_agent_bpf_events_total{program="cuda",event="stack_same"}')
    agent = None
    check(rc == 0, "agent exits 0 (%s)" % rc)
    calls = [ln.split() for ln in open(calls_log)]
    ivs = srv.query("intervals", kind="cuda_api", since="1h", limit=100000,
                    selector='{node="syncstk"}')["intervals"]
    ivs = [iv for iv in ivs if iv["attrs"].get("api") == "cuStreamSynchronize"]
    good, bad = site_stacks(srv, calls, ivs, ("sync_a", "sync_b"))
    print("%d sync calls, %d matched to an interval with their own function, %d wrong; "
          "%d stacks re-used" % (len(calls), good, len(bad), same))
    check(len(calls) >= 200 and good >= len(calls) * 0.9,
          "the sync calls' intervals carry their caller's stack (%d of %d)" % (good, len(calls)))
    check(not bad, "no sync call under the other call site's stack: %s" % bad[:3])
    check(same >= len(calls) / 4, "repeated call sites re-used their stack (%d)" % same)
finally:
    if agent:
        agent.stop()
    if app.poll() is None:
        app.kill()
    srv.stop()
finish()
