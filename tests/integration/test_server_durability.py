#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""kill -9 of gpuscope-server in the middle of concurrent ingests loses no acknowledged batch and
stores no partial one: every batch that got its 204 is there after a restart on the same data,
and every stored batch is whole (each carries a unique label and a known number of samples)."""
import shutil
import tempfile
import threading
import time

from gpuscope_server import Server, check, encode, now_ns, running, skip_if_unbuilt

skip_if_unbuilt()
PER_BATCH = 40
WRITERS = 4


def make_batches(round_, n, t0):
    """n gzip'd batches from one batchgen run ('write' ends each batch)."""
    tmp = tempfile.mkdtemp(prefix="gpuscope-dur-")
    lines = [f"node dur-{round_}"]
    for k in range(n):
        seq = f"{round_}-{k}"
        for i in range(PER_BATCH):
            lines.append(f"sample {t0 + k * 1_000_000 + i} cpu 1 seq={seq},pid={k % 7} "
                         f"main;work{i % 5};leaf{(k + i) % 11}")
        lines.append(f"metric m seq={seq} {t0 + k} {k}")
        lines.append(f"write {tmp}/{k}")
    encode("\n".join(lines) + "\n", "gzip")
    out = []
    for k in range(n):
        with open(f"{tmp}/{k}", "rb") as f:
            out.append((f"{round_}-{k}", f.read()))
    shutil.rmtree(tmp)
    return out


def run_round(s, round_, batches, kill_after):
    acked, lock = set(), threading.Lock()
    queue = list(batches)

    def writer():
        while True:
            with lock:
                if not queue:
                    return
                seq, raw = queue.pop(0)
            try:
                code, _ = s.ingest(raw, "gzip")
            except OSError:
                return  # the server died under us: this batch was not acknowledged
            if code == 204:
                with lock:
                    acked.add(seq)

    threads = [threading.Thread(target=writer) for _ in range(WRITERS)]
    for t in threads:
        t.start()
    while len(acked) < kill_after:
        time.sleep(0.005)
    s.stop(kill=True)
    for t in threads:
        t.join()
    return acked


def main():
    s = Server()
    t0 = (now_ns() // 10**9 - 600) * 10**9
    with running(s):
        for round_ in range(2):
            batches = make_batches(round_, 150, t0 + round_ * 10**9)
            acked = run_round(s, round_, batches, kill_after=30 + 20 * round_)
            check(len(acked) < len(batches), f"round {round_}: killed mid-ingest ({len(acked)} acked)")
            s.start()
            sel = '{node="dur-%d"}' % round_
            import urllib.parse
            v = s.get_json("/api/v1/label/seq/values?selector=" + urllib.parse.quote(sel))["values"]
            stored = set(v)
            missing = acked - stored
            check(not missing, f"round {round_}: acknowledged but lost: {sorted(missing)[:10]}")
            fg = s.get_json(f"/api/v1/flamegraph?from={t0 / 1e9 - 60}&to={t0 / 1e9 + 600}"
                            f"&selector={urllib.parse.quote(sel)}")
            check(fg["total"] == PER_BATCH * len(stored),
                  f"round {round_}: whole batches only: {fg['total']} samples for "
                  f"{len(stored)} batches")
            print(f"round {round_}: {len(acked)} acknowledged, {len(stored)} stored "
                  f"({len(stored) - len(acked)} committed but unacknowledged), all whole")
    print("ok")


main()
