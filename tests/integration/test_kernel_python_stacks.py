#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Kernel GPU time under the Python function that launched it, no GPU: Debian's python3 loads the
libcupti stand-in and the real libgpuscope_cupti.so with ctypes (as CUDA_INJECTION64_PATH would),
and launches "kernels" from named Python functions (train_step -> forward / backward). A real
server and `gpuscope-agent run` (cupti module, real eBPF, the .eh_frame walker and the CPython
walker) trace it continuously. Checked through the server's API: the kernel-time flame graph has
>= 90 % of its time under train_step, each kernel under the Python function that launched it,
no frame of the injection library or of CUPTI between the kernel and its caller, and the share
of the range the windows covered.

Backward kernels: train_step's loss_backward() calls the libtorch_cpu stand-in's autograd
Engine::execute, whose device thread (C, no Python frame) launches them while the caller waits;
they must come under loss_backward through the caller's stack ([autograd thread] between), so
must that thread's CPU samples and its off-CPU time inside a node (not its wait for the next
task, in ReadyQueue::pop), and a kernel another plain thread launches meanwhile must not (it
is counted as launched off the Python threads).

Repeated backward calls: the loop calls train_step three times, then accum_step twice, each
calling loss_backward() from a frame of the same shape (same native depth, same stack pointer,
same loss_backward frame): only the caller's frame tells them apart. The probe re-uses a
thread's last walked stack for a call from the same call site (counted on /metrics), and
autograd's kernels of accum_step's calls must come under accum_step, never train_step (a call
site signature too weak to see the caller's frame would put them there)."""
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(__file__))
from pushlib import (OUT, STANDIN_CUPTI, STANDIN_EXECUTE, Agent, Server, check,  # noqa: E402
                     finish, need_root_and_binaries, skip, wait_until)

need_root_and_binaries()
LIB = os.path.join(OUT, "libgpuscope_cupti.so")
FAKE = os.path.join(OUT, "tests", "cupti", "fakecupti", "libcupti.so.13")
TORCH = os.path.join(OUT, "tests", "cupti", "faketorch", "libtorch_cpu.so")
if not os.access(LIB, os.R_OK) or not os.access(FAKE, os.R_OK):
    skip("no CUDA toolkit here: libgpuscope_cupti.so / the libcupti stand-in not built")
check(os.access(TORCH, os.R_OK), "the libtorch_cpu stand-in is built")

WORKLOAD = "import ctypes, mmap, os, sys, time\n" + STANDIN_CUPTI + STANDIN_EXECUTE + r'''
cupti.fake_cupti_launch.argtypes = [ctypes.c_char_p, ctypes.c_uint32, ctypes.c_uint32,
                                    ctypes.c_uint64]
GEMM, SOFTMAX = b"_Z10gemm_tiledPfS_S_i", b"_Z7softmaxPf"
AUTOGRAD_MM, SIDE = b"_Z11autograd_mmPf", b"_Z9side_kernPf"
AUTOGRAD_B = b"_Z10autograd_bPf"

def forward():
    cupti.fake_cupti_launch(GEMM, 0, 7, 300000)

def backward():
    cupti.fake_cupti_launch(GEMM, 0, 7, 600000)
    cupti.fake_cupti_launch(SOFTMAX, 0, 13, 100000)

def loss_backward(kernel):
    # autograd's device thread launches 3 x 150 us; a plain thread 19 us meanwhile
    if execute(kernel, 3, 150000, SIDE) != 0:
        sys.exit(5)

def train_step():
    forward()
    backward()
    loss_backward(AUTOGRAD_MM)

def accum_step():
    forward()
    backward()
    loss_backward(AUTOGRAD_B)

def main():
    print("ready", flush=True)
    end = time.time() + float(sys.argv[3])
    held, i = None, 0
    while time.time() < end:
        for k in range(3):
            train_step()
            time.sleep(0.002)
        for k in range(2):
            accum_step()
            time.sleep(0.002)
        # the address space moves, as a training process's heap does
        i += 1
        held = mmap.mmap(-1, (1 + i % 7) << 16)

main()
'''


def presence(node, pred):
    if node.get("name") != "all" and pred(node["name"]):
        return node["value"]
    return sum(presence(k, pred) for k in node.get("children") or [])


