#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""--export-queries function regexes use the selectors' engine and limits (PCRE2, RE2 syntax,
anchored, match limits): a regex bomb in the file is refused at start in under 1 s with exit 2
and an error naming the file, the line and why (50 000 nested '[', a pattern that exhausts the
match limits on a frame-name-sized input, a construct RE2 lacks, bad syntax); the issue's
256 x '(.{1,100}){1,100}' (2.5 GB with glibc regcomp) starts with peak RSS under 64 MB."""
import os
import subprocess
import tempfile
import time

from gpuscope_server import SERVER, check, skip_if_unbuilt

skip_if_unbuilt()
tmp = tempfile.mkdtemp(prefix="gpuscope-exre-")


def qfile(name, queries):
    path = os.path.join(tmp, name + ".yaml")
    with open(path, "w") as f:
        f.write("queries:\n")
        for i, fn in enumerate(queries):
            f.write(f"  - name: q{i}\n    function: '{fn}'\n")
    return path


def start(path, data):
    """(rc or None if it started, seconds to exit or to listen, stderr text, peak RSS KB)."""
    cmd = [SERVER, "--data", os.path.join(tmp, data), "--listen", "127.0.0.1:0",
           "--export-queries", path]
    t0 = time.monotonic()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    line = p.stdout.readline().decode()
    dt = time.monotonic() - t0
    hwm = 0
    if line.startswith("listening on "):
        with open(f"/proc/{p.pid}/status") as f:
            hwm = int(next(ln for ln in f if ln.startswith("VmHWM:")).split()[1])
        p.terminate()
        p.wait(timeout=30)
        return None, dt, p.stderr.read().decode(errors="replace"), hwm
    p.wait(timeout=30)
    return p.returncode, dt, p.stderr.read().decode(errors="replace"), hwm


def main():
    bombs = [("nested", ["[" * 50000], "longer than"),
             ("backtrack", ["ok", "(a|aa)+"], "match limits"),
             ("poly", ["(.*a){20}"], "match limits"),
             ("lookahead", ["(?=x)x"], "not supported"),
             ("syntax", ["foo("], "missing closing parenthesis")]
    for name, qs, why in bombs:
        rc, dt, err, _ = start(qfile(name, qs), name)
        print(f"{name}: exit {rc} in {dt * 1e3:.0f} ms: {err.strip()[:160]}")
        check(rc == 2, f"{name}: exit {rc}, want 2 ({err!r})")
        check(dt < 1.0, f"{name}: refused after {dt:.2f} s, want < 1 s")
        check(f"{name}.yaml:{2 * len(qs) + 1}: function regex" in err,
              f"{name}: error names no file:line: {err!r}")
        check(why in err, f"{name}: error says not '{why}': {err!r}")
    # The file: 256 queries of a repetition glibc expanded to 2.5 GB at start.
    rc, dt, err, hwm = start(qfile("wide", ["(.{1,100}){1,100}"] * 256), "wide")
    print(f"wide: started={rc is None} in {dt * 1e3:.0f} ms, peak RSS {hwm / 1024:.1f} MiB")
    check(rc is None, f"wide: exit {rc}: {err!r}")
    check(hwm < 64 * 1024, f"wide: peak RSS {hwm} KB, want < 64 MiB")
    check(dt < 5.0, f"wide: listening after {dt:.2f} s")
    print("PASS")


try:
    main()
except AssertionError as e:
    print(f"FAIL {e}")
    raise SystemExit(1)
