"""A throwaway PostgreSQL server for the end-to-end tests: initdb into a temporary folder, listening only on a Unix
socket there, stopped at the end. Nothing assumes a server already running.

PostgreSQL refuses to run as root: as root the cluster belongs to the `postgres` user (created by the Debian
package) and its commands run through runuser. fsync=off for the tests, which check behaviour, not power-loss
durability; `make bench` asks for a durable server (PostgreSQL's defaults)."""
import glob
import itertools
import os
import shutil
import subprocess
import tempfile


def _bin_directory():
    configured = os.environ.get("KUMAPUSH_PG_BIN")
    if configured:
        return configured
    versions = sorted((int(os.path.basename(path)) for path in glob.glob("/usr/lib/postgresql/*") if os.path.basename(path).isdigit()))
    if not versions:
        raise RuntimeError("no PostgreSQL server in /usr/lib/postgresql (apt-get install postgresql, or set KUMAPUSH_PG_BIN)")
    return f"/usr/lib/postgresql/{versions[-1]}/bin"


class PostgresServer:
    def __init__(self, durable=False):
        self.durable = durable
        self.bin = _bin_directory()
        self.as_root = os.getuid() == 0
        self.directory = tempfile.mkdtemp(prefix="kumapush-pg-", dir="/tmp")  # short: socket paths are limited
        if self.as_root:
            shutil.chown(self.directory, "postgres", "postgres")
        self._names = itertools.count(1)

    def _run(self, *command):
        if self.as_root:
            command = ("runuser", "-u", "postgres", "--", *command)
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)

    def start(self):
        self._run(f"{self.bin}/initdb", "-D", f"{self.directory}/data", "--auth=trust", "--no-sync", "-U", "postgres",
                  "--encoding=UTF8", "--locale=C")
        self.start_server()
        return self

    def start_server(self):
        durability = "" if self.durable else " -c fsync=off"
        self._run(f"{self.bin}/pg_ctl", "-D", f"{self.directory}/data", "-w", "-l", f"{self.directory}/server.log", "-o",
                  f"-k {self.directory} -c listen_addresses=''{durability} -c max_connections=200", "start")

    def stop_server(self, mode="fast"):
        """Stops the server, keeping its data: `fast` disconnects every client, as a failover or a restart does."""
        self._run(f"{self.bin}/pg_ctl", "-D", f"{self.directory}/data", "-m", mode, "-w", "stop")

    def stop(self):
        self.stop_server("immediate")
        shutil.rmtree(self.directory, ignore_errors=True)

    def conninfo(self, database="postgres"):
        return f"host={self.directory} user=postgres dbname={database}"

    def url(self, database):
        """The same database as a libpq URI, the form DATABASE_URL usually takes."""
        return f"postgresql:///{database}?host={self.directory}&user=postgres"

    def query(self, database, sql):
        """Rows of `sql` as lists of text, through psql."""
        result = subprocess.run([f"{self.bin}/psql", self.conninfo(database), "-XAtq", "-F", "\t", "-c", sql],
                                check=True, capture_output=True, text=True)
        return [line.split("\t") for line in result.stdout.splitlines()]

    def create_database(self):
        name = f"e2e_{next(self._names)}"
        self.query("postgres", f"CREATE DATABASE {name}")
        return name
