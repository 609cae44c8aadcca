#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""One writer per store (issue 36, item 1): a second gpuscope-server on the same --data directory
is refused at start (exit 1 as for a port in use, naming the first one's pid) while the first runs, and loses nothing
of it; once the first is gone, even by kill -9 (the kernel drops its lock), a new one starts on
the same directory and answers everything the first acknowledged."""
import os
import subprocess

from gpuscope_server import SERVER, Server, check, encode, now_ns, run_test, skip_if_unbuilt

skip_if_unbuilt()


def main():
    a = Server().start()
    t = now_ns() - 60 * 10**9
    lines = ["node n1"] + [f"sample {t + i * 10**7} cpu 1 pid=1,comm=w main;f" for i in range(500)]
    code, _ = a.ingest(encode("\n".join(lines) + "\n"))
    check(code == 204, f"ingest {code}")
    r = subprocess.run([SERVER, "--data", a.data, "--listen", "127.0.0.1:0"], timeout=30,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    err = r.stderr.decode()
    check(r.returncode == 1 and "in use by another gpuscope-server" in err and
          f"pid {a.proc.pid}" in err, f"second server: exit {r.returncode}: {err!r}")
    rng = f"from={(t - 10**9) / 1e9:.3f}&to={(t + 10 * 10**9) / 1e9:.3f}"
    check(a.get_json(f"/api/v1/flamegraph?{rng}")["total"] == 500, "the first one answers all")
    a.stop(kill=True)
    b = Server(data=a.data).start()
    try:
        check(b.get_json(f"/api/v1/flamegraph?{rng}")["total"] == 500,
              "after kill -9 a new server on the same directory answers all")
        with open(os.path.join(a.data, "lock")) as f:
            check(f.read().strip() == str(b.proc.pid), "the lock names its holder")
    finally:
        b.stop()


if __name__ == "__main__":
    run_test(main)
