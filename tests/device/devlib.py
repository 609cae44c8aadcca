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
