#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Names that follow exec (issue 35 item 3): a live agent (meta, sched with --all-processes,
cpu-sampler) and, started after it, `sh -c 'sleep 1; exec python3 ...'`. The Python program
sleeps 1.5 s first (a blocked state that begins right after the exec), then spins in its main
thread and in a second thread. Every thread state of that pid that starts after the exec is
labelled comm=python3 (thread python3 for the main thread), none sh; the blocked sleep is one of
them; the CPU samples of the second thread (tid != pid: the process name from the label
builder's cache, not from the event) say comm=python3, and no sample of the pid after the exec
says sh. With --pid LAUNCHER, the launcher's child that execs python3 stays followed after the
exec (it was untracked there)."""
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pushlib import Agent, Scratch, Server, check, finish, need_root_and_binaries  # noqa: E402

need_root_and_binaries()

PROG = r"""
import threading, time
print(time.time(), flush=True)
def spin(s):  # s seconds of the thread CPU time, however loaded the machine
    t = time.thread_time()
    while time.thread_time() - t < s:
        pass
time.sleep(1.5)
th = threading.Thread(target=spin, args=(1.5,))
th.start()
spin(1.5)
th.join()
"""


def main():
    tmp = Scratch("exec-names")
    server = Server(tmp.path("data"), log=tmp.path("server.log"))
    server.start()
    agent = Agent(server.url, ["--modules", "meta,sched,cpu-sampler", "--all-processes",
                               "--node", "exec-names", "--push-interval", "1s"],
                  tmp.path("agent.log"), modules_off="")
    t0 = time.time_ns()
    work = None
    try:
        work = subprocess.Popen(["sh", "-c", "sleep 1; exec python3 -c '%s'" % PROG],
                                stdout=subprocess.PIPE, text=True)
        py_start_ms = float(work.stdout.readline()) * 1000  # its first statement, after the exec
        work.wait(60)
        time.sleep(2.5)  # its last states and samples pushed
        # --all-processes follows every thread of a busy machine: a full ring buffer loses
        # events (counted), maybe the one that ends sh's state at the exec
        lost = agent.metric('gpuscope_agent_bpf_errors_total{program="sched",'
                            'error="ringbuf_full"}')
        rc = agent.stop()
    finally:
        agent.stop()
        if work and work.poll() is None:
            work.kill()
    check(rc == 0, f"agent stopped cleanly ({rc}): {agent.read_log()[-2000:]}")
    pid = str(work.pid)
    rng = {"from": f"{t0 / 1e9 - 5:.3f}", "to": f"{time.time() + 5:.3f}"}
    ivs = server.query("intervals", kind="thread_state", limit="100000",
                       selector='{pid="%s"}' % pid, **rng)["intervals"]
    ivs.sort(key=lambda x: x["start_ms"])
    named = [(x["start_ms"], x["end_ms"], x["labels"].get("comm"), x["labels"].get("thread"),
              x["labels"].get("tid"), x["attrs"].get("state"), "summary" in x["attrs"])
             for x in ivs]
    # the first states are the test's fork child (python3) before its exec of sh
    first_sh = next((i for i, x in enumerate(named) if x[2] == "sh"), len(named))
    check(first_sh < len(named), f"before the exec the process was sh: {named[:10]}")
    py = [x for x in named[first_sh:] if x[2] == "python3"]
    check(py, f"thread states of pid {pid} labelled python3 after sh: {named[:20]}")
    exec_ms = py[0][0] if py else 0
    main = [x for x in named if x[4] == pid]
    near = [x for x in main if py and abs(x[0] - py[0][0]) < 50]
    # the name changes once, at a state boundary: sh up to it, python3 from it on
    late_sh = [x for x in named if x[1] > exec_ms + 0.002 and "sh" in (x[2], x[3])]
    check(not late_sh, f"no state labelled sh ends after the first python3 one starts "
          f"({exec_ms:.3f} ms): {late_sh[:10]} (states near the exec: {near})")
    check(not [x for x in named if x[0] >= py_start_ms and "sh" in (x[2], x[3])],
          "no state labelled sh starts after Python's first statement")
    # Where the exec runs to its tracepoint without a switch, the running state is cut there
    # (sched.bpf.c on_exec): a running sh ends where a running python3 starts. Where the exec
    # is switched out after the kernel renamed the task, the switch-in already took the new
    # name (a summary starting at the wake-up is named python3): both are right, not asserted.
    cut = [(a, b) for a, b in zip(main, main[1:]) if a[2] == "sh" and b[2] == "python3" and
           a[5] == b[5] == "running" and abs(a[1] - b[0]) < 0.002]
    print(f"the running state cut at the exec: {'seen' if cut else 'not seen'} "
          f"({lost:.0f} thread-state events lost to a full ring buffer)")
    sleep = [x for x in py if x[5] == "blocked" and x[1] - x[0] >= 1000 and x[4] == pid]
    check(sleep and sleep[0][3] == "python3",
          f"the 1.5 s sleep after the exec is a blocked state of thread python3: {py[:10]}")

    def samples(sel):
        return server.query("flamegraph", kind="cpu", selector=sel, **rng)["total"]
    other = samples('{pid="%s",tid!="%s",comm="python3"}' % (pid, pid))
    other_sh = samples('{pid="%s",tid!="%s",comm="sh"}' % (pid, pid))
    main_py = samples('{pid="%s",tid="%s",comm="python3"}' % (pid, pid))
    check(other >= 20 and other_sh == 0,
          f"the second thread's samples say python3 ({other}), never sh ({other_sh})")
    check(main_py >= 20, f"the main thread's samples say python3 ({main_py})")
    procs = server.query("processes", kind="cpu", **rng)["processes"]
    mine = [p for p in procs if p["pid"] == pid]
    check(mine and mine[0]["comm"] == "python3", f"the picker names pid {pid} python3: {mine}")
    print(f"pid {pid}: {len(py)} states as python3 after the exec, "
          f"{len(named) - len(py)} before as sh; samples python3 {main_py} main + {other} thread")
    pid_mode(tmp, server)
    server.stop()
    finish()


def pid_mode(tmp, server):
    """--pid LAUNCHER (started before the agent): its child sh, forked after the agent started,
    stays followed across its exec of python3 (it was untracked at the exec)."""
    launcher = subprocess.Popen(
        ["python3", "-c", "import subprocess, sys; sys.stdin.readline(); "
         "sys.exit(subprocess.call(['sh', '-c', sys.argv[1]]))",
         "sleep 1; exec python3 -c '%s'" % PROG], stdin=subprocess.PIPE)
    agent = Agent(server.url, ["--modules", "meta,sched", "--pid", str(launcher.pid),
                               "--node", "exec-names-pid", "--push-interval", "1s"],
                  tmp.path("agent-pid.log"), modules_off="")
    t0 = time.time_ns()
    try:
        launcher.stdin.write(b"go\n")
        launcher.stdin.flush()
        launcher.wait(60)
        time.sleep(2.5)
        rc = agent.stop()
    finally:
        agent.stop()
        if launcher.poll() is None:
            launcher.kill()
    check(rc == 0, f"--pid: agent stopped cleanly ({rc}): {agent.read_log()[-2000:]}")
    rng = {"from": f"{t0 / 1e9 - 5:.3f}", "to": f"{time.time() + 5:.3f}"}
    ivs = server.query("intervals", kind="thread_state", limit="100000",
                       selector='{node="exec-names-pid",pid!="%d"}' % launcher.pid,
                       **rng)["intervals"]
    byp = {}
    for x in ivs:
        byp.setdefault(x["labels"]["pid"], []).append(
            (x["labels"].get("comm"), x["attrs"].get("state"), x["end_ms"] - x["start_ms"]))
    # the child sh, and its own child (sleep) which is sh until its exec
    child = [p for p, v in byp.items() if any(c == "sh" for c, _, _ in v) and
             any(c == "python3" for c, _, _ in v)]
    check(len(child) == 1, f"--pid: the launcher's child sh followed: {sorted(byp)}")
    states = byp.get(child[0], []) if child else []
    check(any(c == "python3" and s == "blocked" and d >= 1000 for c, s, d in states),
          f"--pid: the child followed after its exec: python3's 1.5 s sleep "
          f"({[x for x in states if x[2] >= 100]})")


if __name__ == "__main__":
    main()