def paths(node, path=()):
    """(value, frames root..leaf) of every leaf-most node with self time."""
    kids = node.get("children") or []
    p = path + ((node["name"],) if node.get("name") != "all" else ())
    own = node["value"] - sum(k["value"] for k in kids)
    out = [(own, p)] if own > 0 else []
    for k in kids:
        out += paths(k, p)
    return out


tmp = tempfile.mkdtemp(prefix="gpuscope-kpy-")
srv = Server(os.path.join(tmp, "data"))
srv.start()
script = os.path.join(tmp, "launch.py")
open(script, "w").write(WORKLOAD)
env = dict(os.environ, LD_LIBRARY_PATH=os.path.dirname(FAKE))
app = subprocess.Popen(["/usr/bin/python3", script, FAKE, LIB, "30", TORCH], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True, env=env)
agent = None
try:
    check(app.stdout.readline().strip() == "ready", "python3 loaded the injection library")
    agent = Agent(srv.url, ["--node", "kpy", "--pid", str(app.pid), "--push-interval", "1s",
                            "--modules", "cupti,cpu-sampler,sched", "--gpu-trace-budget", "100%"],
                  os.path.join(tmp, "agent.log"), modules_off="")
    sel = '{node="kpy",pid="%d"}' % app.pid
    ok = wait_until(lambda: srv.query("flamegraph", kind="gpu_kernel_ns", selector=sel,
                                      since="5m")["total"] >= 200 * 10**6, 60)
    check(ok, "kernel time of the Python process arrives")
    # CPU samples from here on: the backward probe is attached (before, the device thread's
    # samples have no caller to go under)
    check(wait_until(lambda: agent.metric("gpuscope_agent_cupti_backward_calls_total") > 0, 30),
          "backward calls seen")
    t_cpu = time.time() + 1
    # the continuous window reports the stretch it covered every few seconds
    wait_until(lambda: (srv.query("flamegraph", kind="gpu_kernel_ns", selector=sel,
                                  since="5m").get("traced") or {}).get("windows", 0) >= 1, 30)
    time.sleep(1.5)
    fg = srv.query("flamegraph", kind="gpu_kernel_ns", selector=sel, since="5m")
    root, total = fg["root"], fg["total"]
    under = presence(root, lambda n: n in ("train_step", "accum_step"))
    check(total > 0 and under >= 0.9 * total,
          "kernel GPU time under train_step or accum_step: %.1f %% of %.0f ms" %
          (100.0 * under / max(total, 1), total / 1e6))
    leaves = paths(root)
    for v, p in sorted(leaves, key=lambda t: -t[0])[:4]:
        print("  %8.1f ms  %s" % (v / 1e6, ";".join(p)[-300:]))

    def caller(p, kernel):
        """The innermost Python function of the script above the kernel's frame."""
        for f in reversed(p[:-1]):
            if f in ("forward", "backward", "train_step", "accum_step", "main", "<module>"):
                return f
        return None
    by = {}
    for v, p in leaves:
        if p and p[-1].startswith(("gemm_tiled", "softmax")):
            by.setdefault((p[-1].split("(")[0], caller(p, p[-1])), 0)
            by[(p[-1].split("(")[0], caller(p, p[-1]))] += v
    gemm_fwd, gemm_bwd = by.get(("gemm_tiled", "forward"), 0), by.get(("gemm_tiled", "backward"), 0)
    soft_bwd = by.get(("softmax", "backward"), 0)
    # forward launches 300 us of gemm, backward 600 us of gemm and 100 us of softmax
    check(gemm_fwd > 0 and 1.7 < gemm_bwd / gemm_fwd < 2.3,
          "gemm under forward and backward, 1:2 as launched (%.1f / %.1f ms)" %
          (gemm_fwd / 1e6, gemm_bwd / 1e6))
    check(soft_bwd > 0 and by.get(("softmax", "forward"), 0) == 0,
          "softmax only under backward (%.1f ms)" % (soft_bwd / 1e6))
    # autograd's kernels: under loss_backward through the caller's stack, the device thread's
    # frames from its loop up above [autograd thread]; the plain thread's kernel not
    mm = [(v, p) for v, p in leaves if p and p[-1].startswith("autograd_mm")]
    mm_all = sum(v for v, _ in mm)

    def spliced(p):
        try:
            i = p.index("[autograd thread]")
        except ValueError:
            return False
        return ("loss_backward" in p[:i] and p[i - 1].startswith("torch::autograd::Engine::execute")
                and p[i + 1].startswith("torch::autograd::Engine::thread_main")
                and "start_thread" not in p[i:])
    mm_under = sum(v for v, p in mm if spliced(p))
    for v, p in mm[:2]:
        print("  autograd: %8.1f ms  %s" % (v / 1e6, ";".join(p)[-400:]))
    check(mm_all > 0 and mm_under >= 0.9 * mm_all,
          "autograd's kernels under loss_backward -> Engine::execute -> [autograd thread] -> "
          "thread_main: %.1f of %.1f ms" % (mm_under / 1e6, mm_all / 1e6))
    # the two call sites: autograd_mm's calls from train_step, autograd_b's from accum_step
    def under_caller(p, fn):
        i = p.index("[autograd thread]") if "[autograd thread]" in p else 0
        return fn in p[:i]
    b = [(v, p) for v, p in leaves if p and p[-1].startswith("autograd_b")]
    b_all = sum(v for v, _ in b)
    b_accum = sum(v for v, p in b if spliced(p) and under_caller(p, "accum_step"))
    b_train = sum(v for v, p in b if under_caller(p, "train_step"))
    mm_train = sum(v for v, p in mm if spliced(p) and under_caller(p, "train_step"))
    mm_accum = sum(v for v, p in mm if under_caller(p, "accum_step"))
    check(b_all > 0 and b_accum >= 0.9 * b_all and b_train == 0,
          "accum_step's backward kernels under accum_step: %.1f of %.1f ms, under train_step: "
          "%.1f ms" % (b_accum / 1e6, b_all / 1e6, b_train / 1e6))
    check(mm_train >= 0.9 * mm_all and mm_accum == 0,
          "train_step's backward kernels under train_step: %.1f of %.1f ms, under accum_step: "
          "%.1f ms" % (mm_train / 1e6, mm_all / 1e6, mm_accum / 1e6))
    side = [(v, p) for v, p in leaves if p and p[-1].startswith("side_kern")]
    check(sum(v for v, _ in side) > 0 and
          not any("loss_backward" in p or "[autograd thread]" in p for _, p in side),
          "the plain thread's kernel under its own stack (%.1f ms), not the backward call's" %
          (sum(v for v, _ in side) / 1e6))
    m = {k: agent.metric("gpuscope_agent_cupti_" + k) for k in (
        "torch_libraries_attached", "backward_calls_total", "backward_kernels_total",
        "backward_kernels_lost_total", "backward_stacks_walked_total",
        "backward_stacks_reused_total", "backward_stacks_reuse_lost_total")}
    check(m["torch_libraries_attached"] == 1 and m["backward_calls_total"] > 0 and
          m["backward_kernels_total"] > 0,
          "/metrics: %(torch_libraries_attached)d libtorch_cpu probed, %(backward_calls_total)d "
          "backward calls, %(backward_kernels_total)d kernels under them, "
          "%(backward_kernels_lost_total)d lost" % m)
    # three train_step calls, then two accum_step calls: the second and third of train_step's
    # and the second of accum_step's repeat the call site before them (3 in 5), the others not
    reused = m["backward_stacks_reused_total"] / max(m["backward_stacks_reused_total"] +
                                                     m["backward_stacks_walked_total"], 1)
    check(m["backward_stacks_walked_total"] > 0 and 0.4 <= reused <= 0.7,
          "/metrics: %(backward_stacks_walked_total)d backward stacks walked, "
          "%(backward_stacks_reused_total)d re-used (3 in 5 expected), "
          "%(backward_stacks_reuse_lost_total)d re-uses lost" % m)
    # a settled process (library attached, libtorch_cpu probed) is not re-read by the library
    # scans (every 2 s) although its address space keeps moving
    def vsize():
        return int(open("/proc/%d/stat" % app.pid).read().rsplit(")", 1)[1].split()[20])
    r0 = agent.metric('gpuscope_agent_cupti_scan_maps_total{result="read"}')
    s0 = agent.metric('gpuscope_agent_cupti_scan_maps_total{result="skipped"}')
    sizes = set()
    for _ in range(14):
        sizes.add(vsize())
        time.sleep(0.5)
    r1 = agent.metric('gpuscope_agent_cupti_scan_maps_total{result="read"}')
    s1 = agent.metric('gpuscope_agent_cupti_scan_maps_total{result="skipped"}')
    check(len(sizes) >= 2 and r1 - r0 <= 1 and s1 - s0 >= 2,
          "the settled process's maps not re-read: %d reads, %d skips in 7 s while its size took "
          "%d values" % (r1 - r0, s1 - s0, len(sizes)))
    # the plain thread's kernels are counted as launched off the Python threads, not joined
    py_k = agent.metric("gpuscope_agent_cupti_kernels_python_caller_total")
    nopy_k = agent.metric("gpuscope_agent_cupti_kernels_no_python_caller_total")
    check(py_k > 0 and nopy_k > 0 and nopy_k < py_k,
          "/metrics: %d kernels with a Python caller, %d launched off the Python threads (the "
          "plain thread's)" % (py_k, nopy_k))
    # and the device thread's CPU samples go under the same call
    wait_until(lambda: time.time() > t_cpu + 3, 10)
    cpu = srv.query("flamegraph", kind="cpu", selector=sel,
                    **{"from": "%.3f" % t_cpu, "to": "%.3f" % (time.time() + 60)})["root"]
    ev = [(v, p) for v, p in paths(cpu) if any("Engine::evaluate_function" in f for f in p)]
    ev_all, ev_under = sum(v for v, _ in ev), sum(v for v, p in ev if spliced(p))
    for v, p in [(v, p) for v, p in ev if not spliced(p)][:3]:
        print("  cpu not under: %d  %s" % (v, ";".join(p)[:400]))
    check(ev_all > 0 and ev_under >= 0.9 * ev_all,
          "autograd's CPU samples under loss_backward -> ... -> [autograd thread]: %d of %d" %
          (ev_under, ev_all))
    # a sample goes under the latest backward call when the agent reads it (not when taken):
    # the split follows the calls' 3:2 loosely, but each caller has its share
    ev_accum = sum(v for v, p in ev if spliced(p) and under_caller(p, "accum_step"))
    ev_train = sum(v for v, p in ev if spliced(p) and under_caller(p, "train_step"))
    check(ev_accum >= 0.1 * ev_all and ev_train >= 0.1 * ev_all,
          "autograd's CPU samples under accum_step: %d, under train_step: %d (of %d)" %
          (ev_accum, ev_train, ev_all))
    # off-CPU: blocked inside a node, under the call; waiting for the next task, not
    off = srv.query("flamegraph", kind="offcpu_ns", selector=sel,
                    **{"from": "%.3f" % t_cpu, "to": "%.3f" % (time.time() + 60)})["root"]
    offp = paths(off)
    busy = [(v, p) for v, p in offp if any("Engine::evaluate_function" in f for f in p)]
    idle = [(v, p) for v, p in offp if any("ReadyQueue::pop" in f for f in p)]
    b_all, b_under = sum(v for v, _ in busy), sum(v for v, p in busy if spliced(p))
    check(b_all > 0 and b_under >= 0.9 * b_all and idle and
          not any("[autograd thread]" in p for _, p in idle),
          "autograd's off-CPU time inside a node under the call: %.1f of %.1f ms; waiting for "
          "the next task under its own stack: %.1f ms" %
          (b_under / 1e6, b_all / 1e6, sum(v for v, _ in idle) / 1e6))
    instr = presence(root, lambda n: n in ("on_callback",) or "libcupti" in n or
                     "libgpuscope_cupti" in n)
    check(instr == 0, "no frame of the injection library or CUPTI in the stacks (%d ns)" % instr)
    tr = fg.get("traced") or {}
    check(tr.get("windows", 0) >= 1 and tr.get("fraction", 0) > 0,
          "the traced share of the range: %.3f in %s window(s)" %
          (tr.get("fraction", 0), tr.get("windows")))
finally:
    if agent:
        agent.stop()
    app.kill()
    app.wait()
    srv.stop()
finish()
