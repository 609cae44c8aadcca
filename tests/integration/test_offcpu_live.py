#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Off-CPU samples of a live agent kept as their blocked intervals (schema 15): gpuscope-agent run
(sched module) follows tests/progs/condwait (a thread that waits on a condition variable, one that
sleeps 30 ms at a time); for each blocked state with a stack it pushes the interval and an off-CPU
sample. The server pairs every such sample with its interval (none left over, none marked, the
mark never shown) and keeps it only as the interval; the off-CPU flame graph of the process still
holds each of those blocked times: at least their sum (each as the whole µs between its floored
ends), and no more than what the agent's in-kernel sums of short blocks add."""
import os
import sqlite3
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pushlib import (PROGS, Scratch, Server, check, finish,  # noqa: E402
                     need_root_and_binaries, wait_until)
from lib import AGENT  # noqa: E402

need_root_and_binaries()


def main():
    tmp = Scratch("offcpu-live")
    server = Server(tmp.path("data"), log=tmp.path("server.log"))
    server.start()
    work = subprocess.Popen([os.path.join(PROGS, "condwait"), "4", "-"], stdin=subprocess.PIPE)
    log = tmp.path("agent.log")
    env = dict(os.environ)
    env.pop("GPUSCOPE_AGENT_MODULES_OFF", None)
    t0 = time.time_ns()
    agent = subprocess.Popen([AGENT, "run", "--server", server.url, "--metrics-listen",
                              "127.0.0.1:0", "--modules", "meta,sched", "--node", "offcpu-live",
                              "--push-interval", "1s", "--pid", str(work.pid)],
                             stdout=open(log, "wb"), stderr=subprocess.STDOUT, env=env)
    try:
        wait_until(lambda: agent.poll() is not None or
                   "metrics: http" in open(log, errors="replace").read(), 60)
        work.stdin.write(b"g")
        work.stdin.flush()
        work.wait(60)
        time.sleep(1.5)  # the last states of its threads, seen as they exit
        agent.terminate()
        rc = agent.wait(60)
    finally:
        if agent.poll() is None:
            agent.kill()
        if work.poll() is None:
            work.kill()
    check(rc == 0, f"agent stopped cleanly ({rc}): {open(log, errors='replace').read()[-2000:]}")
    rng = {"from": f"{t0 / 1e9 - 5:.3f}", "to": f"{time.time() + 5:.3f}",
           "selector": '{pid="%d"}' % work.pid}
    ivs = server.query("intervals", kind="thread_state", limit="100000", **rng)["intervals"]
    blocked = [x for x in ivs if x["attrs"].get("state") == "blocked" and
               "stack_id" in x["attrs"] and "summary" not in x["attrs"]]
    # each as the store keeps it: the whole µs between the floored ends, at least one
    us = [max(round(x["end_ms"] * 1000) - round(x["start_ms"] * 1000), 1) for x in blocked]
    check(len(blocked) >= 20, f"blocked states with a stack: {len(blocked)} of {len(ivs)}")
    check(all(not any(k.startswith("__") for k in x["attrs"]) for x in ivs),
          "no internal attr in the answer")
    fg = server.query("flamegraph", kind="offcpu_ns", **rng)
    total, want = fg["total"], sum(us) * 1000
    check(want <= total <= want * 1.2 + 10**6,
          f"off-CPU total {total} ns holds the {len(blocked)} blocked times ({want} ns)")
    server.stop()
    db = sqlite3.connect(os.path.join(tmp.path("data"), "gpuscope.db"))
    paired = db.execute("SELECT coalesce(sum(n), 0) FROM offcpu_ivs").fetchone()[0]
    kept = db.execute("SELECT coalesce(sum(n), 0) FROM chunks WHERE kind = 1").fetchone()[0]
    db.close()
    check(paired == len(blocked),
          f"every blocked state's sample kept as its interval: {paired} of {len(blocked)}"
          f" ({kept} off-CPU samples in sample chunks)")
    print(f"{len(blocked)} blocked states, {paired} samples kept as them, {kept} as samples;"
          f" off-CPU {total / 1e6:.1f} ms, their sum {want / 1e6:.1f} ms")
    finish()


if __name__ == "__main__":
    main()
