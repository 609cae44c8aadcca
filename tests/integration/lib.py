# SPDX-License-Identifier: Apache-2.0
"""Helpers shared by the Python integration tests: paths, processes, assertions."""
import os
import subprocess
import sys
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
OUT = os.path.join(ROOT, ".output")
AGENT = os.path.join(OUT, "gpuscope-agent")
PROGS = os.path.join(OUT, "tests", "progs")

_failures = []


def check(cond, what):
    """Records a failed expectation (and prints it) without stopping the test."""
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        _failures.append(what)
    return cond


def finish():
    """Exit code for the test: 0 when every check passed."""
    if _failures:
        print("%d check(s) failed: %s" % (len(_failures), "; ".join(_failures)))
        sys.exit(1)
    sys.exit(0)


def skip(why):
    print("SKIP: " + why, flush=True)
    sys.exit(77)


def start_workload(*argv):
    """Starts a test workload that prints 'ready' once running; returns the Popen."""
    p = subprocess.Popen(list(argv), stdout=subprocess.PIPE, text=True)
    line = p.stdout.readline()
    if line.strip() != "ready":
        raise RuntimeError("workload %s did not start: %r" % (argv[0], line))
    return p


def go_tool():
    for g in ("/usr/lib/go/bin/go", "/usr/bin/go"):
        if os.path.exists(g):
            return g
    return None


def run(argv, timeout=120, env=None):
    e = dict(os.environ)
    if env:
        e.update(env)
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=e)


def wait_until(fn, timeout, step=0.1):
    end = time.time() + timeout
    while time.time() < end:
        v = fn()
        if v:
            return v
        time.sleep(step)
    return fn()
