# SPDX-License-Identifier: Apache-2.0
"""Helpers for the push/CLI integration tests: a real gpuscope-server and real agents on loopback,
their /metrics, and JSON queries. Standard library only."""
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request

sys.path.insert(0, os.path.dirname(__file__))
from lib import (AGENT, OUT, PROGS, ROOT, check, finish, free_port, skip,  # noqa: E402,F401 (re-exported)
                 start_workload, wait_until)

SERVER = os.path.join(OUT, "gpuscope-server")
CLI = os.path.join(OUT, "gpuscope")


def need_root_and_binaries(server=True):
    if os.geteuid() != 0:
        skip("needs root (eBPF)")
    for b in [AGENT, CLI] + ([SERVER] if server else []):
        if not os.access(b, os.X_OK):
            skip("%s is not built" % os.path.basename(b))


def http(url, token=None, timeout=10):
    """GET; returns (status, body bytes). Connection errors give status 0."""
    req = urllib.request.Request(url)
    if token:
        req.add_header("Authorization", "Bearer " + token)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()
    except (urllib.error.URLError, ConnectionError, socket.timeout):
        return 0, b""


class Server:
    """gpuscope-server with its data in data_dir, on 127.0.0.1:port."""

    def __init__(self, data_dir, port=None, token_file=None, log=None, args=()):
        self.data_dir, self.port, self.token_file = data_dir, port or free_port(), token_file
        self.args = list(args)
        self.url = "http://127.0.0.1:%d" % self.port
        self.log = log or os.path.join(data_dir + "-server.log")
        self.p = None

    def start(self, timeout=20):
        argv = [SERVER, "--data", self.data_dir, "--listen", "127.0.0.1:%d" % self.port]
        if self.token_file:
            argv += ["--token-file", self.token_file]
        argv += self.args
        self.p = subprocess.Popen(argv, stdout=open(self.log, "ab"), stderr=subprocess.STDOUT)
        ok = wait_until(lambda: self.p.poll() is not None or
                        http(self.url + "/metrics")[0] != 0, timeout)
        if self.p.poll() is not None:
            raise RuntimeError("server exited: " + open(self.log).read()[-2000:])
        return ok

    def stop(self, sig=signal.SIGTERM, timeout=20):
        if self.p and self.p.poll() is None:
            self.p.send_signal(sig)
            try:
                self.p.wait(timeout)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()
        rc = self.p.returncode if self.p else None
        self.p = None
        return rc

    def query(self, endpoint, token=None, **params):
        url = "%s/api/v1/%s?%s" % (self.url, endpoint, urllib.parse.urlencode(params))
        st, body = http(url, token)
        if st != 200:
            raise RuntimeError("%s: HTTP %d %s" % (url, st, body[:300]))
        return json.loads(body)


