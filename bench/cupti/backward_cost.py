#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The backward-call probe's BPF time per call, walking every call against re-using a thread's
last walked stack for a call from the same call site (docs/cupti.md, "Repeated backward calls").

No GPU: Debian's python3 loads the libcupti stand-in, the real libgpuscope_cupti.so and the
libtorch_cpu stand-in (as tests/integration/test_kernel_python_stacks.py does) and calls
Engine::execute in a loop from DEPTH Python frames deep, from one call site, with every
EVERY-th call from a second one (the signature must tell them apart: that call and the next are
walked; EVERY 0: one call site only, a training loop's case). A real server
and `gpuscope-agent run --modules cupti --bpf-stats --pid APP` are started ROUNDS times in each
mode, interleaved (the order swapped every round): `walk` (GPUSCOPE_CUPTI_BACKWARD_REUSE_MS=0:
every call walked, as before) and `reuse` (the default). For each run, after WARM seconds, two
/metrics scrapes WINDOW seconds apart: on_backward's run time / runs
(gpuscope_agent_bpf_run_seconds_total / gpuscope_agent_bpf_runs_total) and the share of calls
re-used. Run as root from the repository root after `make`:
bench/cupti/backward_cost.py [ROUNDS] [WINDOW] [WARM] [DEPTH] [EVERY]
"""
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "integration"))
from pushlib import OUT, STANDIN_CUPTI, STANDIN_EXECUTE, Agent, Server  # noqa: E402

LIB = os.path.join(OUT, "libgpuscope_cupti.so")
FAKE = os.path.join(OUT, "tests", "cupti", "fakecupti", "libcupti.so.13")
TORCH = os.path.join(OUT, "tests", "cupti", "faketorch", "libtorch_cpu.so")

WORKLOAD = "import ctypes, sys, time\n" + STANDIN_CUPTI + STANDIN_EXECUTE + r'''
K = b"_Z11autograd_mmPf"

def loss_backward():
    execute(K, 1, 10000, None)

def train_step():
    loss_backward()

def eval_step():
    loss_backward()

def loop(depth, end):
    if depth > 0:
        return loop(depth - 1, end)
    i = 0
    while time.time() < end:
        if every and i % every == every - 1:
            eval_step()
        else:
            train_step()
        i += 1
        time.sleep(0.001)

every = int(sys.argv[6])
print("ready", flush=True)
loop(int(sys.argv[5]), time.time() + float(sys.argv[3]))
'''


def delta(a, b, name, prog):
    def get(m):
        return sum(v for k, v in m.items() if k.startswith(name + "{") and
                   'program="%s"' % prog in k)
    return get(b) - get(a)


def one(mode, window, warm, depth, every, tmp, r):
    srv = Server(os.path.join(tmp, "data-%s-%d" % (mode, r)))
    srv.start()
    script = os.path.join(tmp, "bw.py")
    open(script, "w").write(WORKLOAD)
    env = dict(os.environ, LD_LIBRARY_PATH=os.path.dirname(FAKE))
    app = subprocess.Popen(["/usr/bin/python3", script, FAKE, LIB, str(window + warm + 120),
                            TORCH, str(depth), str(every)], stdout=subprocess.PIPE, text=True, env=env)
    agent = None
    saved = os.environ.pop("GPUSCOPE_CUPTI_BACKWARD_REUSE_MS", None)
    try:
        assert app.stdout.readline().strip() == "ready"
        if mode == "walk":
            os.environ["GPUSCOPE_CUPTI_BACKWARD_REUSE_MS"] = "0"
        agent = Agent(srv.url, ["--pid", str(app.pid), "--modules", "cupti", "--bpf-stats",
                                "--node", "bwcost"], os.path.join(tmp, "agent-%s-%d.log" % (mode, r)),
                      modules_off="")
        time.sleep(warm)
        a = agent.metrics()
        time.sleep(window)
        b = agent.metrics()
        runs = delta(a, b, "gpuscope_agent_bpf_runs_total", "on_backward")
        secs = delta(a, b, "gpuscope_agent_bpf_run_seconds_total", "on_backward")
        calls = b.get("gpuscope_agent_cupti_backward_calls_total", 0) - \
            a.get("gpuscope_agent_cupti_backward_calls_total", 0)
        reused = b.get("gpuscope_agent_cupti_backward_stacks_reused_total", 0) - \
            a.get("gpuscope_agent_cupti_backward_stacks_reused_total", 0)
        return runs, secs, calls, reused
    finally:
        os.environ.pop("GPUSCOPE_CUPTI_BACKWARD_REUSE_MS", None)
        if saved is not None:
            os.environ["GPUSCOPE_CUPTI_BACKWARD_REUSE_MS"] = saved
        if agent:
            agent.stop()
        app.kill()
        app.wait()
        srv.stop()


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    window = float(sys.argv[2]) if len(sys.argv) > 2 else 20
    warm = float(sys.argv[3]) if len(sys.argv) > 3 else 5
    depth = int(sys.argv[4]) if len(sys.argv) > 4 else 20
    every = int(sys.argv[5]) if len(sys.argv) > 5 else 5
    tmp = tempfile.mkdtemp(prefix="bwcost.")
    res = {"walk": [], "reuse": []}
    print("backward_cost, %s, %d CPUs, %d rounds, window %.0f s after %.0f s, %d extra Python "
          "frames, every %d-th call from a second call site" % (
              time.strftime("%Y-%m-%d %H:%M"), os.cpu_count(), rounds, window, warm, depth,
              every))
    try:
        for r in range(rounds):
            for mode in (("walk", "reuse") if r % 2 == 0 else ("reuse", "walk")):
                runs, secs, calls, reused = one(mode, window, warm, depth, every, tmp, r)
                us = 1e6 * secs / max(runs, 1)
                res[mode].append(us)
                print("  round %d %-5s: %6d runs, %6.2f us per call, %5.1f %% re-used, load %s"
                      % (r + 1, mode, runs, us, 100.0 * reused / max(calls, 1),
                         open("/proc/loadavg").read().split()[0]), flush=True)
    finally:
        if not os.environ.get("GPUSCOPE_KEEP_TEST_DIRS"):
            subprocess.run(["rm", "-rf", tmp])
    for mode in ("walk", "reuse"):
        v = sorted(res[mode])
        print("%-5s: median %.2f us per call (%s)" % (mode, v[len(v) // 2],
                                                      ", ".join("%.2f" % x for x in res[mode])))


if __name__ == "__main__":
    main()
