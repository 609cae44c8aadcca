#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""bench/sched-overhead: cost of the thread-state / off-CPU module (sched.bpf.c) on
context-switch-heavy work, against libbpf-tools' offcputime as the peer.

Workloads (tests/progs/sched_bench): pingpong (two threads bouncing a byte through pipes) and
loader (8 producers feeding one consumer through a mutex/condvar queue). Configurations,
interleaved in a rotating order each round: bare; gpuscope tracking the workload (strips-dump
--pid); gpuscope tracking another process only (the workload untracked: the in-kernel filter's
cost); offcputime -p PID (peer). Reports median elapsed, slowdown ratios against bare, context
switches/s, events/s handled by gpuscope and its drops. Run as root from the repository root
after `make`: bench/sched-overhead/run.py [ROUNDS]
"""
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import time

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
WORK = os.path.join(ROOT, ".output/tests/progs/sched_bench")
DUMP = os.path.join(ROOT, ".output/strips-dump")
PEER = "/usr/sbin/offcputime"
WORKLOADS = {"pingpong": ["pingpong", "100000"], "loader": ["loader", "8", "20000"]}


def wait_for(proc_stream_path, pattern, timeout=20):
    end = time.time() + timeout
    while time.time() < end:
        try:
            if re.search(pattern, open(proc_stream_path, errors="replace").read()):
                return True
        except FileNotFoundError:
            pass
        time.sleep(0.05)
    return False


def run_one(cfg, wl, idle_pid):
    w = subprocess.Popen([WORK] + WORKLOADS[wl], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         text=True)
    side, log = None, "/tmp/sched-overhead-%d.log" % os.getpid()
    if os.path.exists(log):
        os.unlink(log)
    if cfg in ("gpuscope", "untracked"):
        target = w.pid if cfg == "gpuscope" else idle_pid
        side = subprocess.Popen([DUMP, "/dev/null", "--pid", str(target)],
                                stderr=open(log, "w"))
        if not wait_for(log, r"strips-dump: running"):
            raise RuntimeError("strips-dump did not start: " + open(log).read()[-500:])
    elif cfg == "peer":
        side = subprocess.Popen([PEER, "-p", str(w.pid)], stdout=open(log, "w"),
                                stderr=subprocess.STDOUT)
        time.sleep(2.5)  # its banner is block-buffered: give it time to load and attach
        if side.poll() is not None:
            raise RuntimeError("offcputime exited: " + open(log).read()[-500:])
    out, _ = w.communicate("g", timeout=300)
    res = json.loads(out.strip().splitlines()[-1])
    if side:
        side.send_signal(signal.SIGINT if cfg == "peer" else signal.SIGTERM)
        side.wait(60)
        txt = open(log, errors="replace").read()
        m = re.search(r"gpuscope_agent_sched_switches_total (\d+)", txt)
        res["switches_seen"] = int(m.group(1)) if m else None
        m = re.search(r"gpuscope_agent_sched_events_total (\d+)", txt)
        res["events"] = int(m.group(1)) if m else None
        m = re.search(r'error="ringbuf_full"\} (\d+)', txt)
        res["drops"] = int(m.group(1)) if m else None
    return res


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    if os.geteuid() != 0:
        print("needs root")
        return 2
    cfgs = ["bare", "gpuscope", "untracked"] + (["peer"] if os.access(PEER, os.X_OK) else [])
    idle = subprocess.Popen(["sleep", "100000"])
    res = {}
    try:
        for r in range(rounds):
            order = cfgs[r % len(cfgs):] + cfgs[:r % len(cfgs)]
            for wl in WORKLOADS:
                for cfg in order:
                    x = run_one(cfg, wl, idle.pid)
                    res.setdefault((wl, cfg), []).append(x)
                    print(r, wl, cfg, x, flush=True)
    finally:
        idle.kill()
    print()
    print("| workload | config | median elapsed | slowdown vs bare | ctx switches/s | "
          "gpuscope events/s | drops |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for wl in WORKLOADS:
        bare = statistics.median(x["elapsed_s"] for x in res[(wl, "bare")])
        for cfg in cfgs:
            xs = res[(wl, cfg)]
            el = statistics.median(x["elapsed_s"] for x in xs)
            # ratio of medians, and the median of per-round ratios against that round's bare
            per_round = [x["elapsed_s"] / b["elapsed_s"] for x, b in zip(xs, res[(wl, "bare")])]
            cs = statistics.median(x["ctx_switches"] / x["elapsed_s"] for x in xs)
            ev = [x.get("events") for x in xs if x.get("events") is not None]
            evs = statistics.median(e / x["elapsed_s"] for e, x in zip(ev, xs)) if ev else None
            drops = sum(x.get("drops") or 0 for x in xs) if cfg in ("gpuscope", "untracked") else None
            print("| %s | %s | %.3f s | %.3f (per-round median %.3f) | %.0f | %s | %s |" % (
                wl, cfg, el, el / bare, statistics.median(per_round), cs,
                "%.0f" % evs if evs is not None else "-", drops if drops is not None else "-"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
