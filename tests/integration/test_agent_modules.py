#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""`gpuscope-agent run --modules X` for every module alone and every pair of modules: each run
starts, records what its modules record (and nothing of the others), and stops cleanly (exit 0,
no crash) after --duration. No module depends on another being on: before the stack cache moved
to run.c, `--modules sched --pid P` crashed at the first blocked stack. Workloads: dutyburn (CPU
samples, thread states), cuda_app on the libcuda stand-in (CUDA driver calls), cupti_replay on
the fake CUPTI library (GPU kernels), the NVML replay library (GPU metrics); meta is seen as
the cgroup/container labels on the other modules' records. cuda_probe attaches by uprobe_multi
links where the kernel has them, and once more alone by single uprobes (the fallback for
kernels without them). Three runs at a time (about a minute on a loaded 2-core machine)."""
import concurrent.futures
import itertools
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pushlib import (OUT, PROGS, ROOT, Scratch, Server, check, finish,  # noqa: E402
                     need_root_and_binaries, start_workload, wait_until)
from lib import AGENT  # noqa: E402

MODULES = ["meta", "cpu-sampler", "sched", "cuda_probe", "cupti", "nvml"]
NVML_REPLAY = os.path.join(OUT, "tests", "nvml", "libnvidia-ml.so.1")
NVML_TRACE = os.path.join(ROOT, "tests", "data", "nvml", "h200x8.trace.gz")
LIBCUDA = os.path.join(OUT, "tests", "cuda", "libcuda.so.1")
CUPTI_REPLAY = os.path.join(OUT, "tests", "cupti", "cupti_replay")
META_LABELS = ("cgroup", "systemd_unit", "container_id")
need_root_and_binaries()
for f in (NVML_REPLAY, LIBCUDA, CUPTI_REPLAY):
    check(os.path.exists(f), f"{os.path.relpath(f, ROOT)} is built")

tmp = Scratch("agent-modules")
server = Server(tmp.path("data"), log=tmp.path("server.log"))
server.start()
# a quarter of a CPU: samples and thread states in every 4 s run, without a spinning thread
# slowing the agents' starts (BPF verification) for the test's whole length
burn = start_workload(os.path.join(PROGS, "dutyburn"), "600", "25")
cuda = subprocess.Popen([os.path.join(PROGS, "cuda_app"), LIBCUDA, "600", tmp.path("syncs")],
                        stdin=subprocess.PIPE, stdout=subprocess.DEVNULL)
cuda.stdin.write(b"g")
cuda.stdin.flush()
RANGE = {"from": "%.3f" % (time.time() - 600), "to": "%.3f" % (time.time() + 3600)}


def start_cupti_replay():
    p = subprocess.Popen([CUPTI_REPLAY], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    check(p.stdout.readline().strip() == b"ready", "cupti_replay: the fake library is mapped")
    return p


def metric(path, name):
    try:
        import urllib.request
        body = urllib.request.urlopen(path, timeout=5).read().decode()
    except OSError:
        return None
    for line in body.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[-1])
    return None


def records(node):
    """What the server holds of node: {kind: count} of samples, intervals and series."""
    sel = '{node="%s"}' % node
    got = {}
    for kind in ("cpu", "offcpu_ns", "cuda_sync_ns", "gpu_kernel_ns"):
        got[kind] = server.query("flamegraph", selector=sel, kind=kind, **RANGE)["total"]
    for kind in ("thread_state", "cuda_api", "gpu_kernel"):
        got[kind] = len(server.query("intervals", kind=kind, selector=sel, limit="100000",
                                     **RANGE)["intervals"])
    got["gpu_power"] = len(server.query("series", name="gpu_power_watts", selector=sel,
                                        **RANGE)["series"])
    got["meta"] = any(server.query("label/%s/values" % n, selector=sel, **RANGE)["values"]
                      for n in META_LABELS)
    return got


def run(mods, single_uprobes=False):
    node = "mods-" + "-".join(mods) + ("-single" if single_uprobes else "")
    replay = start_cupti_replay() if "cupti" in mods else None
    pids = [burn.pid, cuda.pid] + ([replay.pid] if replay else [])
    # cuda_probe's uprobes attach at start, which took over 4 s at load 15: its agents run 3 s
    # from the attach (then SIGTERM), the others 4 s from their start
    probes = "cuda_probe" in mods
    argv = [AGENT, "run", "--server", server.url, "--metrics-listen", "127.0.0.1:0",
            "--modules", ",".join(mods), "--node", node, "--push-interval", "500ms",
            "--frequency", "199", "--nvml-library", NVML_REPLAY] + \
        ([] if probes else ["--duration", "4s"])
    for p in pids:
        argv += ["--pid", str(p)]
    env = dict(os.environ, GPUSCOPE_NVML_REPLAY=NVML_TRACE, GPUSCOPE_NVML_REPLAY_SPEED="4")
    env.pop("GPUSCOPE_AGENT_MODULES_OFF", None)
    env.pop("GPUSCOPE_CUDA_SINGLE_UPROBES", None)
    if single_uprobes:  # the way of kernels without uprobe_multi links (Linux < 6.6)
        env["GPUSCOPE_CUDA_SINGLE_UPROBES"] = "1"
    log = tmp.path(node + ".log")
    t0 = time.time()
    agent = subprocess.Popen(argv, stdout=open(log, "wb"), stderr=subprocess.STDOUT, env=env)
    if replay:
        # the probes fire once: after the module attached (its /proc scan at start)
        def attached():
            text = open(log, errors="replace").read()
            return agent.poll() is not None or "metrics: http" in text
        wait_until(attached, 30)
        replay.stdin.write(b"g")
        replay.stdin.flush()
    if probes:
        wait_until(lambda: agent.poll() is not None or
                   "probes attached" in open(log, errors="replace").read(), 60)
        time.sleep(3)
        agent.terminate()
    try:
        rc = agent.wait(150)
    except subprocess.TimeoutExpired:
        agent.kill()
        rc = agent.wait()
    if replay:
        replay.stdin.close()
        replay.wait(10)
    text = open(log, errors="replace").read()
    ok = check(rc == 0, f"{node}: started and stopped cleanly (exit {rc}, {time.time() - t0:.1f}s)")
    if not ok:
        print(text[-3000:])
        return
    for m in mods:
        if m != "meta":
            check(f"module {m}: not available" not in text, f"{node}: module {m} ran")
    if "cuda_probe" in mods:
        check(("cuda: single uprobes" in text) == single_uprobes,
              f"{node}: {'single uprobes' if single_uprobes else 'uprobe_multi links'}")
    got = records(node)
    stacks = [m for m in mods if m in ("cpu-sampler", "sched", "cuda_probe", "cupti")]
    want = {
        "thread_state": "sched" in mods,
        "cuda_api": "cuda_probe" in mods,
        "gpu_kernel": "cupti" in mods,
        "gpu_power": "nvml" in mods,
    }
    want.update({"cpu": "cpu-sampler" in mods, "cuda_sync_ns": "cuda_probe" in mods,
                 "gpu_kernel_ns": "cupti" in mods})
    if "sched" not in mods:
        want["offcpu_ns"] = False  # with sched: as the workloads happened to block
    for k, w in want.items():
        check(bool(got[k]) == w, f"{node}: {k} {'recorded' if w else 'absent'} ({got[k]})")
    if stacks:
        check(got["meta"] == ("meta" in mods),
              f"{node}: cgroup/container labels {'present' if 'meta' in mods else 'absent'}")


try:
    # Three agents at a time: most of a run is waiting (uprobe detach grace periods, /proc
    # scans); each has its own node and its own pids, so their records do not mix.
    combos = [list(m) for n in (1, 2) for m in itertools.combinations(MODULES, n)]
    with concurrent.futures.ThreadPoolExecutor(3) as pool:
        # first: its ~70 single uprobes take a grace period each to detach
        futures = [pool.submit(run, ["cuda_probe"], True)]
        futures += [pool.submit(run, m) for m in combos]
        for f in futures:
            f.result()
finally:
    burn.kill()
    cuda.kill()
    burn.wait()
    cuda.wait()
    server.stop()
    tmp.cleanup()
finish()
