#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""bench/agent_self: where the agent's own time goes on this machine (issue #33, item 1).

A real gpuscope-server and `gpuscope-agent run --all-processes --bpf-stats` at default settings
(99 Hz, every module; no GPU here: nvml is off), two CPU-bound programs (tests/progs/burn and a
pure-Python loop) for the whole run. After WARM seconds (the agent's start, the programs'
unwind tables and symbols), the agent's /metrics is scraped twice WINDOW seconds apart and
selftable.py prints the table: CPU ms/s and share per activity of the agent's threads, BPF run
time per program, and the agent's steady CPU as a share of one core. The process's own CPU
(/proc/PID/stat) over the same window is printed beside it: the activities must add up to it.
Run as root from the repository root after `make`: bench/agent_self/run.py [WINDOW] [WARM]
"""
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "integration"))
sys.path.insert(0, HERE)
from pushlib import PROGS, Agent, Server, http, start_workload  # noqa: E402
from selftable import table  # noqa: E402

PYLOOP = "import time\nprint('ready', flush=True)\nt = time.time()\nwhile time.time() - t < %f:\n" \
         "    sum(i * i for i in range(1000))\n"


def scrape(url):
    """One whole /metrics text; retried (a loaded machine can time a scrape out)."""
    for _ in range(6):
        st, body = http(url, timeout=30)
        if st == 200 and b"gpuscope_agent_cpu_seconds_total" in body:
            return body.decode()
        time.sleep(1)
    raise RuntimeError("no /metrics from the agent at " + url)


def proc_cpu_s(pid):
    f = open("/proc/%d/stat" % pid).read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


def measure(agent, warm, window):
    """After warm seconds, two whole /metrics scrapes of agent window seconds apart and its
    process's CPU between them: (before, after, CPU seconds, wall seconds)."""
    time.sleep(warm)
    a = scrape(agent.metrics_url)
    c0, t0 = proc_cpu_s(agent.p.pid), time.monotonic()
    time.sleep(window)
    b = scrape(agent.metrics_url)
    return a, b, proc_cpu_s(agent.p.pid) - c0, time.monotonic() - t0


def main():
    window = float(sys.argv[1]) if len(sys.argv) > 1 else 60
    warm = float(sys.argv[2]) if len(sys.argv) > 2 else 20
    tmp = tempfile.mkdtemp(prefix="agent-self.")
    srv = Server(os.path.join(tmp, "data"))
    srv.start()
    life = window + warm + 120
    work = [start_workload(os.path.join(PROGS, "burn"), str(life)),
            start_workload(sys.executable, "-c", PYLOOP % life)]
    agent = Agent(srv.url, ["--all-processes", "--bpf-stats", "--node", "agent-self"],
                  os.path.join(tmp, "agent.log"), modules_off="", hold=work)
    try:
        a, b, cpu, secs = measure(agent, warm, window)
        text, s = table(a, b, secs)
        print("agent_self, %s, %d CPUs, load %s, window %.0f s after %.0f s" % (
            time.strftime("%Y-%m-%d %H:%M"), os.cpu_count(),
            open("/proc/loadavg").read().split()[0], secs, warm))
        print(text)
        print("the agent process by /proc/PID/stat: %.3f ms/s = %.3f %% of a core "
              "(activities: %.3f %%)" % (1e3 * cpu / secs, 100 * cpu / secs,
                                        s["agent_core_pct"]))
    finally:
        agent.stop()
        for w in work:
            w.kill()
            w.wait()
        srv.stop()
        subprocess.run(["rm", "-rf", tmp])


if __name__ == "__main__":
    main()
