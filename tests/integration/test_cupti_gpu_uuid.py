#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Kernels land on the GPU NVML numbers, not on CUDA's ordinal in the process. A process in a
container (or with CUDA_VISIBLE_DEVICES) sees its one GPU as ordinal 0 while the node's NVML
calls it 5: before, its kernels said gpu="0", and the GPU-idle filter and busy ranges joined
them with the wrong GPU. tests/cupti/cupti_window runs the real libgpuscope_cupti.so over the
fake libcupti (kernels on device 0) with the libcuda stand-in loaded, whose ordinal 0 has the
UUID of GPU 5 of the recorded 8-GPU NVML trace; the library reports each ordinal's UUID at a
window's open, and a real agent (cupti + nvml modules on the NVML replay library, continuous
tracing) puts the kernels, their busy ranges and the window's observed range on gpu 5, with
the CUDA ordinal kept as the kernel's `device` attribute. Then a process whose UUID NVML does
not know keeps its ordinal, counted as unmapped."""
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(__file__))
from pushlib import (OUT, ROOT, Agent, Server, check, finish,  # noqa: E402
                     need_root_and_binaries, start_cupti_window)
from lib import wait_until  # noqa: E402

need_root_and_binaries()
LIBCUDA = os.path.join(OUT, "tests", "cuda", "libcuda.so.1")
NVML_REPLAY = os.path.join(OUT, "tests", "nvml", "libnvidia-ml.so.1")
NVML_TRACE = os.path.join(ROOT, "tests", "data", "nvml", "h200x8.trace.gz")
GPU5 = "GPU-93c13fbe-c719-4532-02e7-910bdac716a5"
tmp = tempfile.mkdtemp(prefix="gpuscope-gpu-uuid-")
srv = Server(os.path.join(tmp, "data"))
srv.start()
os.environ.update(GPUSCOPE_NVML_REPLAY=NVML_TRACE, GPUSCOPE_STANDIN_UUIDS=GPU5)
app = start_cupti_window("sync:%s:100000" % LIBCUDA)	# libcuda loaded, never synchronizing
os.environ["GPUSCOPE_STANDIN_UUIDS"] = "GPU-00000000-1111-2222-3333-444444444444"
other = start_cupti_window("sync:%s:100000" % LIBCUDA)
t0 = time.time()
agent = None
try:
    agent = Agent(srv.url, ["--node", "gpuuuid", "--pid", str(app.pid), "--pid", str(other.pid),
                            "--push-interval", "1s", "--modules", "cupti,nvml",
                            "--nvml-library", NVML_REPLAY, "--gpu-trace-budget", "100%"],
                  os.path.join(tmp, "agent.log"), modules_off="")
    mapped = 'gpuscope_agent_cupti_devices_total{result="mapped"}'
    unmapped = 'gpuscope_agent_cupti_devices_total{result="unmapped"}'
    wait_until(lambda: agent.metric(mapped) >= 1 and agent.metric(unmapped) >= 1 and
               agent.metric("gpuscope_agent_cupti_kernels_total") > 200, 30)
    check(agent.metric(mapped) >= 1, "the library's UUID of ordinal 0 was found in NVML (%d)"
          % agent.metric(mapped))
    check(agent.metric(unmapped) >= 1, "a UUID NVML does not know is counted unmapped (%d)"
          % agent.metric(unmapped))
    time.sleep(2.5)
    rc = agent.stop()
    check(rc == 0, "agent exits 0 (%s)" % rc)
    agent = None
    rng = {"from": "%.3f" % (t0 - 60), "to": "%.3f" % (time.time() + 60)}

    def kernel_gpus(pid):
        ivs = srv.query("intervals", kind="gpu_kernel", selector='{pid="%d"}' % pid,
                        limit="100000", **rng)["intervals"]
        return ({iv["labels"].get("gpu") for iv in ivs},
                {iv["attrs"].get("device") for iv in ivs}, len(ivs))
    gpus, devs, n = kernel_gpus(app.pid)
    check(n > 0 and gpus == {"5"}, "%d kernels of the remapped process on gpu %s (want 5)"
          % (n, sorted(gpus)))
    check(devs == {"0"}, "... with their CUDA ordinal as the device attribute (%s)" % sorted(devs))
    gpus, _, n = kernel_gpus(other.pid)
    check(n > 0 and gpus == {"0"}, "%d kernels of the unknown-UUID process keep ordinal %s"
          % (n, sorted(gpus)))
    busy = srv.query("intervals", kind="gpu_busy", selector='{node="gpuuuid",source="kernels"}',
                     limit="100000", **rng)["intervals"]
    obs = srv.query("intervals", kind="gpu_observed",
                    selector='{node="gpuuuid",source="kernels"}', limit="100000",
                    **rng)["intervals"]
    check({b["labels"].get("gpu") for b in busy} == {"0", "5"},
          "kernel busy ranges on gpu 5 (mapped) and 0 (unmapped): %s"
          % sorted({b["labels"].get("gpu") for b in busy}))
    check("5" in {o["labels"].get("gpu") for o in obs},
          "the windows observed gpu 5: %s" % sorted({o["labels"].get("gpu") for o in obs}))
finally:
    if agent:
        agent.stop()
    for p in (app, other):
        p.stdin.close()
        p.wait(timeout=30)
    srv.stop()
finish()
