"""A real high-availability PostgreSQL for the failover drill: one etcd node and two PostgreSQL 15 nodes under
Patroni 3 (Debian's etcd-server and patroni), all on 127.0.0.1 with free ports, in a throwaway folder.

DCS settings as measured on this machine (DESIGN.md "Deployment life"): ttl 10, loop_wait 1, retry_timeout 4,
synchronous mode, pg_rewind with wal_log_hints, pg_hba trust for 127.0.0.1 (replication too). Everything is
waited for through Patroni's REST API (`GET /cluster`), never by sleeping.

PostgreSQL refuses to run as root, so as root Patroni runs as the `postgres` user (Popen's user=, which is
runuser without the extra process in between: the pid the drill SIGKILLs is Patroni's own)."""
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.request

from postgres_server import _bin_directory
from relayproc import free_port, wait_until

SCOPE = "kumapush-drill"


def _get_json(url, timeout=2.0):
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return json.loads(response.read())
    except (OSError, ValueError):
        return None


class PatroniNode:
    def __init__(self, cluster, name):
        self.cluster = cluster
        self.name = name
        self.pg_port = free_port()
        self.rest_port = free_port()
        self.directory = os.path.join(cluster.directory, name)
        self.config = os.path.join(cluster.directory, f"{name}.yml")
        self.process = None
        self.log = None
        self.dropped = False

    @property
    def rest(self):
        return f"http://127.0.0.1:{self.rest_port}"

    def write_config(self):
        sockets = os.path.join(self.cluster.directory, f"{self.name}-sock")
        os.makedirs(sockets, exist_ok=True)
        self.cluster.give_to_postgres(sockets)
        # JSON is YAML: no YAML library needed to write Patroni's configuration.
        config = {
            "scope": SCOPE, "name": self.name,
            "log": {"level": "INFO"},
            "restapi": {"listen": f"127.0.0.1:{self.rest_port}", "connect_address": f"127.0.0.1:{self.rest_port}"},
            "etcd3": {"hosts": [f"127.0.0.1:{self.cluster.etcd_port}"]},
            "bootstrap": {
                "dcs": {
                    "ttl": 10, "loop_wait": 1, "retry_timeout": 4, "synchronous_mode": True,
                    "postgresql": {"use_pg_rewind": True, "use_slots": True,
                                   "parameters": {"wal_log_hints": "on", "max_connections": 200, "fsync": "off",
                                                  "wal_keep_size": "256MB"}},
                },
                "initdb": [{"encoding": "UTF8"}, {"locale": "C"}, "no-sync"],
            },
            "postgresql": {
                "listen": f"127.0.0.1:{self.pg_port}", "connect_address": f"127.0.0.1:{self.pg_port}",
                "data_dir": self.directory, "bin_dir": self.cluster.bin,
                "pgpass": os.path.join(self.cluster.directory, f"{self.name}.pgpass"),
                "authentication": {"superuser": {"username": "postgres"}, "replication": {"username": "postgres"},
                                   "rewind": {"username": "postgres"}},
                "parameters": {"unix_socket_directories": sockets},
                "pg_hba": ["local all all trust", "host all all 127.0.0.1/32 trust",
                           "host replication all 127.0.0.1/32 trust"],
            },
        }
        with open(self.config, "w") as file:
            json.dump(config, file, indent=1)
        self.cluster.give_to_postgres(self.config)

    def start(self):
        if self.log is None:
            self.log = open(os.path.join(self.cluster.directory, f"{self.name}.log"), "ab")
        user = {"user": "postgres", "group": "postgres", "extra_groups": []} if os.getuid() == 0 else {}
        self.process = subprocess.Popen(["patroni", self.config], stdout=self.log, stderr=self.log,
                                        stdin=subprocess.DEVNULL, cwd=self.cluster.directory,
                                        env={"PATH": os.environ.get("PATH", ""), "HOME": self.cluster.directory,
                                             "LC_ALL": "C.UTF-8"}, **user)
        return self

    def postmaster_pid(self):
        try:
            with open(os.path.join(self.directory, "postmaster.pid")) as file:
                return int(file.readline())
        except (OSError, ValueError):
            return None

    def crash(self):
        """A host crash: SIGKILL to Patroni, the postmaster and every PostgreSQL process under it at once, so no
        process is left to close anything cleanly (the kernel still closes their sockets: see `drop_packets`)."""
        victims = [self.process.pid]
        postmaster = self.postmaster_pid()
        if postmaster:
            victims.append(postmaster)
            try:
                with open(f"/proc/{postmaster}/task/{postmaster}/children") as file:
                    victims += [int(pid) for pid in file.read().split()]
            except OSError:
                pass
        for pid in victims:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.process.wait(timeout=10)
        wait_until(lambda: not os.path.exists(f"/proc/{postmaster}") if postmaster else True, timeout=10,
                   what=f"{self.name}'s postmaster to be gone")

    def drop_packets(self):
        """A silent host loss: every packet to or from this node's ports dropped on the loopback, so nothing the
        relay holds is closed or reset, and a new connection's SYN goes unanswered."""
        for port in (self.pg_port, self.rest_port):
            for rule in (["--dport", str(port)], ["--sport", str(port)]):
                subprocess.run(["iptables", "-I", "INPUT", "-p", "tcp", *rule, "-j", "DROP"], check=True)
        self.dropped = True

    def restore_packets(self):
        if not self.dropped:
            return
        for port in (self.pg_port, self.rest_port):
            for rule in (["--dport", str(port)], ["--sport", str(port)]):
                subprocess.run(["iptables", "-D", "INPUT", "-p", "tcp", *rule, "-j", "DROP"], check=False)
        self.dropped = False

    def stop(self):
        self.restore_packets()
        if self.process is not None and self.process.poll() is None:
            self.crash()
        if self.log is not None:
            self.log.close()


