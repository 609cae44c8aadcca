#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Findings from a live local workload through a real agent (real eBPF: CPU samples with Python
frames, thread states), no GPU: the NVML replay (tests/nvml-replay, the H200x8 trace with its
utilization at 0 and its processes replaced) makes the agent see GPU 0 held by a CPU-bound Python
consumer and GPU 1 by a reader blocked on a pipe (tests/integration/insights_live_work.py), both
idle. /api/v1/insights by pid must name the consumer's input work (tokenize, by file and line)
and the reader's starved pipeline, and nothing else of theirs."""
import gzip
import os
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pushlib import (OUT, ROOT, Agent, Server, check, finish, skip,  # noqa: E402
                     need_root_and_binaries)

need_root_and_binaries()
PY = "/usr/bin/python3"
if not os.access(PY, os.X_OK):
    skip("Debian's python3 is not installed")
TRACE = os.path.join(ROOT, "tests", "data", "nvml", "h200x8.trace.gz")
REPLAY = os.path.join(OUT, "tests", "nvml", "old", "libnvidia-ml.so.1")	# no GPM
WORK = os.path.join(os.path.dirname(os.path.abspath(__file__)), "insights_live_work.py")
RUN_S = 12


def derive(path, holders):
    """The trace with every GPU utilization sample at 0 and GPU g held only by holders[g]."""
    with gzip.open(TRACE, "rt") as f, open(path, "w") as out:
        for line in f:
            t = line.split()
            if len(t) > 8 and t[1] == "samples" and t[3] == "1":
                t[8:] = [p.split(":")[0] + ":0" for p in t[8:]]
            elif len(t) > 4 and t[1] == "procs":
                pid = holders.get(t[2])
                t[4:] = ["1", f"{pid}:1000000000:4294967295:4294967295"] if pid else ["0"]
            elif len(t) > 5 and t[1] == "procutil":
                pid = holders.get(t[2])
                t[5:] = ["1", f"{pid}:{t[6].split(':')[1]}:0:0:0:0"] if pid and len(t) > 6 \
                    else ["0"]
            out.write(" ".join(t) + "\n")


def main():
    tmp = tempfile.mkdtemp(prefix="gpuscope-insights-live-")
    srv = Server(os.path.join(tmp, "data"), log=os.path.join(tmp, "server.log"),
                 args=["--settle", "1s"])
    srv.start()
    work = {m: subprocess.Popen([PY, WORK, m, "600"], stdout=subprocess.PIPE)
            for m in ("consumer", "reader")}
    agent = None
    try:
        for p in work.values():
            check(p.stdout.readline().strip() == b"ready", "workload ready")
        pids = {m: str(p.pid) for m, p in work.items()}
        trace = os.path.join(tmp, "live.trace")
        derive(trace, {"0": pids["consumer"], "1": pids["reader"]})
        os.environ.update(GPUSCOPE_NVML_REPLAY=trace, GPUSCOPE_NVML_REPLAY_LOOP="1")
        agent = Agent(srv.url, ["--node", "live", "--pid", pids["consumer"], "--pid",
                                pids["reader"], "--push-interval", "1s", "--nvml-library",
                                REPLAY], os.path.join(tmp, "agent.log"),
                      modules_off="cuda_probe,cupti", hold=list(work.values()))
        t0 = time.time()
        time.sleep(RUN_S)
        t1 = time.time()
        check(agent.stop() == 0, "agent exits 0")
        agent = None
        ans = srv.query("insights", **{"from": f"{t0:.3f}", "to": f"{t1:.3f}", "by": "pid"})
        got = {}
        for f in ans["findings"]:
            got.setdefault(f["workload"], []).append(f)
        for m, kind, text in [("consumer", "input_on_launch_thread",
                               "tokenize (insights_live_work.py:"),
                              ("reader", "starved_dataloader", "blocked")]:
            fs = got.get(pids[m], [])
            check([f["kind"] for f in fs] == [kind] and text in fs[0]["summary"] and
                  fs[0]["gpu_seconds_at_stake"] > 0.3 * (t1 - t0),
                  f"{m} (pid {pids[m]}): {kind} naming '{text}': "
                  f"{[(f['kind'], f['gpu_seconds_at_stake'], f['summary']) for f in fs]}")
        others = [f["id"] for f in ans["findings"] if f["workload"] not in pids.values()]
        check(not others, f"no other finding: {others}")
    finally:
        if agent:
            agent.stop()
        for p in work.values():
            p.send_signal(signal.SIGKILL)
            p.wait()
        srv.stop()
    return finish()


if __name__ == "__main__":
    sys.exit(main())
