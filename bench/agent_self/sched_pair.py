#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""bench/agent_self/sched_pair.py: user-space CPU per thread-state event, two agents side by side.

Two agents (binaries A and B) with only the sched module, `--pid` on one Python process whose
THREADS threads sleep 1 ms in a loop (~1 000 switches a second each), both pushing to one
gpuscope-server, so both handle the same events. After WARM seconds each agent's /metrics is
scraped twice WINDOW seconds apart; per round and agent it prints `tick_sched` CPU
(gpuscope_agent_cpu_seconds_total{activity="tick_sched"}) in ms/s and in us per thread-state
interval (gpuscope_agent_sched_intervals_total), and the off-CPU samples. The start order of A
and B alternates between rounds. Run as root from the repository root:
bench/agent_self/sched_pair.py AGENT_A AGENT_B [ROUNDS] [WINDOW] [WARM] [THREADS]
"""
import os
import re
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "integration"))
import pushlib  # noqa: E402
from pushlib import Agent, Server, http, start_workload  # noqa: E402

SLEEPERS = """import sys, threading, time
def loop():
    while True:
        time.sleep(0.001)
for _ in range(int(sys.argv[1])):
    threading.Thread(target=loop, daemon=True).start()
print('ready', flush=True)
time.sleep(float(sys.argv[2]))
"""

WANT = {
    "tick": r'^gpuscope_agent_cpu_seconds_total\{activity="tick_sched"\} (\S+)',
    "ivl": r"^gpuscope_agent_sched_intervals_total (\S+)",
    "off": r"^gpuscope_agent_sched_offcpu_samples_total (\S+)",
    "lost": r"^gpuscope_agent_sched_stack_lost_total (\S+)",
    "bs_hit": r'^gpuscope_agent_sched_blocked_stacks_total\{result="hit"\} (\S+)',
    "bs_miss": r'^gpuscope_agent_sched_blocked_stacks_total\{result="miss"\} (\S+)',
    "walked": r'^gpuscope_agent_sched_offcpu_walks_total\{result="walked"\} (\S+)',
    "skipped": r'^gpuscope_agent_sched_offcpu_walks_total\{result="skipped"\} (\S+)',
}


def scrape(agent):
    for _ in range(6):
        st, body = http(agent.metrics_url, timeout=30)
        if st == 200:
            text = body.decode()
            out = {}
            for k, rx in WANT.items():
                m = re.search(rx, text, re.M)
                out[k] = float(m.group(1)) if m else 0.0
            return out
        time.sleep(1)
    raise RuntimeError("no /metrics from " + agent.metrics_url)


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    bins = {"A": sys.argv[1], "B": sys.argv[2]}
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 2
    window = float(sys.argv[4]) if len(sys.argv) > 4 else 30
    warm = float(sys.argv[5]) if len(sys.argv) > 5 else 10
    threads = sys.argv[6] if len(sys.argv) > 6 else "2"
    tmp = tempfile.mkdtemp(prefix="sched-pair.")
    srv = Server(os.path.join(tmp, "data"))
    srv.start()
    tot = {k: [0.0, 0.0] for k in bins}
    try:
        for r in range(rounds):
            order = ["A", "B"] if r % 2 == 0 else ["B", "A"]
            work = start_workload(sys.executable, "-c", SLEEPERS, threads,
                                  str(window + warm + 300))
            agents = {}
            try:
                for k in order:
                    pushlib.AGENT = bins[k]
                    ag = Agent(srv.url, ["--pid", str(work.pid), "--modules", "sched",
                                         "--node", "pair-" + k],
                               os.path.join(tmp, "agent-%s-%d.log" % (k, r)), modules_off="",
                               wait=False)
                    agents[k] = ag
                for k in order:
                    agents[k].wait_up()
                time.sleep(warm)
                s0 = {k: scrape(agents[k]) for k in order}
                time.sleep(window)
                s1 = {k: scrape(agents[k]) for k in order}
                for k in sorted(bins):
                    d = {x: s1[k][x] - s0[k][x] for x in WANT}
                    us = 1e6 * d["tick"] / d["ivl"] if d["ivl"] else float("nan")
                    tot[k][0] += d["tick"]
                    tot[k][1] += d["ivl"]
                    extra = ""
                    if d["bs_hit"] + d["bs_miss"]:	# metrics of the blocked-stack cache
                        extra = ", blocked stacks by id %.1f %%, off-CPU map walks %d/%d" % (
                            100 * d["bs_hit"] / (d["bs_hit"] + d["bs_miss"]), d["walked"],
                            d["walked"] + d["skipped"])
                    print("round %d %s: tick_sched %.2f ms/s, %d intervals (%.0f/s), %.2f us/interval, "
                          "offcpu samples %d, stacks lost %d%s (load %.1f)" %
                          (r, k, 1e3 * d["tick"] / window, d["ivl"], d["ivl"] / window, us,
                           d["off"], d["lost"], extra, os.getloadavg()[0]), flush=True)
            finally:
                for ag in agents.values():
                    ag.stop()
                work.kill()
                work.wait()
        for k in sorted(bins):
            print("%s %s: %.2f us/interval over %d intervals" %
                  (k, bins[k], 1e6 * tot[k][0] / max(tot[k][1], 1), tot[k][1]))
    finally:
        srv.stop()


if __name__ == "__main__":
    main()
