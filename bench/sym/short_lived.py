#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Short-lived processes' frames (issue #16): a shell loop of pipelines of short programs (seq,
md5sum, gzip, wc, ls: each lives a few ms to tens of ms) profiled by `gpuscope-agent record`
on the whole machine, two agent builds in turn (e.g. before and after the mmap records,
src/agent/sym/mmapwatch.h). Prints, per round and agent, the samples of the loop's processes
and how many of them hold an `[unknown]` frame, and the agent's CPU seconds.
Usage: bench/sym/short_lived.py AGENT_A AGENT_B [ROUNDS] [SECONDS]  (root)"""
import os, subprocess, sys, tempfile, time

COMMS = ("seq", "md5sum", "gzip", "wc", "ls", "loop.sh")
LOOP = """#!/bin/bash
end=$((SECONDS+%d))
while [ $SECONDS -lt $end ]; do
  seq 1 30000 | md5sum > /dev/null
  gzip -c /usr/bin/bash | wc -c > /dev/null
  ls -la /usr/lib > /dev/null
done
"""


def one(agent, secs, tmp):
    loop = os.path.join(tmp, "loop.sh")
    with open(loop, "w") as f:
        f.write(LOOP % (secs + 30))  # outlives the agent's start
    os.chmod(loop, 0o755)
    w = subprocess.Popen([loop], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(1)
    folded = os.path.join(tmp, "out.folded")
    t0 = os.times()
    subprocess.run([agent, "record", "-d", str(secs), "-F", "199", "-f", folded, "--top", "0"],
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    t1 = os.times()
    w.kill()
    w.wait()
    subprocess.run(["pkill", "-f", loop])
    tot = unk = 0
    for line in open(folded):
        stack, n = line.rsplit(" ", 1)
        if stack.split(";")[0] in COMMS:
            tot += int(n)
            unk += int(n) if "[unknown]" in stack else 0
    cpu = (t1.children_user + t1.children_system) - (t0.children_user + t0.children_system)
    return tot, unk, cpu


def main():
    a, b = sys.argv[1], sys.argv[2]
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 3
    secs = int(sys.argv[4]) if len(sys.argv) > 4 else 6
    sums = {a: [0, 0, 0.0], b: [0, 0, 0.0]}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(rounds):
            for agent in (a, b) if r % 2 == 0 else (b, a):
                tot, unk, cpu = one(agent, secs, tmp)
                for i, v in enumerate((tot, unk, cpu)):
                    sums[agent][i] += v
                print(f"round {r + 1} {agent}: {unk} of {tot} samples with [unknown] "
                      f"({100.0 * unk / max(tot, 1):.1f} %), agent CPU {cpu:.2f} s", flush=True)
    for agent, (tot, unk, cpu) in sums.items():
        print(f"{agent}: {unk} of {tot} ({100.0 * unk / max(tot, 1):.1f} %) with [unknown]; "
              f"agent CPU {cpu / rounds:.2f} s a {secs}-s record")


main()
