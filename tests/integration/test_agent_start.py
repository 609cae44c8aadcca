#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The agent's start (issue #33): with every module on and two CPU-bound programs beside it on
this 2-core machine, its first CPU sample comes at most 3 s after its start (the target is 1 s;
the margin is for a loaded CI machine: the BPF verifier took 5-20 s here before the walker's
Python steps became global functions), /metrics carries every module's start time
(gpuscope_agent_module_start_seconds, _up_after_seconds) and gpuscope_agent_first_sample_seconds,
and cuda_probe's uprobes on the libcuda stand-in are held by two uprobe_multi links (Linux >= 6.6),
so that stopping the agent takes one grace period for them, not one per probe. The figures are
printed (start to each module, stop time)."""
import os
import platform
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pushlib import (OUT, PROGS, ROOT, Agent, Scratch, check, finish,  # noqa: E402
                     free_port, need_root_and_binaries, start_workload, wait_until)

MODULES = ["meta", "cpu-sampler", "sched", "cuda_probe", "cupti", "nvml"]
NVML_REPLAY = os.path.join(OUT, "tests", "nvml", "libnvidia-ml.so.1")
NVML_TRACE = os.path.join(ROOT, "tests", "data", "nvml", "h200x8.trace.gz")
LIBCUDA = os.path.join(OUT, "tests", "cuda", "libcuda.so.1")
FIRST_SAMPLE_MAX_S = 3.0
need_root_and_binaries(server=False)
for f in (NVML_REPLAY, LIBCUDA):
    check(os.path.exists(f), f"{os.path.relpath(f, ROOT)} is built")

tmp = Scratch("agent-start")
burns = [start_workload(os.path.join(PROGS, "burn"), "120") for _ in range(2)]
cuda = subprocess.Popen([os.path.join(PROGS, "cuda_app"), LIBCUDA, "120", tmp.path("syncs")],
                        stdin=subprocess.PIPE, stdout=subprocess.DEVNULL)
cuda.stdin.write(b"g")
cuda.stdin.flush()
agent = None
try:
    os.environ.update(GPUSCOPE_NVML_REPLAY=NVML_TRACE, GPUSCOPE_NVML_REPLAY_SPEED="4")
    os.environ.pop("GPUSCOPE_CUDA_SINGLE_UPROBES", None)
    args = ["--node", "start", "--nvml-library", NVML_REPLAY, "--stop-grace", "0s"]
    for p in burns + [cuda]:
        args += ["--pid", str(p.pid)]
    # nothing listens there: the start does not wait for a server, and pushes spool in memory
    t0 = time.monotonic()
    agent = Agent("http://127.0.0.1:%d" % free_port(), args, tmp.path("agent.log"),
                  modules_off="")
    up_s = time.monotonic() - t0
    m = {}
    wait_until(lambda: m.update(agent.metrics()) or
               "gpuscope_agent_first_sample_seconds" in m, 15)
    first = m.get("gpuscope_agent_first_sample_seconds")
    check(first is not None and 0 < first <= FIRST_SAMPLE_MAX_S,
          f"first CPU sample {first} s after the start (<= {FIRST_SAMPLE_MAX_S} s; /metrics "
          f"answered after {up_s:.2f} s)")
    for mod in MODULES:
        label = '{module="%s"}' % mod
        start = m.get("gpuscope_agent_module_start_seconds" + label)
        after = m.get("gpuscope_agent_module_up_after_seconds" + label)
        check(m.get("gpuscope_agent_module_up" + label) == 1 and start is not None and
              after is not None and 0 <= start <= after,
              f"module {mod}: up, its start {start} s, up {after} s after the agent's start")
    # cuda_probe attaches once it has read cuda_app's maps (its first ticks)
    wait_until(lambda: "probes attached" in agent.read_log(), 20)
    m = agent.metrics()
    probes = m.get("gpuscope_agent_cuda_probes_attached", 0)
    multi = m.get('gpuscope_agent_cuda_probe_links{kind="uprobe_multi"}', 0)
    single = m.get('gpuscope_agent_cuda_probe_links{kind="uprobe"}', 0)
    kernel = tuple(int(x) for x in platform.release().split(".")[:2])
    if kernel >= (6, 6):
        check(probes > 0 and multi == 2 and single == 0,
              f"{probes:.0f} uprobes in {multi:.0f} uprobe_multi links ({single:.0f} single)")
    else:
        check(probes > 0 and multi == 0 and single == probes,
              f"Linux {platform.release()}: {probes:.0f} single uprobes")
    t0 = time.monotonic()
    rc = agent.stop()
    print(f"     stopped in {time.monotonic() - t0:.2f} s")
    check(rc == 0, f"the agent stopped cleanly (exit {rc})")
    agent = None
finally:
    if agent:
        agent.stop()
    for p in burns + [cuda]:
        p.kill()
        p.wait()
    tmp.cleanup()
finish()
