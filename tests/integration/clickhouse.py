# SPDX-License-Identifier: Apache-2.0
"""Real ClickHouse servers for the tests (Debian's clickhouse-server): each with its own data
folder and free loopback ports, all listed as shards of one remote_servers cluster 'gpuscope',
so that gpuscope-server's Distributed tables spread nodes over them. Started and stopped by the
test; stop() is also registered at exit so no server outlives a failed test."""
import atexit
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request

BIN = shutil.which("clickhouse-server") or "/usr/sbin/clickhouse-server"
CLUSTER = "gpuscope"


def available():
    return os.access(BIN, os.X_OK)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


USERS = """<?xml version="1.0"?>
<yandex>
  <profiles><default><max_memory_usage>2000000000</max_memory_usage></default></profiles>
  <users><default><password>{password}</password><networks><ip>127.0.0.1</ip></networks>
    <profile>default</profile><quota>default</quota></default></users>
  <quotas><default><interval><duration>3600</duration><queries>0</queries><errors>0</errors>
    <result_rows>0</result_rows><read_rows>0</read_rows><execution_time>0</execution_time>
  </interval></default></quotas>
</yandex>
"""

CONFIG = """<?xml version="1.0"?>
<yandex>
  <logger><level>warning</level><log>{dir}/server.log</log><errorlog>{dir}/error.log</errorlog>
    <size>10M</size><count>1</count></logger>
  <listen_host>127.0.0.1</listen_host>
  <http_port>{http}</http_port>
  <tcp_port>{tcp}</tcp_port>
  <interserver_http_port>{inter}</interserver_http_port>
  <path>{dir}/data/</path>
  <tmp_path>{dir}/tmp/</tmp_path>
  <user_files_path>{dir}/user_files/</user_files_path>
  <format_schema_path>{dir}/format_schemas/</format_schema_path>
  <users_config>{dir}/users.xml</users_config>
  <default_profile>default</default_profile>
  <default_database>default</default_database>
  <timezone>UTC</timezone>
  <mark_cache_size>67108864</mark_cache_size>
  <uncompressed_cache_size>67108864</uncompressed_cache_size>
  <compression><case><method>zstd</method></case></compression>
  <remote_servers><{cluster}>{shards}</{cluster}></remote_servers>
</yandex>
"""


class ClickHouse:
    """One clickhouse-server process. start() waits for /ping; stop(kill) ends it."""

    def __init__(self, root, name, password=""):
        self.dir = os.path.join(root, name)
        os.makedirs(self.dir, exist_ok=True)
        self.http, self.tcp, self.inter = free_port(), free_port(), free_port()
        self.password = password
        self.proc = None
        self.url = f"http://127.0.0.1:{self.http}"

    def configure(self, shards):
        # Distributed tables reach the other shards as this user, with its password.
        shard_xml = "".join(f"<shard><replica><host>127.0.0.1</host><port>{p}</port>"
                            f"<user>default</user><password>{self.password}</password>"
                            "</replica></shard>" for p in shards)
        with open(os.path.join(self.dir, "config.xml"), "w") as f:
            f.write(CONFIG.format(dir=self.dir, http=self.http, tcp=self.tcp, inter=self.inter,
                                  cluster=CLUSTER, shards=shard_xml))
        with open(os.path.join(self.dir, "users.xml"), "w") as f:
            f.write(USERS.format(password=self.password))

    def start(self, timeout=30):
        self.log = open(os.path.join(self.dir, "stdout.log"), "ab")
        self.proc = subprocess.Popen([BIN, "--config-file=" + os.path.join(self.dir, "config.xml")],
                                     stdout=self.log, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"clickhouse-server exited {self.proc.returncode}: "
                                   f"{self.logtext()}")
            try:
                with urllib.request.urlopen(self.url + "/ping", timeout=1) as r:
                    if r.read().strip() == b"Ok.":
                        return self
            except OSError:
                time.sleep(0.1)
        raise RuntimeError(f"clickhouse-server on {self.url} not up in {timeout}s")

    def stop(self, kill=False):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL if kill else signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def query(self, sql):
        url = self.url + "/?" + urllib.parse.urlencode({"password": self.password})
        req = urllib.request.Request(url, data=sql.encode(), method="POST")
        try:
            with urllib.request.urlopen(req, timeout=60) as r:
                return r.read().decode()
        except urllib.error.HTTPError as e:	# ClickHouse says why in the body
            raise RuntimeError("ClickHouse %s: %s\n  for: %s" % (
                e.code, e.read().decode(errors="replace")[:800], sql[:300])) from None

    def logtext(self):
        out = []
        for name in ("error.log", "stdout.log"):
            try:
                with open(os.path.join(self.dir, name), "rb") as f:
                    out.append(f.read().decode(errors="replace")[-2000:])
            except OSError:
                pass
        return "\n".join(out)


class Cluster:
    """n ClickHouse servers, each a shard of cluster 'gpuscope'."""

    def __init__(self, n=2, password=""):
        self.root = tempfile.mkdtemp(prefix="gpuscope-ch-")
        self.servers = [ClickHouse(self.root, f"shard{i + 1}", password) for i in range(n)]
        for s in self.servers:
            s.configure([x.tcp for x in self.servers])
        atexit.register(self.stop)

    def start(self):
        for s in self.servers:
            s.start()
        return self

    def stop(self):
        for s in self.servers:
            s.stop()

    def cleanup(self):
        self.stop()
        shutil.rmtree(self.root, ignore_errors=True)

    def urls(self):
        return [s.url for s in self.servers]

    def server_args(self, database):
        args = ["--store", "clickhouse", "--clickhouse-cluster", CLUSTER,
                "--clickhouse-database", database]
        for u in self.urls():
            args += ["--clickhouse-url", u]
        return args
