#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""deploy/: the manifests validated against the Kubernetes OpenAPI schemas (kubernetes-models
from the npm registry, pinned in tests/k8s/package-lock.json, installed by `npm ci` into
.output/k8s-validate on first use), broken copies refused, and what the install relies on
checked across documents: names that must match, every capability with its comment, host
mounts, the NVIDIA runtime, GPU tolerations, limits, RBAC limited to list/watch pods, agent and
server flags that the binaries accept, the CUPTI hostPath the examples mount, and the init
container's copy script run for real."""
import filecmp
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
VDIR = os.path.join(ROOT, ".output", "k8s-validate")
VALIDATE = os.path.join(ROOT, "tests", "k8s", "validate.cjs")
MANIFEST = os.path.join(ROOT, "deploy", "kubernetes", "gpuscope.yaml")
EXAMPLES = [os.path.join(ROOT, "deploy", "examples", f) for f in ("pytorchjob.yaml", "raycluster.yaml")]
CLICKHOUSE = os.path.join(ROOT, "deploy", "kubernetes", "gpuscope-server-clickhouse.yaml")
fails = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        fails.append(what)
    return cond


def install():
    lock = os.path.join(ROOT, "tests", "k8s", "package-lock.json")
    stamp = os.path.join(VDIR, "package-lock.json")
    if os.path.isdir(os.path.join(VDIR, "node_modules", "kubernetes-models")) and \
            os.path.exists(stamp) and filecmp.cmp(lock, stamp, shallow=False):
        return True
    if not shutil.which("npm"):
        print("npm is missing (scripts/deps/k8s.txt installs nodejs)")
        return False
    os.makedirs(VDIR, exist_ok=True)
    for f in ("package.json", "package-lock.json"):
        shutil.copy(os.path.join(ROOT, "tests", "k8s", f), VDIR)
    r = subprocess.run(["npm", "ci", "--no-audit", "--no-fund", "--prefer-offline"], cwd=VDIR,
                       capture_output=True, text=True, timeout=300)
    print(r.stdout[-500:], r.stderr[-2000:])
    return r.returncode == 0


def validate(*files, dump=False):
    env = dict(os.environ, NODE_PATH=os.path.join(VDIR, "node_modules"))
    return subprocess.run(["node", VALIDATE] + (["--dump"] if dump else []) + list(files),
                          capture_output=True, text=True, timeout=120, env=env)


def broken(text, old, new, want):
    """A copy of the manifest with one change must be refused, naming the problem."""
    assert old in text, old
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
        f.write(text.replace(old, new, 1))
    r = validate(f.name)
    os.unlink(f.name)
    check(r.returncode == 1 and want in r.stderr, "refused: %s -> %s (%s)" % (old.strip(), new.strip(),
                                                                                 r.stderr.strip()[:200]))


def by_kind(docs, kind, name=None):
    return [d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]


def flags(args):
    return {a.split("=", 1)[0] for a in args if a.startswith("--")}