class PatroniCluster:
    """etcd + two Patroni nodes. `url(db)` is the relay's two-host DATABASE_URL."""

    def __init__(self):
        self.bin = _bin_directory()
        # Short, and outside pytest's root-only tmp folder: the postgres user must reach it, sockets need short paths.
        self.directory = tempfile.mkdtemp(prefix="kp-drill-", dir="/tmp")
        self.give_to_postgres(self.directory)
        self.etcd_port, self.etcd_peer_port = free_port(), free_port()
        self.etcd = None
        self.nodes = [PatroniNode(self, "pg1"), PatroniNode(self, "pg2")]

    def give_to_postgres(self, path):
        if os.getuid() == 0:
            shutil.chown(path, "postgres", "postgres")

    def start(self):
        etcd_dir = os.path.join(self.directory, "etcd")
        client = f"http://127.0.0.1:{self.etcd_port}"
        self.etcd_log = open(os.path.join(self.directory, "etcd.log"), "ab")
        self.etcd = subprocess.Popen(
            ["etcd", "--name", "drill", "--data-dir", etcd_dir, "--listen-client-urls", client,
             "--advertise-client-urls", client, "--listen-peer-urls", f"http://127.0.0.1:{self.etcd_peer_port}",
             "--initial-advertise-peer-urls", f"http://127.0.0.1:{self.etcd_peer_port}",
             "--initial-cluster", f"drill=http://127.0.0.1:{self.etcd_peer_port}", "--enable-v2=true"],
            stdout=self.etcd_log, stderr=self.etcd_log, stdin=subprocess.DEVNULL)
        wait_until(lambda: (_get_json(f"{client}/health") or {}).get("health") == "true", timeout=60,
                   what="etcd to be healthy")
        for node in self.nodes:
            node.write_config()
        # The first node bootstraps the cluster alone, so which one initdb's is not a race.
        self.nodes[0].start()
        self.wait_for(lambda members: self.leader_of(members) is self.nodes[0], timeout=120, what="pg1 to lead")
        self.nodes[1].start()
        self.wait_healthy(timeout=180)
        return self

    def members(self):
        """Patroni's view of the cluster, from whichever node's REST API answers."""
        for node in self.nodes:
            if node.dropped or node.process is None or node.process.poll() is not None:
                continue
            cluster = _get_json(f"{node.rest}/cluster")
            if cluster is not None:
                return cluster.get("members", [])
        return []

    def node_named(self, name):
        return next(node for node in self.nodes if node.name == name)

    def leader_of(self, members):
        for member in members:
            if member.get("role") == "leader" and member.get("state") == "running":
                return self.node_named(member["name"])
        return None

    def wait_for(self, condition, timeout, what, interval=0.05):
        return wait_until(lambda: condition(self.members()), timeout=timeout, interval=interval, what=what)

    def wait_healthy(self, timeout=120):
        """A running leader and a streaming synchronous standby: the state each drill step starts from."""
        def healthy(members):
            states = {m.get("role"): m.get("state") for m in members}
            # Patroni 3.0 reports a healthy replica as "running"; later versions say "streaming".
            return len(members) == 2 and states.get("leader") == "running" and \
                states.get("sync_standby") in ("running", "streaming")
        self.wait_for(healthy, timeout=timeout, what="a leader and a synchronous standby")
        return self.leader()

    def leader(self):
        return self.leader_of(self.members())

    def wait_for_new_leader(self, old, timeout=120):
        """Polls until a node other than `old` leads and runs; returns (it, the monotonic time it was seen)."""
        def new_leader(members):
            leader = self.leader_of(members)
            return leader if leader is not None and leader is not old else None
        node = self.wait_for(new_leader, timeout=timeout, what="a new leader")
        return node, time.monotonic()

    def switchover(self, to):
        """A planned switchover with patronictl, as an operator runs it."""
        current = self.leader()
        result = subprocess.run(["patronictl", "-c", to.config, "switchover", "--leader", current.name,
                                 "--candidate", to.name, "--force", SCOPE],
                                capture_output=True, text=True, timeout=120)
        assert result.returncode == 0, result.stdout + result.stderr
        return current

    def query(self, node, database, sql):
        result = subprocess.run([f"{self.bin}/psql", f"host=127.0.0.1 port={node.pg_port} user=postgres dbname={database}",
                                 "-XAtq", "-c", sql], check=True, capture_output=True, text=True, timeout=60)
        return result.stdout.strip()

    def url(self, database):
        first, second = self.nodes
        return (f"postgresql://postgres@127.0.0.1:{first.pg_port},127.0.0.1:{second.pg_port}/{database}"
                "?target_session_attrs=read-write")

    def stop(self):
        for node in self.nodes:
            node.stop()
        if self.etcd is not None:
            self.etcd.kill()
            self.etcd.wait(timeout=10)
            self.etcd_log.close()
        if os.environ.get("KUMAPUSH_DRILL_KEEP"):
            print(f"drill folder kept: {self.directory}")
        else:
            shutil.rmtree(self.directory, ignore_errors=True)

