#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""A frame with a function name is stored at its function, file and line, without its address
(`--frame-addresses unnamed`, the default): stacks that differ only in where a sample landed
inside named functions are one stack and one location each, answered the same by name, and the
address is not answered (no "address" in /api/v1/stack, 0 in pprof). A frame without a name keeps
its address, the only thing known of it. `--frame-addresses all` stores every address as sent;
anything else is refused at start."""
import gzip
import subprocess

import pbwire
from gpuscope_server import SERVER, Server, check, encode, find, now_ns, run_test


def batch(now):
    # two samples in `work` at different addresses under `main` called from two places, and
    # one in an unnamed frame; the third and fourth share everything but the unnamed address
    return encode(f"node n\n"
                  f"sample {now} cpu 1 pid=1 main@0x1100;work@0x2010\n"
                  f"sample {now + 1} cpu 1 pid=1 main@0x1180;work@0x2044\n"
                  f"sample {now + 2} cpu 1 pid=1 main@0x1100;@0x7010\n"
                  f"sample {now + 3} cpu 1 pid=1 main@0x1100;@0x7020\n")


def pprof_addresses(body):
    """(function name, address) of every location of a pprof answer."""
    p = pbwire.fields(gzip.decompress(body))
    strings = [v for f, w, v in p if f == 6]
    funcs = {}
    for f, w, v in p:
        if f == 5:
            d = {g: u for g, w2, u in pbwire.fields(v)}
            funcs[d.get(1, 0)] = strings[d.get(2, 0)].decode()
    out = []
    for f, w, v in p:
        if f != 4:
            continue
        d = dict((g, u) for g, w2, u in pbwire.fields(v) if g != 4)
        lines = [dict((g, u) for g, w2, u in pbwire.fields(x)) for g, w2, x in pbwire.fields(v) if g == 4]
        out.append((funcs.get(lines[0].get(1, 0), "") if lines else "", d.get(3, 0)))
    return sorted(out)


def answers(s, now):
    rng = f"from={(now - 10**9) / 1e9:.3f}&to={(now + 10**9) / 1e9:.3f}"
    fg = s.get_json(f"/api/v1/flamegraph?{rng}")
    main_ = find(fg["root"], "main")
    code, body, _ = s.request(f"/api/v1/pprof?{rng}")
    check(code == 200, f"pprof {code}")
    return fg["total"], main_, pprof_addresses(body)


def stored(args, locs, stacks, addrs, what):
    """A server with args, the batch stored: its location and stack counts, the flame graph by
    name and pprof's (function, address) pairs checked. The started server."""
    now = now_ns()
    s = Server(args=args).start()
    try:
        code, body = s.ingest(batch(now))
        check(code == 204, f"batch {code} {body}")
        got = (s.metric("gpuscope_server_locations"), s.metric("gpuscope_server_stacks"))
        check(got == (locs, stacks), f"{what}: {got[0]} locations, {got[1]} stacks "
              f"(want {locs} and {stacks})")
        total, main_, got_addrs = answers(s, now)
        check(total == 4 and main_ and main_["value"] == 4 and find(main_, "work")["value"] == 2,
              f"{what}: the flame graph by name: {main_}")
        check(got_addrs == addrs,
              f"{what}: pprof locations (function, address): {[(n, hex(x)) for n, x in got_addrs]}")
    except Exception:
        s.stop()
        raise
    return s


def main():
    # main, work and the two unnamed frames; stacks main;work and main;@0x7010, main;@0x7020
    s = stored([], 4, 3, [("[unknown]", 0x7010), ("[unknown]", 0x7020), ("main", 0), ("work", 0)],
               "named frames without addresses")
    try:
        frames = {}
        for i in (1, 2, 3):
            for f in s.get_json(f"/api/v1/stack/{i}")["frames"]:
                frames.setdefault(f["function"], set()).add(f.get("address"))
        check(frames == {"work": {None}, "main": {None}, "app+0x7010": {"0x7010"},
                         "app+0x7020": {"0x7020"}},
              f"/api/v1/stack answers an address only for unnamed frames: {frames}")
    finally:
        s.stop()

    s = stored(["--frame-addresses", "all"], 6, 4,
               [("[unknown]", 0x7010), ("[unknown]", 0x7020), ("main", 0x1100), ("main", 0x1180),
                ("work", 0x2010), ("work", 0x2044)], "every address kept")
    try:
        st = s.get_json("/api/v1/stack/1")["frames"]
        check(all("address" in f for f in st), f"addresses answered: {st}")
    finally:
        s.stop()

    r = subprocess.run([SERVER, "--frame-addresses", "some", "--listen", "127.0.0.1:0"],
                       capture_output=True, text=True, timeout=30)
    check(r.returncode == 2 and "--frame-addresses" in r.stderr,
          f"a bad value refused: rc {r.returncode} {r.stderr!r}")
    print("ok: named frames stored without addresses, unnamed ones with; --frame-addresses all "
          "keeps every address")


if __name__ == "__main__":
    run_test(main)