class Agent:
    """gpuscope-agent run pushing to server_url; /metrics on a free port."""

    def __init__(self, server_url, args, log, modules_off="sched,cuda_probe", wait=True, hold=()):
        """wait=False: returns once started; wait_up() then waits for its /metrics (agents
        started together verify their BPF programs side by side). hold: processes (Popen)
        stopped (SIGSTOP) until the agent is up, so that a spinning workload does not take the
        CPU its start (BPF verification: seconds on a loaded machine) needs."""
        self.log = log
        self.hold = list(hold)
        for w in self.hold:
            w.send_signal(signal.SIGSTOP)
        self.argv = [AGENT, "run", "--server", server_url, "--metrics-listen", "127.0.0.1:0"] + args
        # these tests count CPU samples: the off-CPU and CUDA probe modules stay off by default
        env = dict(os.environ, GPUSCOPE_AGENT_MODULES_OFF=modules_off)
        self.p = subprocess.Popen(self.argv, stdout=open(log, "ab"), stderr=subprocess.STDOUT,
                                  env=env)
        if wait:
            self.wait_up()

    def wait_up(self):
        # BPF loads first: 16-24 s for every module on this 2-core VM at load 10-15
        try:
            m = wait_until(lambda: self.p.poll() is not None or
                           re.search(r"metrics: (http://\S+/metrics)", self.read_log()), 60)
        finally:
            for w in self.hold:
                w.send_signal(signal.SIGCONT)
        if self.p.poll() is not None:
            raise RuntimeError("agent exited %d: %s" % (self.p.returncode, self.read_log()[-3000:]))
        self.metrics_url = m.group(1)

    def read_log(self):
        try:
            return open(self.log, errors="replace").read()
        except FileNotFoundError:
            return ""

    def metrics(self):
        """{name or name{labels}: float} from /metrics, {} if unreachable."""
        st, body = http(self.metrics_url)
        out = {}
        if st != 200:
            return out
        for line in body.decode().splitlines():
            if not line or line.startswith("#"):
                continue
            k, _, v = line.rpartition(" ")
            out[k] = float(v)
        return out

    def metric(self, name, default=0.0):
        return self.metrics().get(name, default)

    def stop(self, sig=signal.SIGTERM, timeout=30):
        if self.p.poll() is None:
            self.p.send_signal(sig)
            try:
                self.p.wait(timeout)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()
                return None
        return self.p.returncode

    def summary(self):
        """Counts from the agent's last line: delivered (of this run's samples), submitted,
        batches, split (413s), rejected, dropped, left in the spool, earlier (samples of an
        earlier run's spool delivered)."""
        m = re.findall(r"run: done: (\d+) of (\d+) samples delivered in (\d+) batches \((\d+) "
                       r"split after a 413\), (\d+) rejected by the server, (\d+) dropped, (\d+) "
                       r"batches left in the spool; (\d+) more samples", self.read_log())
        if not m:
            return None
        k = ("delivered", "submitted", "batches", "split", "rejected", "dropped", "spooled",
             "earlier")
        return dict(zip(k, map(int, m[-1])))


def cpu_sampler_up(agent):
    return agent.metrics().get('gpuscope_agent_module_up{module="cpu-sampler"}', 0) == 1


def leaf_shares(tree):
    """{leaf function: share of the root's value} from a flame graph tree (self values)."""
    selfs = {}

    def walk(n):
        kids = n.get("children") or []
        s = n.get("self")
        if s is None:
            s = n["value"] - sum(k["value"] for k in kids)
        if s > 0:
            selfs[n["name"]] = selfs.get(n["name"], 0) + s
        for k in kids:
            walk(k)
    walk(tree["root"])
    total = tree["root"]["value"] or 1
    return {k: v / total for k, v in selfs.items()}


class Scratch:
    """A temporary directory removed at exit (kept with GPUSCOPE_KEEP_TEST_DIRS=1)."""

    def __init__(self, name):
        self.dir = tempfile.mkdtemp(prefix="gpuscope-%s-" % name)

    def path(self, *p):
        return os.path.join(self.dir, *p)

    def cleanup(self):
        if not os.environ.get("GPUSCOPE_KEEP_TEST_DIRS"):
            shutil.rmtree(self.dir, ignore_errors=True)


def window_reasons(srv, node):
    """The reasons of the gpu_trace_window intervals the server holds for node (last hour)."""
    rng = {"from": "%.3f" % (time.time() - 3600), "to": "%.3f" % (time.time() + 3600)}
    win = srv.query("intervals", kind="gpu_trace_window", selector='{node="%s"}' % node, **rng)
    return sorted({w["attrs"].get("reason") for w in win["intervals"]})


def start_cupti_window(*extra):
    """tests/cupti/cupti_window running the real libgpuscope_cupti.so over the libcupti
    stand-in (runs until its stdin closes); skips where the CUDA toolkit was absent at build.
    extra: its mode argument ("held", "sync:LIBCUDA:SECONDS")."""
    lib = os.path.join(OUT, "libgpuscope_cupti.so")
    app = os.path.join(OUT, "tests", "cupti", "cupti_window")
    if not os.access(lib, os.R_OK) or not os.access(app, os.X_OK):
        skip("no CUDA toolkit here: libgpuscope_cupti.so / cupti_window not built")
    p = subprocess.Popen([app, lib, *extra], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         text=True)
    if p.stdout.readline().strip() != "ready":
        raise RuntimeError("cupti_window did not start")
    return p