def main():
    if not check(install(), "kubernetes-models installed from the npm registry"):
        return 1
    r = validate(MANIFEST, CLICKHOUSE, *EXAMPLES)
    print(r.stderr.strip())
    check(r.returncode == 0, "deploy/kubernetes/ (SQLite and ClickHouse variants) and deploy/examples/ valid")

    text = open(MANIFEST).read()
    broken(text, "hostPID: true", "hostPID: \"yes\"", "hostPID must be boolean")
    broken(text, "memory: 1Gi\n", "memory: 1 Gi\n", "must match format \"quantity\"")
    broken(text, "  selector:\n    matchLabels:\n      app.kubernetes.io/name: gpuscope-agent\n", "",
           "must have required property selector")
    broken(text, "verbs: [\"list\", \"watch\"]", "verbs: list", "verbs must be array")
    broken(text, "  type: ClusterIP", "  type: ClusterIP\n  type: NodePort", "Map keys must be unique")
    ex = open(EXAMPLES[0]).read()
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
        f.write(ex.replace("nvidia.com/gpu: 8", "nvidia.com/gpu: eight", 1))
    r = validate(f.name)
    os.unlink(f.name)
    check(r.returncode == 1 and "Master.template" in r.stderr, "refused: a PyTorchJob pod template with a bad quantity")

    r = validate(MANIFEST, dump=True)
    docs = json.loads(r.stdout)
    ns = by_kind(docs, "Namespace")
    check(len(ns) == 1 and all(d["metadata"].get("namespace") in (None, ns[0]["metadata"]["name"]) for d in docs),
          "one namespace, every object in it")

    # RBAC: list/watch pods, nothing else
    role = by_kind(docs, "ClusterRole")[0]
    check(role["rules"] == [{"apiGroups": [""], "resources": ["pods"], "verbs": ["list", "watch"]}],
          "ClusterRole: list/watch pods only")
    crb = by_kind(docs, "ClusterRoleBinding")[0]
    ds = by_kind(docs, "DaemonSet", "gpuscope-agent")[0]
    pod = ds["spec"]["template"]["spec"]
    check(crb["roleRef"]["name"] == role["metadata"]["name"] and
          crb["subjects"][0]["name"] == pod["serviceAccountName"] == by_kind(docs, "ServiceAccount")[0]["metadata"]["name"],
          "binding ties the ClusterRole to the agent's service account")
    check(ds["spec"]["selector"]["matchLabels"].items() <= ds["spec"]["template"]["metadata"]["labels"].items(),
          "DaemonSet selector matches its pods")

    # the agent pod
    agent = [c for c in pod["containers"] if c["name"] == "agent"][0]
    check(pod.get("hostPID") is True, "hostPID")
    check(pod.get("runtimeClassName") == "nvidia", "runtimeClassName nvidia")
    env = {e["name"]: e.get("value") for e in agent["env"]}
    check(env.get("NVIDIA_VISIBLE_DEVICES") == "all" and env.get("NVIDIA_DRIVER_CAPABILITIES") == "utility",
          "NVIDIA_VISIBLE_DEVICES=all, NVIDIA_DRIVER_CAPABILITIES=utility")
    check([e for e in agent["env"] if e["name"] == "NODE_NAME"][0]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
          and "--node=$(NODE_NAME)" in agent["args"], "node name from the downward API")
    tol = {(t["key"], t.get("effect")) for t in pod["tolerations"]}
    check(("nvidia.com/gpu", "NoSchedule") in tol and ("nvidia.com/gpu", "NoExecute") in tol, "tolerates nvidia.com/gpu taints")
    caps = agent["securityContext"]["capabilities"]
    check(caps["drop"] == ["ALL"] and agent["securityContext"]["privileged"] is False, "not privileged, drops ALL")
    for cap in ("BPF", "PERFMON", "SYS_RESOURCE", "SYS_PTRACE", "SYS_ADMIN"):
        check(cap in caps["add"], "capability %s added" % cap)
    for cap in caps["add"]:
        check(re.search(r"# CAP_%s: \S.*\n(\s*#.*\n)*\s*- %s\n" % (cap, cap), text) is not None,
              "capability %s has its comment" % cap)
    for c in pod["containers"] + pod["initContainers"]:
        lim = c.get("resources", {}).get("limits", {})
        check("cpu" in lim and "memory" in lim, "container %s has cpu and memory limits" % c["name"])
    vols = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["mountPath"]: m["name"] for m in agent["volumeMounts"]}
    for path in ("/sys/kernel/btf", "/sys/kernel/debug", "/sys/kernel/tracing", "/sys/fs/cgroup", "/var/lib/gpuscope/lib"):
        check(path in mounts and vols[mounts[path]].get("hostPath", {}).get("path") == path, "host mount %s" % path)
    check(mounts.get("/var/lib/gpuscope/spool") and vols[mounts["/var/lib/gpuscope/spool"]]["hostPath"]["type"] ==
          "DirectoryOrCreate", "spool survives restarts on the host")
    check(mounts.get("/var/lib/gpuscope/unwind-cache") and
          vols[mounts["/var/lib/gpuscope/unwind-cache"]]["hostPath"]["type"] == "DirectoryOrCreate",
          "unwind-table cache survives restarts on the host (the root filesystem is read-only)")

    # token, relabel config, server address: names that must agree
    secret = by_kind(docs, "Secret")[0]
    check(vols["token"]["secret"]["secretName"] == secret["metadata"]["name"] and "token" in secret["stringData"] and
          "--token-file=/etc/gpuscope/token/token" in agent["args"] and mounts.get("/etc/gpuscope/token") == "token",
          "agent reads the ingest token from the Secret")
    cm = by_kind(docs, "ConfigMap", "gpuscope-relabel")[0]
    check(vols["relabel"]["configMap"]["name"] == cm["metadata"]["name"] and
          "--relabel-config=/etc/gpuscope/relabel/relabel.yaml" in agent["args"], "relabel ConfigMap mounted and used")
    svc = by_kind(docs, "Service", "gpuscope-server")[0]
    dep = by_kind(docs, "Deployment", "gpuscope-server")[0]
    port = svc["spec"]["ports"][0]["port"]
    check("--server=http://%s.%s.svc:%d" % (svc["metadata"]["name"], svc["metadata"]["namespace"], port) in agent["args"],
          "agent --server is the Service's DNS name and port")
    check(svc["spec"]["selector"].items() <= dep["spec"]["template"]["metadata"]["labels"].items(),
          "Service selects the server pods")
    spod = dep["spec"]["template"]["spec"]
    server = spod["containers"][0]
    check(any(v.get("persistentVolumeClaim", {}).get("claimName") == by_kind(docs, "PersistentVolumeClaim")[0]["metadata"]["name"]
              for v in spod["volumes"]), "server stores on the PersistentVolumeClaim")
    check(dep["spec"]["strategy"]["type"] == "Recreate", "one SQLite writer: Recreate")
    svols = {v["name"]: v for v in spod["volumes"]}
    smounts = {m["mountPath"]: m["name"] for m in server["volumeMounts"]}
    qsecret = by_kind(docs, "Secret", "gpuscope-query-token")[0]
    check("--ingest-token-file=/etc/gpuscope/token/token" in server["args"] and
          svols[smounts["/etc/gpuscope/token"]]["secret"]["secretName"] == secret["metadata"]["name"] and
          "--query-token-file=/etc/gpuscope/query-token/token" in server["args"] and
          svols[smounts["/etc/gpuscope/query-token"]]["secret"]["secretName"] == qsecret["metadata"]["name"],
          "server: ingest token from the agents' Secret, query token from its own Secret")
    check("--tls-cert-file" in text and "--ca-file" in text, "TLS documented in the manifest")
    check("--listen=0.0.0.0:%d" % server["ports"][0]["containerPort"] in server["args"] and
          svc["spec"]["ports"][0]["targetPort"] == server["ports"][0]["name"], "server listens where the Service sends")

    # the relabel rules in the ConfigMap parse with the agent's own parser
    agent_bin = os.path.join(ROOT, ".output", "gpuscope-agent")
    with tempfile.TemporaryDirectory() as tmp:
        rel = os.path.join(tmp, "relabel.yaml")
        with open(rel, "w") as f:
            f.write(cm["data"]["relabel.yaml"])
        r = subprocess.run([agent_bin, "labels", "--relabel-config", rel, str(os.getpid())],
                           capture_output=True, text=True, timeout=30)
        check(r.returncode == 0 and "2 rules" in r.stderr, "ConfigMap relabel rules load (%s)" % r.stderr.strip())

        # the flags in the manifest are flags the binaries take
        h = subprocess.run([agent_bin, "run", "--help"], capture_output=True, text=True, timeout=30)
        for fl in flags(agent["args"]):
            check(fl in h.stdout + h.stderr, "gpuscope-agent run takes %s" % fl)
        check(agent["args"][0] == "run", "agent runs `run`")
        server_bin = os.path.join(ROOT, ".output", "gpuscope-server")
        if os.access(server_bin, os.X_OK):
            h = subprocess.run([server_bin, "--help"], capture_output=True, text=True, timeout=30)
            for fl in flags(server["args"]):
                check(fl in h.stdout + h.stderr, "gpuscope-server takes %s" % fl)
            chd = json.loads(validate(CLICKHOUSE, dump=True).stdout)
            chs = by_kind(chd, "Deployment", "gpuscope-server")[0]
            check(chs["spec"]["replicas"] > 1, "ClickHouse variant: several stateless front-ends")
            chargs = chs["spec"]["template"]["spec"]["containers"][0]["args"]
            for fl in flags(chargs):
                check(fl in h.stdout + h.stderr, "gpuscope-server takes %s (ClickHouse variant)" % fl)

        # the init container's copy script, run for real on a stand-in /opt/gpuscope/lib
        init = pod["initContainers"][0]
        check(init["volumeMounts"][0]["name"] == "cupti-lib" and vols["cupti-lib"]["hostPath"]["path"] == "/var/lib/gpuscope/lib",
              "init container writes the node's /var/lib/gpuscope/lib")
        src, dst = os.path.join(tmp, "opt"), os.path.join(tmp, "host")
        os.makedirs(src)
        os.makedirs(dst)
        for name, data in (("libgpuscope_cupti.so", b"\x7fELF-one"), ("libcupti.so.13", b"\x7fELF-two")):
            with open(os.path.join(src, name), "wb") as f:
                f.write(data)
        with open(os.path.join(dst, "libgpuscope_cupti.so"), "wb") as f:
            f.write(b"old")
        script = init["command"][2].replace("/opt/gpuscope/lib", src).replace("/host-lib", dst)
        r = subprocess.run(init["command"][:2] + [script], capture_output=True, text=True, timeout=30)
        check(r.returncode == 0 and sorted(os.listdir(dst)) == ["libcupti.so.13", "libgpuscope_cupti.so"] and
              all(filecmp.cmp(os.path.join(src, n), os.path.join(dst, n), shallow=False) for n in os.listdir(src)),
              "init script copies (and replaces) the libraries, no temporaries left")

    # examples: the two lines and the volume, pointing where the DaemonSet puts the library
    lib = vols["cupti-lib"]["hostPath"]["path"]
    for ex in EXAMPLES:
        r = validate(ex, dump=True)
        (cr,) = json.loads(r.stdout)
        if cr["kind"] == "PyTorchJob":
            templates = [rs["template"] for rs in cr["spec"]["pytorchReplicaSpecs"].values()]
        else:
            templates = [g["template"] for g in cr["spec"]["workerGroupSpecs"]]
        for t in templates:
            s = t["spec"]
            v = [v for v in s["volumes"] if v.get("hostPath", {}).get("path") == lib]
            c = [c for c in s["containers"] if any(e["name"] == "CUDA_INJECTION64_PATH" for e in c.get("env", []))]
            ok = len(v) == 1 and len(c) == 1
            if ok:
                inj = [e["value"] for e in c[0]["env"] if e["name"] == "CUDA_INJECTION64_PATH"][0]
                mnt = [m for m in c[0]["volumeMounts"] if m["name"] == v[0]["name"]]
                ok = inj == lib + "/libgpuscope_cupti.so" and len(mnt) == 1 and mnt[0]["mountPath"] == lib \
                    and mnt[0].get("readOnly") is True
            check(ok, "%s: CUDA_INJECTION64_PATH + read-only mount of %s" % (os.path.basename(ex), lib))
        check(text.count("gpuscope: 1 of 2") == 0 and open(ex).read().count("gpuscope: 1 of 2") == len(templates),
              "%s: the gpuscope lines are marked" % os.path.basename(ex))

    # container files build from this repository with make
    for cf in ("Containerfile.agent", "Containerfile.server"):
        t = open(os.path.join(ROOT, "deploy", cf)).read()
        check(re.search(r"^FROM debian:12\S* AS build", t, re.M) and re.search(r"^RUN (.*\\\n)*\s*&& make -j", t, re.M) and
              t.count("\nFROM ") >= 1, "%s: multi-stage Debian 12 build with make" % cf)
        for src in re.findall(r"^COPY --from=build (\S+)", t, re.M):
            check(src.startswith("/src/.output/") or src.startswith("/opt/"), "%s copies a build output (%s)" % (cf, src))
    print("%d checks failed" % len(fails))
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
