# SPDX-License-Identifier: Apache-2.0
"""Checks of issue #13 on the GPU machine against the server's API (tests/device/pystacks_device.sh):
the main thread's GPU-idle CPU flame graph is >= 80 % under python_cpu_phase; >= 90 % of kernel
GPU time sits under the Python function that launched it (train_step), autograd's device
thread's kernels included (>= 95 % of them under the backward call's stack); <= 5 % of the process's
CPU samples hold an unknown frame ([unknown] ..., [python]). Also prints the same figures for the
off-CPU and CUDA-sync stacks, and the heaviest stacks. Usage: pystacks_check.py URL PID [FROM TO]
(FROM TO: the loop's bounds in Unix seconds)"""
import json
import re
import sys
import urllib.parse
import urllib.request

from devlib import leaf_paths

url, pid = sys.argv[1], sys.argv[2]
# the loop's bounds (Unix s), from the workload's phase lines: the GPU-idle check looks there,
# not at `import torch` and the model's set-up, which also run while the GPU is idle
loop = {"from": sys.argv[3], "to": sys.argv[4]} if len(sys.argv) > 4 else {"since": "30m"}
failed = []


def get(path, **params):
    with urllib.request.urlopen("%s%s?%s" % (url, path, urllib.parse.urlencode(params)),
                                timeout=120) as r:
        return json.load(r)


def fg(kind, sel, **extra):
    if "from" not in extra:
        extra["since"] = "30m"
    return get("/api/v1/flamegraph", kind=kind, selector=sel, **extra)["root"]


def presence(node, pred):
    """Value of the samples whose stack holds a frame matching pred (outermost match counted)."""
    if node.get("name") != "root" and pred(node["name"]):
        return node["value"]
    return sum(presence(k, pred) for k in node.get("children") or [])


def heaviest(node, k=8):
    for v, p in sorted(leaf_paths(node), key=lambda t: -t[0])[:k]:
        t = ";".join(p)
        print("   %8d  %s" % (v, t if len(t) <= 400 else t[:180] + " ... " + t[-215:]))


def check(ok, what):
    print("%s %s" % ("PASS" if ok else "FAIL", what))
    if not ok:
        failed.append(what)


def unknown(name):
    return name.startswith("[unknown]") or name == "[python]"


proc = '{pid="%s"}' % pid
main = '{pid="%s",tid="%s"}' % (pid, pid)

idle = fg("cpu", main, gpu_idle="0", **loop)
busy_cpu = idle["value"]
under = presence(idle, lambda n: n == "python_cpu_phase")
print("== GPU-idle CPU flame graph, main thread: %d samples" % busy_cpu)
heaviest(idle)
check(busy_cpu > 0 and under >= 0.8 * busy_cpu,
      "GPU-idle CPU of the main thread under python_cpu_phase: %.1f %% (%d of %d samples)" %
      (100.0 * under / max(busy_cpu, 1), under, busy_cpu))

k = fg("gpu_kernel_ns", proc)
k_total = k["value"]
k_step = presence(k, lambda n: n == "train_step")
k_autograd = presence(k, lambda n: "autograd::Engine::thread_main" in n or
                      "autograd::Engine::thread_init" in n)
k_spliced = presence(k, lambda n: n == "[autograd thread]")
k_bwd = presence(k, lambda n: n == "backward")	# torch/_tensor.py's, above Engine::execute
print("== kernel GPU time: %.1f ms" % (k_total / 1e6))
heaviest(k, 6)
print("   under train_step %.1f %%; launched by autograd's device thread %.1f %%, of which under "
      "the backward call's stack ([autograd thread]) %.1f %%" %
      (100.0 * k_step / max(k_total, 1), 100.0 * k_autograd / max(k_total, 1),
       100.0 * k_spliced / max(k_autograd, 1)))
check(k_autograd > 0 and k_spliced >= 0.95 * k_autograd,
      "autograd's kernels under the stack that called backward: %.1f %% (%.1f of %.1f ms; under "
      "a Python 'backward' frame %.1f ms)" % (100.0 * k_spliced / max(k_autograd, 1),
                                              k_spliced / 1e6, k_autograd / 1e6, k_bwd / 1e6))
check(k_total > 0 and k_step >= 0.9 * k_total,
      "all kernel GPU time under train_step: %.1f %% (%.1f of %.1f ms)"
      % (100.0 * k_step / max(k_total, 1), k_step / 1e6, k_total / 1e6))

c = fg("cpu", proc)
unk = presence(c, unknown)
trunc = presence(c, lambda n: n == "[truncated]")
print("== the process's CPU samples: %d" % c["value"])
check(c["value"] > 0 and unk <= 0.05 * c["value"],
      "CPU samples with an unknown frame: %.2f %% (%d of %d); with [truncated]: %.2f %%" %
      (100.0 * unk / max(c["value"], 1), unk, c["value"], 100.0 * trunc / max(c["value"], 1)))
