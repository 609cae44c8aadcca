#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
# A real Prometheus scrapes a real `gpuscope-agent run` whose NVML is the replay library playing
# the 8-GPU trace derived from the H200 recording; PromQL through Prometheus's HTTP API must
# return what the trace holds: per-GPU gauges, the max of every power sample between scrapes,
# the utilization-weighted busy seconds, errors only on the GPU that fell off, the Xid event.
import gzip
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lib import AGENT, OUT, ROOT, check, finish, free_port, prom_query, skip, wait_until  # noqa: E402

TRACE = os.path.join(ROOT, "tests", "data", "nvml", "h200x8.trace.gz")
REPLAY = os.path.join(OUT, "tests", "nvml", "libnvidia-ml.so.1")
SPEED = 2
PROM = shutil.which("prometheus") or "/usr/bin/prometheus"
if not os.path.exists(PROM):
    skip("prometheus is not installed (Debian package 'prometheus')")
for f in (AGENT, REPLAY, TRACE):
    if not os.path.exists(f):
        skip(f"{f} is missing: run make")


def expected():
    """Per GPU: the union of the buffered samples the trace holds, as the driver hands them."""
    streams, total = {}, {}
    with gzip.open(TRACE, "rt") as f:
        for line in f:
            tok = line.split()
            if len(tok) > 8 and tok[1] == "samples" and tok[5] == "0":
                d = streams.setdefault((tok[2], int(tok[3])), {})
                for p in tok[8:]:
                    ts, v = p.split(":")
                    d.setdefault(int(ts), int(v))
            elif len(tok) > 4 and tok[1] == "meminfo2" and tok[3] == "0":
                total[tok[2]] = int(tok[4])
    exp = {}
    for k in range(8):
        g = str(k)
        power = streams.get((g, 0), {})
        util = sorted(streams.get((g, 1), {}).items())
        busy = idle = 0.0
        for (t0, _), (t1, v) in zip(util, util[1:]):
            d_s = min(t1 - t0, 1000000) / 1e6
            busy += d_s * v / 100.0
            if v == 0:
                idle += d_s
        exp[g] = {"power_max": max(power.values()) / 1000.0, "busy": busy, "idle": idle,
                  "fb_total_mib": total[g] / 1048576, "nutil": len(util)}
    return exp


def query(prom_port, q):
    return {json.dumps(m, sort_keys=True): v for m, v, _ in prom_query(prom_port, q)}


def one(prom_port, q):
    r = query(prom_port, q)
    return next(iter(r.values())) if len(r) == 1 else None


