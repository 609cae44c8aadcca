#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Where the agent's time goes (issue #33): the table of activities from two scrapes of its
/metrics, `gpuscope_agent_cpu_seconds_total{activity}` (the agent's own threads, by activity)
and `gpuscope_agent_bpf_run_seconds_total{program}` (its BPF programs, run in the context of
the threads they observe; present while the kernel accounts BPF run time: `--bpf-stats`).

As a library: table(before, after, seconds, gpus) over two /metrics texts. As a script:
  selftable.py URL SECONDS [GPUS]     scrapes URL (an agent's /metrics) twice, SECONDS apart
  selftable.py --files A B SECONDS [GPUS]   two saved scrapes
and prints the table."""
import re
import sys
import time
import urllib.request

LINE = re.compile(r'^([a-zA-Z_:][\w:]*)(?:\{(.*)\})?\s+(\S+)')
LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def parse(text):
    """{(name, ((label, value), ...)): value} of a Prometheus text exposition."""
    out = {}
    for line in text.splitlines():
        m = LINE.match(line)
        if not m or line.startswith("#"):
            continue
        labels = tuple(sorted(LABEL.findall(m.group(2) or "")))
        try:
            out[(m.group(1), labels)] = float(m.group(3))
        except ValueError:
            pass
    return out


def by_label(metrics, name, label):
    """{label value: summed value} of one family (several ids of one program name add up)."""
    out = {}
    for (n, labels), v in metrics.items():
        if n == name:
            k = dict(labels).get(label, "")
            out[k] = out.get(k, 0.0) + v
    return out


def deltas(before, after, name, label):
    a, b = by_label(before, name, label), by_label(after, name, label)
    return {k: b[k] - a.get(k, 0.0) for k in b}


def table(before, after, seconds, gpus=0):
    """The table (text) and a summary dict: agent CPU and BPF CPU in ms/s and % of one core."""
    before, after = parse(before), parse(after)
    for name, m in (("before", before), ("after", after)):
        if not any(k[0] == "gpuscope_agent_cpu_seconds_total" for k in m):
            raise ValueError("the %s scrape has no gpuscope_agent_cpu_seconds_total" % name)
    act = deltas(before, after, "gpuscope_agent_cpu_seconds_total", "activity")
    bpf = deltas(before, after, "gpuscope_agent_bpf_run_seconds_total", "program")
    runs = deltas(before, after, "gpuscope_agent_bpf_runs_total", "program")
    reads = (after.get(("gpuscope_agent_selfprof_clock_reads_total", ()), 0) -
             before.get(("gpuscope_agent_selfprof_clock_reads_total", ()), 0))
    total = sum(act.values())
    btotal = sum(bpf.values())
    lines = ["%-28s %10s %7s" % ("activity (agent threads)", "CPU ms/s", "share")]
    for k, v in sorted(act.items(), key=lambda kv: -kv[1]):
        if v <= 0 and k != "other":
            continue
        lines.append("%-28s %10.3f %6.1f%%" % (k, 1e3 * v / seconds,
                                                 100 * v / total if total else 0))
    lines.append("%-28s %10.3f %6.1f%%" % ("agent total", 1e3 * total / seconds, 100.0))
    if bpf:
        lines.append("")
        lines.append("%-28s %10s %7s %10s %8s" % ("BPF program (in the observed", "CPU ms/s",
                                                  "share", "runs/s", "us/run"))
        lines.append("  threads' context)")
        for k, v in sorted(bpf.items(), key=lambda kv: -kv[1]):
            if v <= 0:
                continue
            r = runs.get(k, 0)
            lines.append("%-28s %10.3f %6.1f%% %10.1f %8.2f" % (
                k, 1e3 * v / seconds, 100 * v / btotal if btotal else 0, r / seconds,
                1e6 * v / r if r else 0))
        lines.append("%-28s %10.3f %6.1f%%" % ("BPF total", 1e3 * btotal / seconds, 100.0))
    else:
        lines.append("(no BPF run time: run the agent with --bpf-stats)")
    s = {"seconds": seconds, "agent_ms_per_s": 1e3 * total / seconds,
         "agent_core_pct": 100 * total / seconds, "bpf_ms_per_s": 1e3 * btotal / seconds,
         "bpf_core_pct": 100 * btotal / seconds, "clock_reads_per_s": reads / seconds,
         "activities": {k: 1e3 * v / seconds for k, v in act.items()}}
    lines.append("")
    lines.append("agent: %.3f ms/s = %.3f %% of a core; its BPF programs: %.3f ms/s = %.3f %%; "
                 "accounting: %.0f thread-clock reads/s" % (
                     s["agent_ms_per_s"], s["agent_core_pct"], s["bpf_ms_per_s"],
                     s["bpf_core_pct"], s["clock_reads_per_s"]))
    if gpus:
        s["per_gpu_pct"] = (s["agent_core_pct"] + s["bpf_core_pct"]) / gpus
        lines.append("per GPU (%d): agent %.3f %% + BPF %.3f %% = %.3f %% of a core" % (
            gpus, s["agent_core_pct"] / gpus, s["bpf_core_pct"] / gpus, s["per_gpu_pct"]))
    return "\n".join(lines), s


def scrape(url):
    return urllib.request.urlopen(url, timeout=20).read().decode()


def main(argv):
    if len(argv) >= 4 and argv[1] == "--files":
        text, _ = table(open(argv[2]).read(), open(argv[3]).read(), float(argv[4]),
                        int(argv[5]) if len(argv) > 5 else 0)
    elif len(argv) >= 3:
        a = scrape(argv[1])
        t0 = time.monotonic()
        time.sleep(float(argv[2]))
        b = scrape(argv[1])
        text, _ = table(a, b, time.monotonic() - t0, int(argv[3]) if len(argv) > 3 else 0)
    else:
        print(__doc__, file=sys.stderr)
        return 2
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