unnamed = presence(c, lambda n: re.match(r"[^\[;]+\+0x[0-9a-f]+$", n) is not None)
print("INFO CPU samples with an unnamed frame of stripped code (module+0xSTART, its CFI's "
      "function start): %.2f %% (%d)" % (100.0 * unnamed / max(c["value"], 1), unnamed))


def tally(node):
    """Samples with each unknown frame name (a stack counted once per name)."""
    seen = {}

    def walk(n, names):
        if n.get("name") != "root" and unknown(n["name"]) and n["name"] not in names:
            seen[n["name"]] = seen.get(n["name"], 0) + n["value"]
            names = names | {n["name"]}
        for k in n.get("children") or []:
            walk(k, names)
    walk(node, frozenset())
    return seen


for name, v in sorted(tally(c).items(), key=lambda kv: -kv[1])[:10]:
    print("   %6.2f %%  %s" % (100.0 * v / max(c["value"], 1), name))
if "from" in loop:
    cl = fg("cpu", proc, **loop)
    print("INFO during the loop only: %d samples, %.2f %% with an unknown frame, %.2f %% with "
          "[truncated]" % (cl["value"], 100.0 * presence(cl, unknown) / max(cl["value"], 1),
                           100.0 * presence(cl, lambda n: n == "[truncated]") /
                           max(cl["value"], 1)))
    for name, v in sorted(tally(cl).items(), key=lambda kv: -kv[1])[:5]:
        print("   %6.2f %%  %s" % (100.0 * v / max(cl["value"], 1), name))
    ag = presence(cl, lambda n: "autograd::Engine::thread_main" in n)
    ag_under = presence(cl, lambda n: n == "[autograd thread]")
    print("INFO during the loop: CPU samples of autograd's device thread %d, under the backward "
          "call's stack %.1f %%; under train_step %.1f %% of all" %
          (ag, 100.0 * ag_under / max(ag, 1),
           100.0 * presence(cl, lambda n: n == "train_step") / max(cl["value"], 1)))
if "from" in loop:
    # autograd's device thread off-CPU in the loop: inside a task under the backward call, its
    # wait for the next task (ReadyQueue::pop) under its own stack
    ol = fg("offcpu_ns", proc, **loop)
    ag = presence(ol, lambda n: "autograd::Engine::thread_main" in n)
    ag_under = presence(ol, lambda n: n == "[autograd thread]")
    ag_idle = presence(ol, lambda n: "autograd::ReadyQueue::pop" in n)
    print("INFO during the loop: off-CPU of autograd's device thread %.1f ms, under the backward "
          "call %.1f ms, waiting in ReadyQueue::pop %.1f ms" % (ag / 1e6, ag_under / 1e6,
                                                              ag_idle / 1e6))


def under_engine(node):
    """Sub-trees of node whose frame is autograd's thread_main (for the heaviest of them)."""
    if "autograd::Engine::thread_main" in node.get("name", ""):
        return [node]
    out = []
    for k in node.get("children") or []:
        out += under_engine(k)
    return out


if "from" in loop:
    for n in under_engine(ol)[:3]:
        heaviest(n, 3)
for kind in ("offcpu_ns", "cuda_sync_ns"):
    t = fg(kind, proc)
    u = presence(t, unknown)
    print("INFO %s: %.2f %% with an unknown frame, %.2f %% with [truncated], %.2f %% under a "
          "Python function of the script" % (kind, 100.0 * u / max(t["value"], 1),
                                             100.0 * presence(t, lambda n: n == "[truncated]") /
                                             max(t["value"], 1),
                                             100.0 * presence(t, lambda n: n in (
                                                 "train_step", "python_cpu_phase", "main")) /
                                             max(t["value"], 1)))


def with_unknown(node):
    """The heaviest leaf paths that hold an unknown frame (root: the thread, by group_by)."""
    out = [(v, p) for v, p in leaf_paths(node) if any(unknown(name) for name in p)]
    for v, p in sorted(out, key=lambda t: -t[0])[:6]:
        t = ";".join(p)
        print("   %8d  %s" % (v, t if len(t) <= 300 else t[:120] + " ... " + t[-175:]))


if "from" in loop:
    for what, rng in (("before", {"from": "%.3f" % (float(loop["from"]) - 1800),
                                  "to": loop["from"]}),
                      ("after", {"from": loop["to"], "to": "%.3f" % (float(loop["to"]) + 600)})):
        t = fg("cpu", proc, **rng)
        print("INFO %s the loop: %d CPU samples, %d with an unknown frame" %
              (what, t["value"], presence(t, unknown)))
for kind in ("cpu", "offcpu_ns"):
    print("== %s stacks with an unknown frame, by thread:" % kind)
    with_unknown(fg(kind, proc, group_by="thread"))
print("%d check(s) failed" % len(failed) if failed else "all checks passed")
sys.exit(1 if failed else 0)
