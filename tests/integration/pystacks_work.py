# SPDX-License-Identifier: Apache-2.0
"""Python workload for test_python_stacks.py, run by Debian's /usr/bin/python3.

usage: pystacks_work.py MODE SECONDS
  shares   main thread: stage_alpha 50 %, stage_beta 30 %, stage_zlib 20 % of its CPU time
           (stage_zlib in zlib.compress, a C extension over libz)
  threads  two Python threads named pyw-a / pyw-b burning in work_a / work_b
  gen      a generator (gen_stage) and an async function (async_stage), half the time each
  recurse  recursion 300 frames deep (recurse), burning at the bottom
  fork     burns 10 ms, then forks a child (named pyw-child) that burns 50 ms in child_work
           and exits, again and again (a pre-fork server's, a DataLoader's workers)
  young    code that dies young: module bodies compiled and run once (young_N.py, each with
           its own function young_work_N burning ~1 ms), freed right after, their addresses
           reused by the next ones (as imports do)
Prints "ready" once running, then exits after SECONDS (with PYWORK_GO set, SECONDS from when a
line arrives on stdin: the test starts its recording in between)."""
import asyncio
import os
import ctypes
import sys
import threading
import time
import zlib

CPU = time.thread_time_ns
DATA = bytes(range(256)) * 64	# ~0.1 ms a compress: little overshoot of the 2 ms budget


def spin(ns):
    end = CPU() + ns
    x = 0
    while CPU() < end:
        for i in range(200):
            x += i * i
    return x


def stage_alpha():
    spin(5_000_000)


def stage_beta():
    spin(3_000_000)


def stage_zlib():
    end = CPU() + 2_000_000
    while CPU() < end:
        zlib.compress(DATA, 9)


def run_stages(deadline):
    while time.monotonic() < deadline:
        stage_alpha()
        stage_beta()
        stage_zlib()


def name_thread(name):
    try:
        ctypes.CDLL(None).prctl(15, name.encode(), 0, 0, 0)  # PR_SET_NAME
    except (OSError, AttributeError):
        pass


def work_a(deadline):
    name_thread("pyw-a")
    while time.monotonic() < deadline:
        spin(1_000_000)


def work_b(deadline):
    name_thread("pyw-b")
    while time.monotonic() < deadline:
        spin(1_000_000)


def run_threads(deadline):
    ts = [threading.Thread(target=work_a, args=(deadline,)),
          threading.Thread(target=work_b, args=(deadline,))]
    for t in ts:
        t.start()
    for t in ts:
        t.join()


def gen_stage(n):
    for _ in range(n):
        spin(1_000_000)
        yield 1


async def async_stage(n):
    for _ in range(n):
        spin(1_000_000)
        await asyncio.sleep(0)


def consume_gen():
    return sum(gen_stage(20))


def run_gen(deadline):
    while time.monotonic() < deadline:
        consume_gen()
        asyncio.run(async_stage(20))


def child_work():
    spin(50_000_000)


def run_fork(deadline):
    # the parent first burns a second alone, so that its unwind tables are built before its
    # first child: the children are walked with its entry (on a loaded machine the build of
    # libpython's tables lagged, and children sampled meanwhile were walked by frame pointers)
    warm = min(deadline, time.monotonic() + 1.0)
    while time.monotonic() < warm:
        spin(1_000_000)
    while time.monotonic() < deadline:
        spin(10_000_000)
        pid = os.fork()
        if pid == 0:
            with open("/proc/self/comm", "w") as f:
                f.write("pyw-child")
            child_work()
            os._exit(0)
        os.waitpid(pid, 0)


def recurse(depth, deadline):
    if depth > 1:
        return recurse(depth - 1, deadline)
    while time.monotonic() < deadline:
        spin(1_000_000)
    return 0


YOUNG = '''
def young_work_%d():
    spin(1_000_000)
young_work_%d()
'''


def run_young(deadline):
    i = 0
    while time.monotonic() < deadline:
        code = compile(YOUNG % (i, i), "young_%d.py" % i, "exec")
        exec(code, {"spin": spin})
        del code
        i += 1


def main():
    mode, seconds = sys.argv[1], float(sys.argv[2])
    print("ready", flush=True)
    if os.environ.get("PYWORK_GO"):
        sys.stdin.readline()
    deadline = time.monotonic() + seconds
    if mode == "shares":
        run_stages(deadline)
    elif mode == "threads":
        run_threads(deadline)
    elif mode == "gen":
        run_gen(deadline)
    elif mode == "young":
        run_young(deadline)
    elif mode == "fork":
        run_fork(deadline)
    elif mode == "recurse":
        sys.setrecursionlimit(1000)
        recurse(300, deadline)
    else:
        sys.exit("unknown mode " + mode)


main()
