#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The SQLite store's write-ahead log is emptied when ingest pauses (docs/server.md "Storage",
Durability): after a batch the WAL goes back to 0 bytes, so /metrics' store bytes are the
database's alone; a reader still using the WAL's frames keeps them (the checkpoint never waits
for it, and ingest goes on meanwhile), and once it ends the WAL is emptied; a server killed
(SIGKILL) right after its 204s loses nothing."""
import os
import sqlite3
import time

from gpuscope_server import Server, check, encode, now_ns, running, skip_if_unbuilt, wait

skip_if_unbuilt()


def batch(t, n, pid):
    return encode("node n\n" + "".join(f"sample {t + i} cpu 1 pid={pid} main;f{i % 7}\n"
                                       for i in range(n)))


def main():
    t = now_ns()
    s = Server()
    db = os.path.join(s.data, "gpuscope.db")
    wal = db + "-wal"
    size = lambda p: os.path.getsize(p) if os.path.exists(p) else 0
    with running(s):
        code, body = s.ingest(batch(t, 500, 1))
        check(code == 204, f"ingest {code} {body}")
        check(wait(lambda: size(wal) == 0 and s.metric("gpuscope_server_store_wal_truncations_total") >= 1),
              f"WAL emptied after the batch: {size(wal)} bytes")
        check(s.metric("gpuscope_server_store_bytes") == size(db),
              f"store bytes {s.metric('gpuscope_server_store_bytes')} = the database's {size(db)}")
        # a reader in a transaction: the next batch's frames stay in the WAL while it lasts
        r = sqlite3.connect(db, isolation_level=None)
        r.execute("BEGIN")
        check(r.execute("SELECT count(*) FROM chunks").fetchone()[0] >= 1, "reader sees the chunk")
        code, body = s.ingest(batch(t + 10**6, 300, 2))
        check(code == 204, f"ingest beside a reader {code} {body}")
        n0 = s.metric("gpuscope_server_store_wal_truncations_total")
        time.sleep(5)
        check(size(wal) > 0, "the WAL keeps the frames a reader may need")
        code, body = s.ingest(batch(t + 2 * 10**6, 200, 3))
        check(code == 204, f"ingest while the checkpoint cannot finish {code} {body}")
        r.execute("COMMIT")
        r.close()
        check(wait(lambda: size(wal) == 0 and s.metric("gpuscope_server_store_wal_truncations_total") > n0),
              f"WAL emptied once the reader ended: {size(wal)} bytes")
        code, body = s.ingest(batch(t + 3 * 10**6, 100, 4))
        check(code == 204, f"last ingest {code} {body}")
        s.stop(kill=True)	# right after the 204, before any idle checkpoint
        s.start()
        fg = s.get_json(f"/api/v1/flamegraph?from={(t - 10**9) / 1e9:.3f}&to={(t + 10**10) / 1e9:.3f}")
        check(fg["total"] == 1100, f"every sample after SIGKILL: {fg['total']}")
    print("ok")


main()
