#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""bench/agent_self/node.py: the agent's steady cost on a stand-in GPU training node (issue #33).

No GPU here, so the GPU machine's load is rebuilt from the stand-ins with the same ABI that the
tests use: one Debian python3 "training" process that maps the libcuda stand-in (the agent
finds it as a GPU process by itself, no --pid), loads the libcupti stand-in with the real
libgpuscope_cupti.so injected and the libtorch_cpu stand-in, and runs steps of a ~3 ms pure-Python
CPU phase, a `loss.backward()` (Engine::execute: its device thread launches 4 kernels of
2 ms through the CUPTI stand-in), 8 cuLaunchKernel of 1 ms of the libcuda stand-in and a
cuStreamSynchronize that waits for them (~90 steps a second); beside it
LOADERS (default 1) loader threads that sleep 1 ms in a loop (the switches of pin-memory and
loader threads; with one, ~2 000 sched events a second in all, as the H100's training process
gave: 1 353 switches and 678 wakeups a second). NVML is the replay library of the
H200 trace (tests/data/nvml) at real speed. The agent runs at its defaults (every module,
99 Hz, strips, NVML at its cadences, the default trace budget) with --bpf-stats.

AGENT... (default .output/gpuscope-agent) are run in turn, ROUNDS times (the order rotated every
round), on the same workload; each after WARM seconds, then two /metrics scrapes WINDOW seconds
apart: selftable.py's table (activities, BPF programs) and per agent the total in ms/s:
agent (its /proc/PID/stat), BPF, and their sum as % of one core. Run as root from the
repository root after `make` (AGENT_ARGS: more options for every agent):
  bench/agent_self/node.py [ROUNDS] [WINDOW] [WARM] [AGENT...]
"""
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "integration"))
sys.path.insert(0, HERE)
import pushlib  # noqa: E402
from pushlib import OUT, STANDIN_CUPTI, STANDIN_EXECUTE, Agent, Server  # noqa: E402
from run import measure  # noqa: E402
from selftable import table  # noqa: E402

ROOT = os.path.join(HERE, "..", "..")
LIB = os.path.join(OUT, "libgpuscope_cupti.so")
FAKE = os.path.join(OUT, "tests", "cupti", "fakecupti", "libcupti.so.13")
TORCH = os.path.join(OUT, "tests", "cupti", "faketorch", "libtorch_cpu.so")
CUDA = os.path.join(OUT, "tests", "cuda", "libcuda.so.1")
NVML = os.path.join(OUT, "tests", "nvml", "libnvidia-ml.so.1")
TRACE = os.path.join(ROOT, "tests", "data", "nvml", "h200.trace.gz")

WORKLOAD = """import ctypes, sys, threading, time
cuda = ctypes.CDLL(sys.argv[5], mode=ctypes.RTLD_GLOBAL)
""" + STANDIN_CUPTI + STANDIN_EXECUTE + r'''launch = cuda.cuLaunchKernel
launch.argtypes = [ctypes.c_void_p] + [ctypes.c_uint] * 7 + [ctypes.c_void_p] * 3
sync = cuda.cuStreamSynchronize
sync.argtypes = [ctypes.c_void_p]
K = b"_Z11autograd_mmPf"

def loader():
    while True:
        time.sleep(0.001)

def cpu_phase():
    t = time.perf_counter() + 0.003
    x = 0
    while time.perf_counter() < t:
        x += sum(i * i for i in range(200))
    return x

def loss_backward():
    execute(K, 4, 2000000, None)

def train_step():
    cpu_phase()
    for _ in range(8):
        launch(None, 1000, 1, 1, 1, 1, 1, 0, None, None, None)
    loss_backward()
    sync(None)

for _ in range(int(sys.argv[6])):
    threading.Thread(target=loader, daemon=True).start()
print("ready", flush=True)
end = time.time() + float(sys.argv[3])
while time.time() < end:
    train_step()
'''


def metric(text, name):
    """The sum of a family's samples in a /metrics text, None if absent."""
    v = None
    for line in text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{") or \
                line.startswith(name.rstrip("}") + ","):
            v = (v or 0.0) + float(line.rsplit(" ", 1)[1])
    return v


