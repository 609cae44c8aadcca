# SPDX-License-Identifier: Apache-2.0
"""Helpers for the server's integration tests: start a real gpuscope-server on a free loopback
port, build batches with tests/tools/batchgen, and talk HTTP with the standard library only."""
import contextlib
import gzip
import json
import os
import re
import sqlite3
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

import pbwire

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
SERVER = os.path.join(ROOT, ".output", "gpuscope-server")
BATCHGEN = os.path.join(ROOT, ".output", "tests", "tools", "batchgen")


def skip_if_unbuilt():
    for p in (SERVER, BATCHGEN):
        if not os.access(p, os.X_OK):
            print(f"SKIP: {p} not built")
            sys.exit(77)


class Server:
    def __init__(self, data=None, args=(), token=None, store_args=None):
        """store_args: the backend's flags (default: --data DIR, the SQLite store)."""
        self.tmp = tempfile.mkdtemp(prefix="gpuscope-srv-")
        self.data = data or os.path.join(self.tmp, "data")
        self.store_args = store_args or ["--data", self.data]
        self.token = token
        self.args = list(args)
        self.proc = None
        self.url = None

    def start(self):
        cmd = [SERVER] + self.store_args + ["--listen", "127.0.0.1:0"] + self.args
        if self.token:
            tf = os.path.join(self.tmp, "token")
            with open(tf, "w") as f:
                f.write(self.token + "\n")
            cmd += ["--token-file", tf]
        self.log = open(os.path.join(self.tmp, "server.log"), "ab")
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=self.log)
        line = self.proc.stdout.readline().decode()
        if not line.startswith("listening on "):
            raise RuntimeError(f"server did not start: {line!r}, log: {self.logtext()}")
        self.url = line.split()[-1]
        return self

    def logtext(self):
        try:
            with open(os.path.join(self.tmp, "server.log"), "rb") as f:
                return f.read().decode(errors="replace")[-4000:]
        except OSError:
            return ""

    def stop(self, kill=False):
        if self.proc and self.proc.poll() is None:
            if kill:
                self.proc.kill()
            else:
                self.proc.terminate()
            self.proc.wait(timeout=30)
        self.proc = None

    def request(self, path, body=None, headers=None, method=None, token=True):
        h = dict(headers or {})
        if self.token and token is True:
            h["Authorization"] = "Bearer " + self.token
        elif isinstance(token, str):
            h["Authorization"] = "Bearer " + token
        req = urllib.request.Request(self.url + path, data=body, headers=h, method=method)
        try:
            with urllib.request.urlopen(req, timeout=60) as r:
                return r.status, r.read(), dict(r.headers)
        except urllib.error.HTTPError as e:
            return e.code, e.read(), dict(e.headers)

    def get_json(self, path, want=200):
        code, body, _ = self.request(path)
        if code != want:
            raise AssertionError(f"GET {path}: HTTP {code}: {body[:300]!r}")
        return json.loads(body)

    def ingest(self, raw, encoding=None):
        h = {"Content-Type": "application/x-protobuf"}
        if encoding:
            h["Content-Encoding"] = encoding
        code, body, _ = self.request("/api/v1/ingest", body=raw, headers=h, method="POST")
        return code, body

    def metric(self, name):
        code, body, _ = self.request("/metrics")
        assert code == 200, code
        for line in body.decode().splitlines():
            key, _, val = line.rpartition(" ")
            if key == name:
                return float(val)
        raise KeyError(name)

    def cpu_seconds(self):
        """The server process's CPU time so far (user + system, from /proc/PID/stat)."""
        with open(f"/proc/{self.proc.pid}/stat") as f:
            v = f.read().rsplit(")", 1)[1].split()
        return (int(v[11]) + int(v[12])) / os.sysconf("SC_CLK_TCK")

    def wait_rollups(self, want, timeout=3600):
        """Seconds until the efficiency rollup has `want` hours done and none waiting; None
        past timeout."""
        t0 = time.time()
        while time.time() - t0 < timeout:
            done = self.metric('gpuscope_server_efficiency_hourly_rollups{state="done"}')
            waiting = self.metric('gpuscope_server_efficiency_hourly_rollups{state="waiting"}')
            if done >= want and waiting == 0:
                return time.time() - t0
            time.sleep(0.5)
        return None