def site_stacks(srv, calls, ivs, names, min_ms=0):
    """Each logged call (name, t0, t1 in wall seconds) matched to the one interval of ivs
    (query results) inside it at least min_ms long, and its stack (srv's /api/v1/stack) checked
    for the call's own function among names, never another of them. (matched with their own
    function, [(name, frames) of the others])."""
    stacks, good, bad = {}, 0, []
    for name, t0, t1 in calls:
        t0, t1 = float(t0) * 1e3, float(t1) * 1e3
        hit = [iv for iv in ivs if iv["start_ms"] >= t0 - 1 and iv["end_ms"] <= t1 + 1 and
               iv["end_ms"] - iv["start_ms"] >= min_ms]
        if len(hit) != 1:
            continue
        sid = hit[0]["attrs"].get("stack_id")
        if sid not in stacks:
            stacks[sid] = [f["function"] for f in srv.query("stack/%s" % sid)["frames"]] if sid else []
        fns = stacks[sid]
        if name in fns and not any(o in fns for o in names if o != name):
            good += 1
        else:
            bad.append((name, [f for f in fns if not f.startswith("[") and "+0x" not in f][:8]))
    return good, bad


def two_site_script(prelude, call, between, a, b):
    """A Python workload calling `call` (one C call site) from two Python functions, a twice,
    then b twice, and so on, for argv[2] seconds after a line on stdin, running `between`
    after each; it logs "<a|b> t0 t1" (wall seconds) per call to argv[1]. prelude: its setup."""
    return """import ctypes, sys, time
%s
log = open(sys.argv[1], "w")

def step(name):
    t0 = time.time()
    %s
    log.write("%%s %%.6f %%.6f\\n" %% (name, t0, time.time()))

def %s():
    step("%s")

def %s():
    step("%s")

sys.stdin.readline()
end = time.time() + float(sys.argv[2])
i = 0
while time.time() < end:
    (%s if (i // 2) %% 2 == 0 else %s)()
    i += 1
    %s
log.close()
""" % (prelude, call, a, a, b, b, a, b, between)


def run_under_agent(agent, app, settle, metric):
    """Lets a workload that waits for a line on its stdin go settle seconds after the agent is
    up, waits for it to end and 2 s more, reads metric from the agent and stops it: (metric's
    value, the agent's exit status)."""
    time.sleep(settle)
    app.stdin.write("go\n")
    app.stdin.flush()
    app.wait(timeout=60)
    time.sleep(2)
    value = agent.metric(metric)
    return value, agent.stop()


# The stand-in workloads' opening lines (a script's text; argv[1] the libcupti stand-in, argv[2]
# libgpuscope_cupti.so, argv[4] the libtorch_cpu stand-in; needs ctypes and sys imported):
# the stand-in loaded by its soname, the real library injected into it ...
STANDIN_CUPTI = '''cupti = ctypes.CDLL(sys.argv[1], mode=ctypes.RTLD_GLOBAL)
inj = ctypes.CDLL(sys.argv[2])
if inj.InitializeInjection() != 1:
    sys.exit(4)
'''
# ... and autograd's Engine::execute of the libtorch_cpu stand-in
STANDIN_EXECUTE = '''torch = ctypes.CDLL(sys.argv[4])
execute = getattr(torch, "_ZN5torch8autograd6Engine7executeERKSt6vectorINS0_4EdgeESaIS3_EERKS2_"
                         "IN2at6TensorESaIS9_EEbbbS7_")
execute.argtypes = [ctypes.c_char_p, ctypes.c_uint32, ctypes.c_uint64, ctypes.c_char_p]
'''
