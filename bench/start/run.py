#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""bench/start: how long `gpuscope-agent run` takes to start, per module, idle and loaded.

Each run starts the agent (every module, --all-processes, pushing to a closed loopback port:
the start does not wait for a server) and reads its /metrics as soon as it answers:
gpuscope_agent_module_up_after_seconds (start to each module's being up),
gpuscope_agent_module_start_seconds (each module's own start) and
gpuscope_agent_first_sample_seconds (start to the first CPU sample; absent in agents older than
that metric), then the wall time from exec to /metrics answering and the agent's CPU time
(user + system, all threads) until then, which a loaded machine does not stretch. Loaded: two
CPU-bound programs (tests/progs/burn, one thread each) run beside it on the 2-core VM. Agents
given on the command line are interleaved in each round. Run as root from the repository root
after `make`:
  bench/start/run.py [ROUNDS] [AGENT...]        (default: 5 rounds of .output/gpuscope-agent)
"""
import os
import re
import statistics
import subprocess
import sys
import time
import urllib.request

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
BURN = os.path.join(ROOT, ".output/tests/progs/burn")
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
from lib import free_port  # noqa: E402


def metrics(port):
    try:
        return urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=2).read() \
            .decode()
    except OSError:
        return None


def one(agent):
    """{figure: seconds} of one start."""
    port = free_port()
    t0 = time.monotonic()
    p = subprocess.Popen([agent, "run", "--server", "http://127.0.0.1:9", "--all-processes",
                          "--metrics-listen", "127.0.0.1:%d" % port, "--duration", "30s",
                          "--stop-grace", "0s"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    got = {}
    try:
        body = None
        while time.monotonic() - t0 < 60 and p.poll() is None:
            body = metrics(port)
            if body:
                break
            time.sleep(0.02)
        got["metrics answer"] = time.monotonic() - t0
        try:  # the agent's CPU (all its threads) until then: what the load does not stretch
            st = open("/proc/%d/stat" % p.pid).read().rsplit(")", 1)[1].split()
            got["agent CPU until then"] = (int(st[11]) + int(st[12])) / os.sysconf("SC_CLK_TCK")
        except (OSError, IndexError, ValueError):
            pass
        # the first sample may come after /metrics answers: ask again for a while
        while body and "gpuscope_agent_first_sample_seconds " not in body and \
                time.monotonic() - t0 < 10:
            time.sleep(0.1)
            body = metrics(port) or body
        for line in (body or "").splitlines():
            m = re.match(r'gpuscope_agent_module_up_after_seconds\{module="([^"]+)"\} (\S+)',
                         line)
            if m:
                got["up: " + m.group(1)] = float(m.group(2))
            m = re.match(r'gpuscope_agent_module_start_seconds\{module="([^"]+)"\} (\S+)', line)
            if m:
                got["own: " + m.group(1)] = float(m.group(2))
            m = re.match(r"gpuscope_agent_first_sample_seconds (\S+)", line)
            if m:
                got["first CPU sample"] = float(m.group(1))
    finally:
        p.terminate()
        try:
            p.wait(60)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
    return got


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    agents = sys.argv[2:] or [os.path.join(ROOT, ".output/gpuscope-agent")]
    res = {}
    for load in ("idle", "loaded"):
        burns = []
        if load == "loaded":
            # where the test programs are not built (the GPU machine): a Python spin
            argv = [BURN, "3600"] if os.access(BURN, os.X_OK) else \
                [sys.executable, "-c", "while True: pass"]
            burns = [subprocess.Popen(argv, stdout=subprocess.DEVNULL) for _ in range(2)]
            time.sleep(1)
        try:
            for r in range(rounds):
                for a in agents:
                    for k, v in one(a).items():
                        res.setdefault((load, a), {}).setdefault(k, []).append(v)
                    time.sleep(1)	# the last agent's detach grace periods
        finally:
            for b in burns:
                b.kill()
                b.wait()
    for (load, a), figs in res.items():
        print("%s, %s (%d runs): median [min, max] seconds" % (load, a, rounds))
        for k in sorted(figs, key=lambda k: (k.split(":")[0], statistics.median(figs[k]))):
            v = figs[k]
            print("  %-24s %7.3f [%.3f, %.3f]" % (k, statistics.median(v), min(v), max(v)))


if __name__ == "__main__":
    main()
