# SPDX-License-Identifier: Apache-2.0
"""Analysis of tests/device/idle_compare.sh: per workload, the default run's GPU-idle answer
against the continuous run's (shares of the workload's own Python functions and of the top-5
functions by self, total GPU-idle samples), the share of kernel time under the Python function
that dispatched it, and for jax the launching threads and their stacks.
Usage: idle_compare.py URL RUNS_FILE OUT_DIR"""
import json
import sys
import urllib.parse
import urllib.request

from devlib import leaf_paths

url, runs, ret = sys.argv[1], sys.argv[2], sys.argv[3]
FUNCS = {"jax": ["build_batch", "run_step", "python_work"],
         "dataloader": ["decode_sample", "train_step", "__getitem__", "python_work"],
         "gpt2": ["build_prompt", "generate_tokens", "generate", "python_work"],
         "graph": ["prepare_inputs", "replay_graph", "python_work"]}
DISPATCH = {"jax": "run_step", "dataloader": "train_step", "gpt2": "generate_tokens",
            "graph": "replay_graph"}


def get(path, **q):
    try:
        return json.load(urllib.request.urlopen(url + path + "?" + urllib.parse.urlencode(q),
                                                timeout=300))
    except Exception as e:  # noqa: BLE001 (a device script: say it, go on)
        print("  query %s %s: %s" % (path, q.get("selector"), e))
        return {}


def is_fn(frame, name):
    """A Python frame of function name (nested functions come qualified: main.<locals>.name)."""
    return frame == name or frame.endswith("." + name)


def presence(node, name):
    if is_fn(node.get("name", ""), name):
        return node["value"]
    return sum(presence(k, name) for k in node.get("children") or [])


def heaviest(node, k=8, width=360):
    tot = node.get("value") or 1
    for v, p in sorted(leaf_paths(node), key=lambda t: -t[0])[:k]:
        t = ";".join(p)
        print("   %5.1f%%  %s" % (100.0 * v / tot, t if len(t) <= width else t[:120] + " ... " + t[-(width - 125):]))


runs_by = {}
for line in open(runs):
    w, mode, pid, t0, t1 = line.split()
    runs_by.setdefault(w, {})[mode] = (pid, float(t0), float(t1))
ans = {}
for w, modes in runs_by.items():
    print("\n===== %s" % w)
    res = {}
    for mode, (pid, t0, t1) in modes.items():
        rng = {"from": "%.3f" % t0, "to": "%.3f" % t1}
        node_sel = '{node="%s-%s",comm!="gpuscope-agent"}' % (w, mode)
        top = get("/api/v1/top", gpu_idle="0", limit="3000", selector=node_sel, **rng)
        fg = get("/api/v1/flamegraph", gpu_idle="0", selector=node_sel, **rng)
        kern = get("/api/v1/flamegraph", kind="gpu_kernel_ns",
                   selector='{node="%s-%s",pid="%s"}' % (w, mode, pid), **rng).get("root") or {}
        kv = kern.get("value") or 0
        under = presence(kern, DISPATCH[w]) if kv else 0
        res[mode] = {"top": top, "sources": fg.get("gpu_sources"), "span_s": t1 - t0,
                     "kernel_ns": kv, "kernel_under_dispatch": under}
        est = ((fg.get("gpu_sources") or {}).get("estimate") or {}).get("summary")
        print("%s: %.0f s, GPU-idle samples %s; kernel time %.2f s, %.1f %% under %s; %s" % (
            mode, t1 - t0, top.get("total"), kv / 1e9, 100.0 * under / max(kv, 1), DISPATCH[w], est))
        if w == "jax" and mode == "continuous":
            th = get("/api/v1/label/thread/values", selector='{node="%s-%s",pid="%s"}' % (w, mode, pid), **rng)
            print(" kernel time by launching thread:")
            for name in th.get("values", [])[:40]:
                k = get("/api/v1/flamegraph", kind="gpu_kernel_ns",
                        selector='{node="%s-%s",pid="%s",thread="%s"}' % (w, mode, pid, name), **rng).get("root") or {}
                if k.get("value"):
                    print("  %-24s %8.3f s (%.1f %%)" % (name, k["value"] / 1e9, 100.0 * k["value"] / max(kv, 1)))
            print(" heaviest kernel stacks (leaf = kernel):")
            heaviest(kern, 10, 1400)
            cpu = get("/api/v1/flamegraph", selector='{node="%s-%s",pid="%s"}' % (w, mode, pid), **rng).get("root") or {}
            print(" heaviest CPU stacks of the process:")
            heaviest(cpu, 14, 1400)
    ans[w] = res
    if "default" not in res or "continuous" not in res:
        continue
    shares = {}
    for mode in res:
        t = res[mode]["top"]
        tot = t.get("total") or 1
        incl = {}
        for f in t.get("functions", []):	# qualified names folded onto their last part
            short = f["name"].rsplit(".", 1)[-1] if "<locals>" in f["name"] else f["name"]
            incl[short] = max(incl.get(short, 0), f["total"] / tot)
        shares[mode] = (incl, {f["name"]: f["self"] / tot for f in t.get("functions", [])}, tot)
    (ci, cs, ctot), (di, ds, dtot) = shares["continuous"], shares["default"]
    worst = 0
    print("%-40s %10s %10s %8s" % ("function (inclusive)", "continuous", "default", "diff"))
    for fn in FUNCS[w]:
        c, d = ci.get(fn, 0), di.get(fn, 0)
        worst = max(worst, abs(c - d))
        print("%-40s %9.1f%% %9.1f%% %+7.1f" % (fn, 100 * c, 100 * d, 100 * (d - c)))
    print("top-5 by self in continuous:")
    for fn in sorted(cs, key=cs.get, reverse=True)[:5]:
        c, d = cs.get(fn, 0), ds.get(fn, 0)
        worst = max(worst, abs(c - d))
        print("%-40s %9.1f%% %9.1f%% %+7.1f" % (fn[:40], 100 * c, 100 * d, 100 * (d - c)))
    print("GPU-idle samples: continuous %d, default %d (%+.1f %%); worst share difference %.1f points"
          % (ctot, dtot, 100.0 * (dtot - ctot) / max(ctot, 1), 100 * worst))
json.dump(ans, open(ret + "/answers.json", "w"))
