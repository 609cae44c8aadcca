#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""`gpuscope doctor` on this machine: each line must say what is really here (worked out by this
test independently: uname, /sys/kernel/btf, statfs types, ldconfig), the server check against a
real HTTP server on loopback and against a closed port, and the required checks failing when
the process has no capabilities (setpriv)."""
import os
import shutil
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CLI = os.path.join(ROOT, ".output", "gpuscope")
fails = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        fails.append(what)


def doctor(*args, prefix=()):
    env = dict(os.environ)
    env.pop("GPUSCOPE_SERVER", None)
    r = subprocess.run(list(prefix) + [CLI, "doctor"] + list(args), capture_output=True, text=True,
                       timeout=60, env=env)
    lines = {}
    for line in r.stdout.splitlines():
        f = line.split(None, 2)
        if len(f) >= 2 and f[0] in ("ok", "missing", "warn"):
            lines[f[1]] = (f[0], f[2] if len(f) > 2 else "")
    return r, lines


def fstype(path):
    r = subprocess.run(["stat", "-f", "-c", "%T", path], capture_output=True, text=True)
    return r.stdout.strip() if r.returncode == 0 else None


class Labels(BaseHTTPRequestHandler):
    def log_message(self, *a):
        pass

    def do_GET(self):
        code, body = (200, b'{"labels":["comm","node"]}') if self.path == "/api/v1/labels" else (404, b"{}")
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):
        n = int(self.headers.get("Content-Length", "0"))
        self.rfile.read(n)
        ok = self.path == "/api/v1/ingest" and n == 0
        self.send_response(204 if ok else 404)
        self.send_header("Content-Length", "0")
        self.end_headers()


def main():
    if os.geteuid() != 0:
        print("SKIP: the ok path needs root (bpf, perf, uprobes)")
        return 77
    srv = ThreadingHTTPServer(("127.0.0.1", 0), Labels)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    url = "http://127.0.0.1:%d" % srv.server_address[1]

    r, l = doctor("--server", url)
    print(r.stdout)
    check(r.returncode == 0, "exit 0 as root with a server (rc %d)" % r.returncode)
    check(l.get("kernel", ("",))[0] == "ok" and os.uname().release in l["kernel"][1], "kernel: uname -r")
    btf = os.path.exists("/sys/kernel/btf/vmlinux")
    check(l.get("btf", ("",))[0] == ("ok" if btf else "missing"), "btf matches /sys/kernel/btf/vmlinux")
    check(l.get("capabilities", ("",))[0] == "ok", "capabilities as root")
    check(l.get("bpf", ("",))[0] == "ok", "bpf: program loads")
    check(l.get("perf_event", ("",))[0] == "ok", "perf_event opens as root")
    tracefs = "tracefs" in (fstype("/sys/kernel/tracing"), fstype("/sys/kernel/debug/tracing"))
    check(l.get("tracefs", ("",))[0] == ("ok" if tracefs else "warn"), "tracefs matches statfs (%s)" % tracefs)
    check(l.get("uprobes", ("",))[0] == "ok" and "3 hits" in l["uprobes"][1], "uprobe fired 3 times")
    nvml = "libnvidia-ml.so.1" in subprocess.run(["ldconfig", "-p"], capture_output=True, text=True).stdout
    check(l.get("nvml", ("",))[0] == ("ok" if nvml else "missing"), "nvml matches ldconfig (%s)" % nvml)
    cg = fstype("/sys/fs/cgroup")
    want = "v2" if cg == "cgroup2fs" else ("hybrid" if fstype("/sys/fs/cgroup/unified") == "cgroup2fs" else "v1")
    check(l.get("cgroup", ("", ""))[1].startswith(want), "cgroup %s (statfs %s)" % (want, cg))
    check(l.get("server", ("",))[0] == "ok" and "/api/v1/ingest (empty batch): 204" in l["server"][1], "server answers")
    cupti = os.path.join(ROOT, ".output", "libgpuscope_cupti.so")
    if os.path.exists(cupti):
        check(l.get("cupti", ("",))[0] == "ok" and cupti in l["cupti"][1], "cupti: the built library")

    # NVML required on a GPU node: missing NVML fails the exit code
    r, l = doctor("--server", url, "--require-gpu", "--nvml-library", "/nonexistent/libnvidia-ml.so.1")
    check(r.returncode == 1 and l.get("nvml", ("",))[0] == "missing", "--require-gpu without NVML: exit 1")

    # server down
    srv.shutdown()
    srv.server_close()
    r, l = doctor("--server", url)
    check(r.returncode == 1 and l.get("server", ("",))[0] == "missing" and "fix:" in r.stdout,
          "server down: missing with a fix, exit 1")

    # no capabilities at all (root without its capabilities)
    setpriv = shutil.which("setpriv")
    if setpriv:
        r, l = doctor(prefix=(setpriv, "--inh-caps=-all", "--ambient-caps=-all", "--bounding-set=-all", "--"))
        print(r.stdout)
        check(r.returncode == 1, "no capabilities: exit 1")
        check(l.get("capabilities", ("",))[0] == "missing", "no capabilities: capabilities missing")
        check(l.get("bpf", ("",))[0] == "missing" and "Operation not permitted" in l["bpf"][1],
              "no capabilities: bpf missing (EPERM)")
        check(l.get("uprobes", ("",))[0] == "missing", "no capabilities: uprobes missing")
    print("%d checks failed" % len(fails))
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
