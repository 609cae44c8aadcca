#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
# CPU cost of the NVML poller per GPU, and the achieved interval of each source, with the
# replay library (looping the H200 trace) on this machine: 1 GPU and 8 GPUs, default rates and
# the "every sample" rates, with and without the cadences that follow what changes
# (--nvml-backoff 1: every source at its interval), configurations interleaved within each round. On the GPU machine
# the same figures come from tests/device/nvml_h200.sh (real driver).
# Usage: bench/nvml/run.py [ROUNDS] [SECONDS]
import os
import re
import statistics
import subprocess
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
AGENT = os.path.join(ROOT, ".output", "gpuscope-agent")
REPLAY = os.path.join(ROOT, ".output", "tests", "nvml", "libnvidia-ml.so.1")
DATA = os.path.join(ROOT, "tests", "data", "nvml")
rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
secs = sys.argv[2] if len(sys.argv) > 2 else "10"
FAST = ["--nvml-samples-interval", "100ms", "--nvml-process-interval", "200ms",
        "--nvml-fields-interval", "1s"]
configs = [
    ("1 GPU, defaults", "h200.trace.gz", []),
    ("1 GPU, every interval (--nvml-backoff 1)", "h200.trace.gz", ["--nvml-backoff", "1"]),
    ("8 GPUs + 2 MIG, defaults", "h200x8.trace.gz", []),
    ("8 GPUs + 2 MIG, every interval", "h200x8.trace.gz", ["--nvml-backoff", "1"]),
    ("1 GPU, every-sample rates", "h200.trace.gz", FAST),
]
res = {c[0]: [] for c in configs}
src = {c[0]: {} for c in configs}
for r in range(rounds):
    for name, trace, extra in configs:
        env = dict(os.environ, GPUSCOPE_NVML_REPLAY=os.path.join(DATA, trace),
                   GPUSCOPE_NVML_REPLAY_LOOP="1")
        out = subprocess.run([AGENT, "nvml-record", "--no-record", "--duration", secs + "s",
                              "--nvml-library", REPLAY] + extra, env=env, capture_output=True,
                             text=True).stderr
        m = re.search(r"steady state.*?: ([\d.]+)% of one core, ([\d.]+)% per device", out)
        if not m:
            print(out)
            sys.exit(1)
        res[name].append(float(m.group(2)))
        for s in re.finditer(r"source (\w+)\s+set\s+([\d.]+) ms\s+achieved\s+([\d.]+) ms.*?"
                             r"([\d.]+) us/run", out):
            src[name].setdefault(s.group(1), []).append((float(s.group(2)), float(s.group(3)),
                                                         float(s.group(4))))
        print(f"round {r + 1} {name}: {m.group(2)}% of one core per device", flush=True)
print()
base = statistics.median(res[configs[0][0]])
print("| configuration | poller CPU per device, % of one core (median) | ratio to 1 GPU defaults |")
print("| --- | --- | --- |")
for name, _, _ in configs:
    med = statistics.median(res[name])
    print(f"| {name} | {med:.3f} (runs: {', '.join(f'{x:.3f}' for x in res[name])}) | "
          f"{med / base:.2f} |")
print()
print("| configuration | source | set ms | achieved ms (median) | us per run (median) |")
print("| --- | --- | --- | --- | --- |")
for name, _, _ in configs:
    for s, v in src[name].items():
        print(f"| {name} | {s} | {v[0][0]:.0f} | {statistics.median(x[1] for x in v):.2f} | "
              f"{statistics.median(x[2] for x in v):.1f} |")