@contextlib.contextmanager
def running(server):
    """Starts server and yields it; on an error prints the server's log to stderr (and re-raises);
    stops the server in any case."""
    try:
        server.start()
        yield server
    except Exception:
        print(server.logtext(), file=sys.stderr)
        raise
    finally:
        server.stop()


def encode(script, encoding="none"):
    """Runs batchgen encode on a script (see tests/tools/batchgen.c) and returns the bytes."""
    r = subprocess.run([BATCHGEN, "encode", "--encoding", encoding], input=script.encode(),
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, check=False)
    if r.returncode:
        raise RuntimeError(f"batchgen: {r.stderr.decode()}")
    return r.stdout


def now_ns():
    return time.time_ns()


def find(node, name):
    """The child of a flame graph node with that name, or None."""
    for c in node.get("children", []):
        if c["name"] == name:
            return c
    return None


def wait(cond, timeout=60):
    """Polls cond() until it holds (True) or timeout seconds passed (False)."""
    end = time.time() + timeout
    while time.time() < end:
        if cond():
            return True
        time.sleep(0.2)
    return False


def pprof_values(body):
    """The sample values of a pprof answer (gzip'ed Profile; field 2 samples, their field 2
    values), in the answer's order."""
    out = []
    for f, w, v in pbwire.fields(gzip.decompress(body)):
        if f != 2 or w != 2:
            continue
        for g, w2, u in pbwire.fields(v):
            if g == 2 and w2 == 0:
                out.append(u)
            elif g == 2 and w2 == 2:  # packed
                out.extend(pbwire.varints(u))
    return out


def check(cond, what):
    if not cond:
        raise AssertionError(what)


def run_test(main, server=None):
    """Runs main(): a failed check prints "FAIL what" and exits 1. With server (the Server main
    uses): its log printed on any failure, and it is stopped at the end."""
    try:
        main()
    except Exception as e:
        if server is not None:
            print(server.logtext(), file=sys.stderr)
        if isinstance(e, AssertionError):
            print(f"FAIL {e}")
            sys.exit(1)
        raise
    finally:
        if server is not None:
            server.stop()


# Stores of an older schema, written by hand: the store's own byte formats, and the migration.
# The SQLite store's current version, as src/server/store/sqlite/sqlite.h has it.
with open(os.path.join(os.path.dirname(os.path.abspath(__file__)),
                       "../../src/server/store/sqlite/sqlite.h")) as _f:
    STORE_SCHEMA = int(re.search(r"#define SQ_SCHEMA_VERSION (\d+)", _f.read())[1])


def old_store(ddl):
    """A Server (not started, --retention 2d) over a new store made with an older schema's DDL,
    and a connection to that store for the test to fill; the test commits and closes it."""
    s = Server(args=["--retention", "2d"])
    os.makedirs(s.data)
    db = sqlite3.connect(os.path.join(s.data, "gpuscope.db"))
    db.executescript(ddl)
    return s, db


def check_migrated(s, old):
    """The started server's log says it migrated its store from schema old to STORE_SCHEMA."""
    log = s.logtext()
    check(f"has schema {old}: migrating to {STORE_SCHEMA}" in log and
          f"migrated to schema {STORE_SCHEMA}" in log, f"migration logged: {log}")


def migrated_db(s):
    """A connection to the stopped server's store, which the migration marked STORE_SCHEMA."""
    db = sqlite3.connect(os.path.join(s.data, "gpuscope.db"))
    check(db.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone()[0] == STORE_SCHEMA,
          f"schema {STORE_SCHEMA}")
    return db


def uvarint(v):
    out = bytearray()
    while v >= 0x80:
        out.append(v & 0x7F | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def svarint(v):
    return uvarint(v << 1 if v >= 0 else (-v << 1) - 1)


def pairs_blob(pairs):
    """Label-set pairs or attrs as the store keeps them: name\0value\0..."""
    return b"".join(k.encode() + b"\0" + v.encode() + b"\0" for k, v in pairs)