def one(binary, srv, tmp, tag, window, warm):
    pushlib.AGENT = binary
    env_keep = {k: os.environ.get(k) for k in ("GPUSCOPE_NVML_REPLAY",)}
    os.environ["GPUSCOPE_NVML_REPLAY"] = TRACE
    try:
        agent = Agent(srv.url, ["--bpf-stats", "--node", "node-" + tag, "--nvml-library", NVML] +
                      os.environ.get("AGENT_ARGS", "").split(),
                      os.path.join(tmp, "agent-%s.log" % tag), modules_off="")
    finally:
        for k, v in env_keep.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    try:
        a, b, cpu, secs = measure(agent, warm, window)
        text, s = table(a, b, secs)
        rates = []
        for name in ("gpuscope_agent_sched_intervals_total", "gpuscope_agent_sched_switches_total", "gpuscope_agent_sched_summaries_total",
                     "gpuscope_agent_cupti_backward_calls_total", "gpuscope_agent_cpu_samples_total"):
            va, vb = metric(a, name), metric(b, name)
            if va is not None and vb is not None:
                rates.append("%s %.0f/s" % (name[15:-6], (vb - va) / secs))
        for name, label, unit, scale in (
                ("gpuscope_agent_sched_stack_walk_seconds_total", "off-CPU walks", "ms/s", 1e3),
                ('gpuscope_agent_bpf_events_total{program="sched",event="kstack_same"}',
                 "kernel stacks re-used", "/s", 1),
                ('gpuscope_agent_bpf_events_total{program="sched",event="ustack_same"}',
                 "user stacks re-used", "/s", 1),
                ('gpuscope_agent_bpf_events_total{program="sched",event="stack_walks"}',
                 "user stacks walked", "/s", 1),
                ('gpuscope_agent_bpf_events_total{program="sched",event="stack_not_walked"}',
                 "not walked", "/s", 1)):
            va, vb = metric(a, name), metric(b, name)
            if va is not None and vb is not None:
                rates.append("%s %.2f %s" % (label, scale * (vb - va) / secs, unit))
        text += "\n" + ", ".join(rates)
        agent_ms = 1e3 * cpu / secs
        return text, agent_ms, s
    finally:
        agent.stop()


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 1
    window = float(sys.argv[2]) if len(sys.argv) > 2 else 30
    warm = float(sys.argv[3]) if len(sys.argv) > 3 else 15
    bins = sys.argv[4:] or [pushlib.AGENT]
    tmp = tempfile.mkdtemp(prefix="agent-node.")
    srv = Server(os.path.join(tmp, "data"))
    srv.start()
    script = os.path.join(tmp, "train.py")
    open(script, "w").write(WORKLOAD)
    env = dict(os.environ, LD_LIBRARY_PATH=os.path.dirname(FAKE))
    life = rounds * len(bins) * (window + warm + 60) + 120
    app = subprocess.Popen(["/usr/bin/python3", script, FAKE, LIB, str(life), TORCH, CUDA,
                            os.environ.get("LOADERS", "1")],
                           stdout=subprocess.PIPE, text=True, env=env)
    res = {b: [] for b in bins}
    try:
        assert app.stdout.readline().strip() == "ready"
        print("agent_self/node, %s, %d CPUs, %d rounds, window %.0f s after %.0f s" % (
            time.strftime("%Y-%m-%d %H:%M"), os.cpu_count(), rounds, window, warm), flush=True)
        for r in range(rounds):
            order = bins[r % len(bins):] + bins[:r % len(bins)]
            for i, b in enumerate(order):
                text, agent_ms, s = one(b, srv, tmp, "%d-%d" % (r, i), window, warm)
                bpf_ms = s["bpf_ms_per_s"]
                res[b].append((agent_ms, bpf_ms))
                print("\n== round %d, %s (load %s)" % (r + 1, b, open("/proc/loadavg").read().split()[0]))
                print(text)
                print("agent %.2f ms/s (/proc/PID/stat) + BPF %.2f ms/s = %.3f %% of a core" % (
                    agent_ms, bpf_ms, (agent_ms + bpf_ms) / 10), flush=True)
        print()
        for b in bins:
            v = res[b]
            print("%s: agent %s ms/s, BPF %s ms/s, mean total %.3f %% of a core" % (
                b, " ".join("%.2f" % x[0] for x in v), " ".join("%.2f" % x[1] for x in v),
                sum(x[0] + x[1] for x in v) / len(v) / 10))
    finally:
        app.kill()
        app.wait()
        srv.stop()
        if not os.environ.get("GPUSCOPE_KEEP_TEST_DIRS"):
            subprocess.run(["rm", "-rf", tmp])


if __name__ == "__main__":
    main()
