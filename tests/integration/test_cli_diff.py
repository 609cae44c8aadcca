#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""`gpuscope diff` through a real server (issue 35 item 4): a fixture of two ranges of one
process (matmul's share halves, load's grows, save appears, nothing else changes) and a second
process. The terminal table of two ranges and of two selectors, and the folded output, match
tests/integration/data/cli_diff.txt (GPUSCOPE_UPDATE_GOLDEN=1 rewrites it; the two range lines
hold @A@/@B@ for the fixture's times); --pprof writes both sides as profiles whose sample sums
are the sides' totals; a diff without a second side is refused (exit 2)."""
import gzip
import os
import subprocess
import tempfile
import time

from gpuscope_server import (ROOT, Server, check, encode, now_ns, pprof_values, run_test,
                             skip_if_unbuilt)

skip_if_unbuilt()
CLI = os.path.join(ROOT, ".output", "gpuscope")
GOLDEN = os.path.join(ROOT, "tests", "integration", "data", "cli_diff.txt")
T = (now_ns() // 60_000_000_000 - 30) * 60_000_000_000  # a minute boundary, 30 min ago
MS = 1_000_000
B0 = T + 60_000 * MS  # range B starts a minute later


def script():
    lines = ["node n1"]
    a = ["main;step;matmul"] * 60 + ["main;step;load"] * 30 + ["main"] * 10
    b = ["main;step;matmul"] * 30 + ["main;step;load"] * 50 + ["main;step;save"] * 10 + \
        ["main"] * 10
    for i, fr in enumerate(a):
        lines.append(f"sample {T + i * 5 * MS} cpu 1 pid=1,comm=train {fr}")
    for i, fr in enumerate(b):
        lines.append(f"sample {B0 + i * 5 * MS} cpu 1 pid=1,comm=train {fr}")
    for i in range(40):
        lines.append(f"sample {T + i * 5 * MS + 1} cpu 1 pid=2,comm=other main;idle_loop")
    return "\n".join(lines) + "\n"


def when(ns, ns2):
    a, b = time.gmtime(ns // 10**9), time.gmtime(ns2 // 10**9)
    same = a.tm_yday == b.tm_yday and a.tm_year == b.tm_year
    return "%s → %s UTC" % (time.strftime("%Y-%m-%d %H:%M:%S", a),
                            time.strftime("%H:%M:%S" if same else "%Y-%m-%d %H:%M:%S", b))


def cli(s, *args):
    env = dict(os.environ)
    env.pop("GPUSCOPE_SERVER", None)
    env.pop("GPUSCOPE_TOKEN_FILE", None)
    return subprocess.run([CLI, *args, "--server", s.url], capture_output=True, text=True,
                          timeout=60, env=env)


def main():
    s = Server()
    s.start()
    code, body = s.ingest(encode(script()))
    check(code == 204, f"ingest: {code} {body}")
    ra = ["--from", f"{T / 1e9:.3f}", "--to", f"{(T + 1000 * MS) / 1e9:.3f}"]
    rb = ["--from2", f"{B0 / 1e9:.3f}", "--to2", f"{(B0 + 1000 * MS) / 1e9:.3f}"]
    sel = ["--selector", '{pid="1"}']
    out = []
    runs = [("ranges", ra + rb + sel), ("selectors", ra + sel + ["--selector2", '{pid="2"}']),
            ("folded", ra + rb + sel + ["--folded"])]
    for name, args in runs:
        r = cli(s, "diff", *args)
        check(r.returncode == 0 and not r.stderr, f"diff {name}: exit {r.returncode} {r.stderr}")
        text = r.stdout.replace(when(T, T + 1000 * MS), "@A@")
        text = text.replace(when(B0, B0 + 1000 * MS), "@B@")
        out.append(f"## gpuscope diff ({name})\n{text}")
    got = "\n".join(out)
    if os.environ.get("GPUSCOPE_UPDATE_GOLDEN"):
        with open(GOLDEN, "w") as f:
            f.write(got)
    with open(GOLDEN) as f:
        want = f.read()
    check(got == want, f"diff output matches {GOLDEN}:\n{got}")
    # the two sides as pprof, for go tool pprof -diff_base
    with tempfile.TemporaryDirectory() as d:
        pre = os.path.join(d, "cmp")
        r = cli(s, "diff", *ra, *rb, *sel, "--pprof", pre)
        check(r.returncode == 0 and f"-diff_base {pre}-a.pb.gz {pre}-b.pb.gz" in r.stdout,
              f"--pprof: {r.returncode} {r.stdout} {r.stderr}")
        sums = []
        for side in "ab":
            with open(f"{pre}-{side}.pb.gz", "rb") as f:
                vals = pprof_values(f.read())
            sums.append(sum(vals))  # samples/count only: the fixture has no period
        check(sums == [100, 100], f"the sides' sample counts {sums}")
    r = cli(s, "diff", *ra)
    check(r.returncode == 2 and "second side" in r.stderr, f"no second side: {r.returncode}")
    r = cli(s, "diff", *ra, "--from2", "x")
    check(r.returncode == 2 and "--from2" in r.stderr, f"bad --from2: {r.returncode}")
    print(got)


if __name__ == "__main__":
    run_test(main, None)
