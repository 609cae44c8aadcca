# SPDX-License-Identifier: Apache-2.0
"""Helpers shared by the Python integration tests: paths, processes, assertions, ports, PromQL."""
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request

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


class Recording:
    """`gpuscope-agent record ARGS...` started and sampling: its start (BPF verification, unwind
    tables) takes seconds on a loaded machine, so workloads meant to be recorded are started, or
    told to go, after it; or started before and held: the processes (Popen) in `hold` are
    stopped (SIGSTOP) while the agent starts and continued once it samples, so that they do not
    take the CPU its start needs. wait() returns what run() would (stdout, stderr, returncode)."""

    def __init__(self, argv, timeout=120, hold=()):
        for w in hold:
            w.send_signal(signal.SIGSTOP)
        try:
            self._start(argv, timeout)
        finally:
            for w in hold:
                w.send_signal(signal.SIGCONT)

    def _start(self, argv, timeout):
        self.p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.err = []
        end = time.time() + timeout
        while time.time() < end:
            line = self.p.stderr.readline()
            if not line:
                break
            self.err.append(line)
            if " recording " in line:
                return
        raise RuntimeError("record did not start sampling: %r" % "".join(self.err)[-2000:])

    def wait(self, timeout=120):
        out, err = self.p.communicate(timeout=timeout)
        return subprocess.CompletedProcess(self.p.args, self.p.returncode, out,
                                           "".join(self.err) + err)


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


def free_port():
    """A loopback TCP port nothing listens on (at the time of the call)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def prom_query(prom_port, q, t=None):
    """An instant PromQL query to a Prometheus on loopback: [(labels, value, time)]."""
    args = {"query": q}
    if t is not None:
        args["time"] = f"{t:.3f}"
    url = f"http://127.0.0.1:{prom_port}/api/v1/query?" + urllib.parse.urlencode(args)
    with urllib.request.urlopen(url, timeout=5) as r:
        body = json.load(r)
    if body.get("status") != "success":
        raise RuntimeError(f"{q}: {body}")
    return [(x["metric"], float(x["value"][1]), x["value"][0]) for x in body["data"]["result"]]
