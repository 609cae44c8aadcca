# SPDX-License-Identifier: Apache-2.0
"""What the GPU machine's analysis scripts share."""
import re


def bpf_progs(path):
    """{program: [runs, seconds]} from an agent /metrics scrape (kernel.bpf_stats_enabled=1),
    the ids of one program name summed; {} where the file is missing."""
    got = {}
    try:
        text = open(path).read()
    except OSError:
        return got
    for fam, i in (("gpuscope_agent_bpf_runs_total", 0), ("gpuscope_agent_bpf_run_seconds_total", 1)):
        for m in re.finditer(r'^%s\{program="(\w+)",id="\d+"\} (\S+)$' % fam, text, re.M):
            v = got.setdefault(m.group(1), [0, 0.0])
            v[i] += float(m.group(2))
    return got


def leaf_paths(node):
    """[(self value, [frame names, outermost first])] of each frame of a flame graph (the
    server's JSON tree; the root's name left out) that has samples of its own."""
    out = []

    def walk(n, path):
        kids = n.get("children") or []
        self_v = n["value"] - sum(c["value"] for c in kids)
        p = path + ([n["name"]] if n.get("name") != "root" else [])
        if self_v > 0:
            out.append((self_v, p))
        for c in kids:
            walk(c, p)
    walk(node, [])
    return out
