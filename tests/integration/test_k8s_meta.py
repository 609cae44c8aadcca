#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Kubernetes metadata end to end: real processes in real kubepods cgroups, and an HTTP server
on loopback that replays API-server list/watch answers (PodList pages, WatchEvent ADDED /
MODIFIED / BOOKMARK / DELETED, a closed stream, a 410 Gone ERROR event -> relist) to
`gpuscope-agent labels --follow`. Also: API unreachable, RBAC 403, malformed relabel config."""
import json
import os
import queue
import secrets
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
AGENT = os.path.join(ROOT, ".output", "gpuscope-agent")
NODE = "gpu-node-7"
TOKEN = "test-token-" + secrets.token_hex(8)
STEP_TIMEOUT = 10


def skip(why):
    print("SKIP:", why)
    sys.exit(77)


def cgroup2_mount():
    with open("/proc/self/mounts") as f:
        for line in f:
            dev, d, typ = line.split()[:3]
            if typ == "cgroup2":
                return d
    return None


class Container:
    """A `sleep` process moved into kubepods-besteffort-pod<uid>.slice/cri-containerd-<id>.scope."""

    def __init__(self, top, uid):
        self.uid = uid
        self.id = secrets.token_hex(32)
        self.dir = os.path.join(top, "kubepods-besteffort-pod%s.slice" % uid.replace("-", "_"),
                                "cri-containerd-%s.scope" % self.id)
        os.makedirs(self.dir)
        self.proc = subprocess.Popen(["sleep", "120"])
        with open(os.path.join(self.dir, "cgroup.procs"), "w") as f:
            f.write("%d\n" % self.proc.pid)

    def stop(self):
        self.proc.kill()
        self.proc.wait()


def pod(name, uid, rv, ctr, labels, owner=("PyTorchJob", "bert")):
    """A Pod as the API server returns it (core/v1 Pod, the fields a client sees)."""
    return {
        "kind": "Pod", "apiVersion": "v1",
        "metadata": {
            "name": name, "namespace": "ml", "uid": uid, "resourceVersion": str(rv),
            "creationTimestamp": "2026-12-02T10:00:00Z", "labels": labels,
            "ownerReferences": [{"apiVersion": "kubeflow.org/v1", "kind": owner[0], "name": owner[1],
                                 "uid": "0d7e5c1a-0000-4000-8000-000000000001", "controller": True,
                                 "blockOwnerDeletion": True}],
        },
        "spec": {"nodeName": NODE, "containers": [{"name": "pytorch", "image": "pytorch:2"}]},
        "status": {
            "phase": "Running", "podIP": "10.0.0.7",
            "containerStatuses": [{"name": "pytorch", "ready": True, "restartCount": 0,
                                   "image": "pytorch:2", "imageID": "sha256:00",
                                   "containerID": "containerd://" + ctr.id,
                                   "state": {"running": {"startedAt": "2026-12-02T10:00:01Z"}}}],
        },
    }


def kf(job, rtype, idx, **extra):
    d = {"training.kubeflow.org/job-name": job, "training.kubeflow.org/replica-type": rtype,
         "training.kubeflow.org/replica-index": str(idx)}
    d.update(extra)
    return d


def status(code, reason, message):
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": message, "reason": reason, "code": code}


class Api:
    """The scripted API server: each request takes the next step; gates wait for the test."""

    def __init__(self, a, b, simple=False):
        self.a, self.b, self.simple = a, b, simple
        self.requests = []
        self.gates = {k: threading.Event() for k in ("b_added", "a_v2", "a_v3", "a_v4", "done")}
        self.errors = queue.Queue()

    def handle(self, h):
        url = urllib.parse.urlparse(h.path)
        q = urllib.parse.parse_qs(url.query)
        self.requests.append((url.path, {k: v[0] for k, v in q.items()}))
        if url.path != "/api/v1/pods":
            return h.json(404, status(404, "NotFound", "the server could not find the requested resource"))
        if h.headers.get("Authorization") != "Bearer " + TOKEN:
            return h.json(401, status(401, "Unauthorized", "Unauthorized"))
        sel = q.get("fieldSelector", [""])[0]
        if sel == "spec.nodeName=forbidden-node":
            return h.json(403, status(403, "Forbidden",
                                      'pods is forbidden: User "system:serviceaccount:gpuscope:gpuscope-agent" '
                                      'cannot list resource "pods" in API group "" at the cluster scope'))
        if sel != "spec.nodeName=" + NODE:
            self.errors.put("bad fieldSelector %r" % sel)
            return h.json(400, status(400, "BadRequest", "bad selector"))
        a, b = self.a, self.b
        ua, ub = a.uid, b.uid
        if self.simple:	# one list, then a watch held open
            if "watch" not in q:
                return h.json(200, {"kind": "PodList", "apiVersion": "v1", "metadata": {"resourceVersion": "7"},
                                    "items": [pod("bert-worker-0", ua, 7, a, kf("bert", "worker", 0))]})
            h.start_stream()
            self.gates["done"].wait(30)
            return
        lists = [r for r in self.requests if "watch" not in r[1]]
        watches = [r for r in self.requests if r[1].get("watch") == "true"]
        if "watch" not in q:
            if len(lists) == 1:	# first list, page 1 of 2
                if q.get("limit") != ["500"] or "continue" in q:
                    self.errors.put("page 1 query %r" % q)
                return h.json(200, {"kind": "PodList", "apiVersion": "v1",
                                    "metadata": {"resourceVersion": "100", "continue": "tok-1"},
                                    "items": [pod("bert-worker-0", ua, 90, a, kf("bert", "worker", 0, team="v1"))]})
            if len(lists) == 2:	# page 2
                if q.get("continue") != ["tok-1"]:
                    self.errors.put("page 2 query %r" % q)
                return h.json(200, {"kind": "PodList", "apiVersion": "v1",
                                    "metadata": {"resourceVersion": "100"}, "items": []})
            # relist after 410 Gone
            return h.json(200, {"kind": "PodList", "apiVersion": "v1", "metadata": {"resourceVersion": "200"},
                                "items": [pod("bert-worker-0", ua, 199, a, kf("bert", "worker", 0, team="v3")),
                                          pod("rc-head-abcde", ub, 150, b,
                                              {"ray.io/cluster": "rc", "ray.io/node-type": "head",
                                               "ray.io/group": "headgroup"}, ("RayCluster", "rc"))]})
        n = len(watches)
        rv = q.get("resourceVersion", [""])[0]
        h.start_stream()
        if n == 1:
            if rv != "100":
                self.errors.put("watch 1 from rv %r" % rv)
            h.event("ADDED", pod("rc-head-abcde", ub, 101, b,
                                 {"ray.io/cluster": "rc", "ray.io/node-type": "head", "ray.io/group": "headgroup"},
                                 ("RayCluster", "rc")))
            self.wait("b_added")
            h.event("MODIFIED", pod("bert-worker-0", ua, 102, a, kf("bert", "worker", 0, team="v2")))
            self.wait("a_v2")
            h.event("BOOKMARK", {"kind": "Pod", "apiVersion": "v1", "metadata": {"resourceVersion": "103"}})
            return	# the stream ends: the client must watch again from 103
        if n == 2:
            if rv != "103":
                self.errors.put("watch 2 from rv %r (want the bookmark's 103)" % rv)
            h.event("ERROR", status(410, "Expired", "too old resource version: 103 (180)"))
            return
        if n == 3:
            if rv != "200":
                self.errors.put("watch 3 from rv %r" % rv)
            self.wait("a_v3")
            h.event("DELETED", pod("rc-head-abcde", ub, 201, b, {"ray.io/cluster": "rc"}, ("RayCluster", "rc")))
            h.event("MODIFIED", pod("bert-worker-0", ua, 202, a, kf("bert", "worker", 0, team="v4")))
            self.gates["done"].wait(30)
            return
        self.errors.put("unexpected watch %d" % n)

    def wait(self, gate):
        if not self.gates[gate].wait(STEP_TIMEOUT):
            self.errors.put("the agent never showed step %s" % gate)


def make_handler(api):
    class H(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        streaming = False

        def log_message(self, *a):
            pass

        def json(self, code, obj):
            body = json.dumps(obj).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def start_stream(self):
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            self.streaming = True
            self.close_connection = True

        def event(self, typ, obj):
            line = (json.dumps({"type": typ, "object": obj}) + "\n").encode()
            self.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
            self.wfile.flush()

        def do_GET(self):
            try:
                api.handle(self)
                if self.streaming:
                    self.wfile.write(b"0\r\n\r\n")
            except OSError:
                pass
    return H


def parse(line):
    f = shlex.split(line)  # values with blanks (cmdline) come double-quoted
    return int(f[0]), dict(kv.split("=", 1) for kv in f[1:])


def main():
    if os.geteuid() != 0:
        skip("needs root to create cgroups")
    if not os.access(AGENT, os.X_OK):
        print("missing", AGENT)
        return 1
    mnt = cgroup2_mount()
    if not mnt:
        skip("no cgroup2 mount")
    top = os.path.join(mnt, "gpuscope-k8s-test-%d.slice" % os.getpid())
    tmp = tempfile.mkdtemp(prefix="gpuscope-k8s-")
    ctrs = []
    try:
        try:
            ctrs = [Container(top, "3f2a6c1e-8b7d-4e5f-9a0b-%012x" % (os.getpid() * 16 + i)) for i in range(2)]
        except OSError as e:
            skip("cannot create cgroups here: %s" % e)
        return run(tmp, *ctrs)
    finally:
        for c in ctrs:
            c.stop()
        for d, _, _ in sorted(os.walk(top), key=lambda w: -len(w[0])) if os.path.isdir(top) else []:
            try:
                os.rmdir(d)
            except OSError:
                pass
        subprocess.run(["rm", "-rf", tmp])


def run(tmp, a, b):
    token = os.path.join(tmp, "token")
    with open(token, "w") as f:
        f.write(TOKEN + "\n")
    api = Api(a, b)
    srv = ThreadingHTTPServer(("127.0.0.1", 0), make_handler(api))
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    url = "http://127.0.0.1:%d" % srv.server_address[1]
    env = dict(os.environ, GPUSCOPE_K8S_API=url, GPUSCOPE_K8S_TOKEN_FILE=token,
               GPUSCOPE_K8S_CA_FILE=os.path.join(tmp, "none.crt"))
    env.pop("KUBERNETES_SERVICE_HOST", None)
    fails = []

    def check(cond, what):
        print(("ok   " if cond else "FAIL ") + what)
        if not cond:
            fails.append(what)

    # 1. the scripted list/watch sequence; team comes through a labelmap rule
    relabel = os.path.join(tmp, "relabel.yaml")
    with open(relabel, "w") as f:
        f.write("- action: labelmap\n  regex: __meta_kubernetes_pod_label_(team)\n")
    wrapper = os.environ.get("GPUSCOPE_TEST_WRAPPER", "").split()	# e.g. "valgrind -q --error-exitcode=9"
    p = subprocess.Popen(wrapper + [AGENT, "labels", "--node", NODE, "--follow", "60s", "--interval", "20ms",
                          "--relabel-config", relabel, "--metrics", str(a.proc.pid), str(b.proc.pid)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    lines = queue.Queue()
    rest = []

    errbuf = []

    def reader():
        for line in p.stdout:
            lines.put(line)
        lines.put(None)
    reader_t = threading.Thread(target=reader, daemon=True)
    reader_t.start()
    threading.Thread(target=lambda: errbuf.append(p.stderr.read()), daemon=True).start()
    seen = {a.proc.pid: [], b.proc.pid: []}

    def wait_for(pid, pred, what):
        deadline = time.monotonic() + STEP_TIMEOUT
        for labels in seen[pid]:
            if pred(labels):
                check(True, what)
                return labels
        while time.monotonic() < deadline:
            try:
                line = lines.get(timeout=0.2)
            except queue.Empty:
                continue
            if line is None:
                break
            if not line[:1].isdigit():
                rest.append(line)
                continue
            lp, labels = parse(line)
            if lp in seen:
                seen[lp].append(labels)
                if lp == pid and pred(labels):
                    check(True, what)
                    return labels
        check(False, what + " (last seen: %r)" % seen[pid][-2:])
        return {}

    lb = wait_for(b.proc.pid, lambda l: True, "pod B labelled before the API knows it")
    check(lb.get("pod_uid") == b.uid and lb.get("container_id") == b.id and "pod" not in lb,
          "pod B unresolved: container id and pod uid from its cgroup")
    la = wait_for(a.proc.pid, lambda l: l.get("team") == "v1", "list (2 pages): pod A resolved")
    check(la.get("pod") == "bert-worker-0" and la.get("namespace") == "ml" and
          la.get("container") == "pytorch" and la.get("container_id") == a.id and
          la.get("container_runtime") == "containerd", "pod A: pod, namespace, container, id, runtime")
    check(la.get("kubeflow_job") == "bert" and la.get("kubeflow_replica_type") == "worker" and
          la.get("kubeflow_replica_index") == "0", "pod A: Kubeflow labels promoted")
    check(la.get("owner_kind") == "PyTorchJob" and la.get("owner") == "bert", "pod A: owner")
    check("pod_uid" not in la and not any(k.startswith("__") for k in la), "pod A: no uid, no __ labels")
    lb = wait_for(b.proc.pid, lambda l: l.get("pod") == "rc-head-abcde", "watch ADDED: pod B resolved")
    check(lb.get("ray_cluster") == "rc" and lb.get("ray_node_type") == "head" and
          lb.get("ray_group") == "headgroup" and lb.get("owner_kind") == "RayCluster", "pod B: KubeRay labels")
    api.gates["b_added"].set()
    wait_for(a.proc.pid, lambda l: l.get("team") == "v2", "watch MODIFIED: pod A relabelled")
    api.gates["a_v2"].set()
    # bookmark, stream closed, watch again from 103, 410 Gone, relist at 200
    wait_for(a.proc.pid, lambda l: l.get("team") == "v3", "410 Gone -> relist: pod A from the new list")
    api.gates["a_v3"].set()
    wait_for(a.proc.pid, lambda l: l.get("team") == "v4", "watch after relist: MODIFIED seen")
    lb = seen[b.proc.pid][-1]
    check(lb.get("pod") == "rc-head-abcde", "pod B DELETED: samples keep its labels (grace period)")
    p.send_signal(signal.SIGTERM)
    try:
        p.wait(timeout=STEP_TIMEOUT)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()
        check(False, "agent stops on SIGTERM while a watch is open")
    api.gates["done"].set()
    reader_t.join(STEP_TIMEOUT)
    while True:
        line = lines.get(timeout=STEP_TIMEOUT)
        if line is None:
            break
        rest.append(line)
    metrics = {}
    for line in rest:
        if line.startswith("gpuscope_agent_meta_"):
            k, v = line.split()
            metrics[k] = int(v)
    check(p.returncode == 0, "labels exits 0 (rc %d)" % p.returncode)
    check(metrics.get("gpuscope_agent_meta_k8s_lists_total") == 2, "metrics: 2 lists (%s)" % metrics.get("gpuscope_agent_meta_k8s_lists_total"))
    check(metrics.get("gpuscope_agent_meta_k8s_watches_total") == 3, "metrics: 3 watches")
    check(metrics.get("gpuscope_agent_meta_k8s_watch_gone_total") == 1, "metrics: one 410 Gone")
    check(metrics.get("gpuscope_agent_meta_k8s_pods") == 2, "metrics: 2 pods cached (one deleted, in grace)")
    check(metrics.get("gpuscope_agent_meta_k8s_bad_events_total") == 0, "metrics: no bad events")
    pods = [(r[1].get("watch"), r[1].get("resourceVersion"), r[1].get("continue"))
            for r in api.requests if r[0] == "/api/v1/pods"]
    check(pods == [(None, None, None), (None, None, "tok-1"), ("true", "100", None), ("true", "103", None),
                   (None, None, None), ("true", "200", None)], "request sequence %r" % pods)
    while not api.errors.empty():
        check(False, "server: " + api.errors.get())

    # 2. API server unreachable: labels from cgroups, a warning, still running
    env2 = dict(env, GPUSCOPE_K8S_API="http://127.0.0.1:1")
    r = subprocess.run([AGENT, "labels", "--node", NODE, "--follow", "1500ms", str(a.proc.pid)],
                       capture_output=True, text=True, env=env2, timeout=30)
    _, la = parse(r.stdout.splitlines()[0]) if r.stdout else (0, {})
    check(r.returncode == 0 and la.get("container_id") == a.id and la.get("pod_uid") == a.uid,
          "API unreachable: cgroup labels (%r)" % r.stdout.strip())
    check("retrying" in r.stderr and "cgroups only" in r.stderr, "API unreachable: warning (%r)" % r.stderr.strip()[:200])

    # 3. RBAC missing: 403 names the fix
    r = subprocess.run([AGENT, "labels", "--node", "forbidden-node", "--follow", "1s", str(a.proc.pid)],
                       capture_output=True, text=True, env=env, timeout=30)
    check(r.returncode == 0 and "HTTP 403" in r.stderr and "RBAC" in r.stderr and "forbidden" in r.stderr,
          "403: RBAC warning (%r)" % r.stderr.strip()[:300])

    # 4. malformed relabel config: refused at start with line and reason
    with open(relabel, "w") as f:
        f.write("- source_labels: [namespace]\n  action: keep\n  regex: '(ml'\n")
    r = subprocess.run([AGENT, "labels", "--relabel-config", relabel, str(a.proc.pid)],
                       capture_output=True, text=True, env=env, timeout=30)
    check(r.returncode != 0 and "line 1: regex '(ml'" in r.stderr, "bad relabel config refused (%r)" % r.stderr.strip())
    r = subprocess.run([AGENT, "run", "--server", "http://127.0.0.1:1", "--no-gpu", "--duration", "5s",
                        "--metrics-listen", "off", "--relabel-config", relabel],
                       capture_output=True, text=True, env=env, timeout=30)
    check(r.returncode != 0 and "line 1: regex '(ml'" in r.stderr,
          "agent run refuses a bad relabel config (rc %d, %r)" % (r.returncode, r.stderr.strip()[-200:]))
    srv.shutdown()

    # 5. in-cluster style: https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT, the CA file
    tls(tmp, a, b, token, check)
    print("%d checks failed" % len(fails))
    return 1 if fails else 0


def openssl(*args):
    subprocess.run(["openssl"] + list(args), check=True, capture_output=True, timeout=60)


def make_ca(tmp, name):
    key, crt = os.path.join(tmp, name + ".key"), os.path.join(tmp, name + ".crt")
    openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
            "-keyout", key, "-out", crt, "-days", "1", "-subj", "/CN=" + name)
    return key, crt


def tls(tmp, a, b, token, check):
    import ssl
    if not shutil.which("openssl"):
        check(False, "openssl CLI for the TLS test")
        return
    ca_key, ca_crt = make_ca(tmp, "ca")
    _, other_crt = make_ca(tmp, "other-ca")
    key, csr, crt, ext = (os.path.join(tmp, f) for f in ("srv.key", "srv.csr", "srv.crt", "ext.cnf"))
    with open(ext, "w") as f:
        f.write("subjectAltName=IP:127.0.0.1\n")
    openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", key,
            "-out", csr, "-subj", "/CN=kubernetes")
    openssl("x509", "-req", "-in", csr, "-CA", ca_crt, "-CAkey", ca_key, "-CAcreateserial", "-out", crt,
            "-days", "1", "-extfile", ext)
    api = Api(a, b, simple=True)
    srv = ThreadingHTTPServer(("127.0.0.1", 0), make_handler(api))
    srv.daemon_threads = True
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(crt, key)
    srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    env = dict(os.environ, KUBERNETES_SERVICE_HOST="127.0.0.1", KUBERNETES_SERVICE_PORT=str(srv.server_address[1]),
               GPUSCOPE_K8S_TOKEN_FILE=token, GPUSCOPE_K8S_CA_FILE=ca_crt)
    env.pop("GPUSCOPE_K8S_API", None)
    p = subprocess.Popen([AGENT, "labels", "--node", NODE, "--follow", "20s", "--interval", "50ms", str(a.proc.pid)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    got = {}
    deadline = time.monotonic() + STEP_TIMEOUT
    for line in p.stdout:
        got = parse(line)[1]
        if got.get("pod") == "bert-worker-0" or time.monotonic() > deadline:
            break
    p.send_signal(signal.SIGTERM)
    api.gates["done"].set()
    err = p.communicate(timeout=STEP_TIMEOUT)[1]
    check(got.get("pod") == "bert-worker-0" and got.get("kubeflow_job") == "bert",
          "https with the service-account CA, KUBERNETES_SERVICE_HOST/PORT: pod resolved (%s)" % err.strip()[-200:])
    # a server certificate the CA file does not vouch for: refused, cgroup labels, a warning
    env["GPUSCOPE_K8S_CA_FILE"] = other_crt
    r = subprocess.run([AGENT, "labels", "--node", NODE, "--follow", "1s", str(a.proc.pid)],
                       capture_output=True, text=True, env=env, timeout=30)
    got = parse(r.stdout.splitlines()[-1])[1] if r.stdout else {}
    check("pod" not in got and got.get("pod_uid") == a.uid and "certificate" in r.stderr.lower(),
          "untrusted server certificate refused, cgroup labels kept (%s)" % r.stderr.strip()[-160:])
    srv.shutdown()


if __name__ == "__main__":
    sys.exit(main())