def main():
    exp = expected()
    tmp = tempfile.mkdtemp(prefix="nvml-prom-")
    env = dict(os.environ, GPUSCOPE_NVML_REPLAY=TRACE, GPUSCOPE_NVML_REPLAY_SPEED=str(SPEED))
    env.pop("GPUSCOPE_NVML_REPLAY_LOOP", None)
    agent_log = open(os.path.join(tmp, "agent.log"), "w+")
    # --pid: CPU sampling of this (sleeping) test only; the server is absent, pushes spool.
    agent = subprocess.Popen(
        [AGENT, "run", "--server", f"http://127.0.0.1:{free_port()}", "--metrics-listen",
         "127.0.0.1:0", "--nvml-library", REPLAY, "--pid", str(os.getpid()),
         "--node", "nvml-test", "--retry-max", "5s"],
        stdout=agent_log, stderr=subprocess.STDOUT, env=env)
    prom = None
    try:
        def agent_port():
            agent_log.seek(0)
            for line in agent_log:
                if "metrics: http://127.0.0.1:" in line:
                    return int(line.rsplit(":", 1)[1].split("/")[0])
            return None
        # every module's BPF programs load first: on a loaded 2-core machine that took over
        # 20 s once (fresh-clone run 12); 60 s, as test_offcpu_live.py waits
        port = wait_until(agent_port, 60)
        if not check(port is not None, "agent serves /metrics"):
            agent_log.seek(0)
            print(agent_log.read()[-3000:])
            return
        prom_port = free_port()
        with open(os.path.join(tmp, "prometheus.yml"), "w") as f:
            f.write("global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
                    "  evaluation_interval: 1s\n"
                    "scrape_configs:\n  - job_name: gpuscope-agent\n    static_configs:\n"
                    f"      - targets: ['127.0.0.1:{port}']\n")
        prom = subprocess.Popen(
            [PROM, f"--config.file={tmp}/prometheus.yml", f"--storage.tsdb.path={tmp}/data",
             f"--web.listen-address=127.0.0.1:{prom_port}"],
            stdout=open(os.path.join(tmp, "prometheus.log"), "w"), stderr=subprocess.STDOUT)

        def ready():
            try:
                return urllib.request.urlopen(f"http://127.0.0.1:{prom_port}/-/ready",
                                              timeout=1).status == 200
            except OSError:
                return False
        if not check(wait_until(ready, 30), "prometheus ready"):
            return
        # The trace plays in 16/SPEED s; the last drain comes <= 1 s later; then a scrape.
        def all_busy():
            got = query(prom_port, 'gpuscope_agent_gpu_busy_seconds_total{mig_uuid=""}')
            got = {json.loads(k)["gpu"]: v for k, v in got.items()}
            return all(abs(got.get(g, -1) - e["busy"]) < 1e-9 for g, e in exp.items())
        # utilization buffers are drained every 4th run: every GPU's last samples within ~4 s
        # after the trace ends (gpu 5 later: it comes back from its backoff first)
        check(wait_until(all_busy, 40, step=0.5), "every GPU's busy seconds reached the trace's")
        time.sleep(1.5)	# one more scrape: every window closed
        check(one(prom_port, "count(DCGM_FI_DEV_POWER_USAGE)") == 8,
              "count(DCGM_FI_DEV_POWER_USAGE) == 8 GPUs")
        check(one(prom_port, "count(DCGM_FI_DEV_GPU_UTIL)") == 7,
              "count(DCGM_FI_DEV_GPU_UTIL) == 7 (GPU 7 runs MIG: no utilization samples)")
        check(one(prom_port, 'count(DCGM_FI_DEV_FB_USED{mig_uuid!=""})') == 2,
              "two MIG devices report their own memory")
        uuids = query(prom_port, 'count by (UUID) (DCGM_FI_DEV_POWER_USAGE)')
        check(len(uuids) == 8, f"8 distinct UUIDs ({len(uuids)})")
        # Each scrape closes the agent's max/p99 window; a scrape that Prometheus gave up on
        # (timeout on this shared machine) loses its window, and then only <= can hold.
        failed = one(prom_port, "count_over_time(up[5m]) - sum_over_time(up[5m])") or 0
        print(f"scrapes that failed: {failed:.0f}")
        for g, e in sorted(exp.items()):
            sel = f'{{gpu="{g}",mig_uuid=""}}'
            pmax = one(prom_port, f"max_over_time(gpuscope_agent_gpu_power_watts_max{sel}[5m])")
            if failed == 0:
                check(pmax is not None and abs(pmax - e["power_max"]) < 1e-9,
                      f"gpu {g}: max of per-scrape power max = {pmax} W, trace max "
                      f"{e['power_max']} W")
            else:
                check(pmax is None or pmax <= e["power_max"] + 1e-9,
                      f"gpu {g}: per-scrape power max {pmax} <= trace max {e['power_max']}")
            p99 = one(prom_port, f"max_over_time(gpuscope_agent_gpu_power_watts_p99{sel}[5m])")
            check((p99 is None and failed) or (p99 is not None and p99 <= e["power_max"]),
                  f"gpu {g}: p99 {p99} <= max")
            busy = one(prom_port, f"gpuscope_agent_gpu_busy_seconds_total{sel}")
            idle = one(prom_port, f"gpuscope_agent_gpu_idle_seconds_total{sel}")
            check(busy is not None and abs(busy - e["busy"]) < 1e-9,
                  f"gpu {g}: busy {busy} s == {e['busy']:.9f} s from {e['nutil']} samples")
            check(idle is not None and abs(idle - e["idle"]) < 1e-9,
                  f"gpu {g}: idle {idle} s == {e['idle']:.9f} s")
            fb = one(prom_port, f"DCGM_FI_DEV_FB_TOTAL{sel}")
            check(fb is not None and abs(fb - e["fb_total_mib"]) < 1e-6,
                  f"gpu {g}: FB total {fb} MiB")
        errs = query(prom_port, 'gpuscope_agent_nvml_errors_total{mig_uuid=""} > 0')
        check([json.loads(k)["gpu"] for k in errs] == ["5"],
              f"NVML errors only on gpu 5, which fell off the bus for 1.5 s ({list(errs)})")
        check(one(prom_port, 'gpuscope_agent_gpu_events_total{gpu="3",mig_uuid=""}') == 1,
              "the Xid event of gpu 3 is counted")
        check(one(prom_port, 'sum(gpuscope_agent_nvml_points_dropped_total)') == 0,
              "no point dropped on the way to the batch")
    finally:
        for p in (prom, agent):
            if p and p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(10)
                except subprocess.TimeoutExpired:
                    p.kill()
        shutil.rmtree(tmp, ignore_errors=True)


main()
finish()
