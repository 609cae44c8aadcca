#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""A process that maps libcuda after the agent started is followed within a second or two, from
the kernel's mmap records (the symbolizer's watch, passed on by run.c to the GPU process
tracker), not from the light /proc scan, which now runs every 10 s when that feed is up (it read
every process's /proc/PID/stat each second: ~1.7 ms/s of the agent on the H100 machine).
tests/progs/cuda_app dlopen()s the libcuda stand-in when told; the agent runs the sched module
alone, no --pid, no --all-processes, and this machine has no syscalls tracepoints (tracefs), so
the open hint of sched's on_openat is not there either: the mmap records are the one fast path.
"""
import os
import re
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(__file__))
from pushlib import OUT, Agent, Server, check, finish, need_root_and_binaries, wait_until  # noqa: E402

need_root_and_binaries()
PROGS = os.path.join(OUT, "tests", "progs")
LIBCUDA = os.path.join(OUT, "tests", "cuda", "libcuda.so.1")
tmp = tempfile.mkdtemp(prefix="gpuscope-disc-")
srv = Server(os.path.join(tmp, "data"))
srv.start()
app = subprocess.Popen([os.path.join(PROGS, "cuda_app"), LIBCUDA, "60", os.path.join(tmp, "syncs")],
                       stdin=subprocess.PIPE)
agent = None
try:
    agent = Agent(srv.url, ["--node", "disc", "--modules", "sched", "-v"],
                  os.path.join(tmp, "agent.log"), modules_off="")
    tracked = re.compile(r"tracking pid %d\b" % app.pid)
    time.sleep(1.5)     # a light scan or two before: the app maps no libcuda yet
    check(not tracked.search(agent.read_log()), "not followed before it maps libcuda")
    t0 = time.time()
    app.stdin.write(b"g")
    app.stdin.flush()
    ok = wait_until(lambda: tracked.search(agent.read_log()), 8, 0.05)
    took = time.time() - t0
    check(ok and took < 3.0,
          "followed %.2f s after it mapped libcuda (the light scan runs every 10 s)" % took)
    scans = agent.metric("gpuscope_agent_procs_scans_total")
    print("  /proc scans so far: %d" % scans)
finally:
    if agent:
        agent.stop()
    app.kill()
    app.wait()
    srv.stop()
finish()
