"""Where PostgreSQL's time goes at a trickle: one run of `make bench`'s PostgreSQL latency figure (1,000 webhooks/s
for 10 s into an ingest and a deliver process) on a durable throwaway server with pg_stat_statements loaded.

Prints the run's p99, the server's CPU seconds (the postmaster's own and its reaped children's), the time all the
relay's statements took (execution + planning, and planning alone; wall clock, so on a saturated machine it
includes waiting for a core) and the statements by total time.

    .venv/bin/python bench/pg_trickle_statements.py [TREE]

TREE is a checkout whose release binaries (`swift build -c release`) are measured; this one by default. Comparing
two builds: run it for each, alternating, several times (docs/performance.md, "PostgreSQL round trips").
"""
import os
import subprocess
import sys

TREE = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(TREE, "bench"))
sys.path.insert(0, os.path.join(TREE, "Tests", "e2e"))
os.environ["BENCH_RUNS"] = "1"

import phase_postgres  # noqa: E402
from harness import ROOT, TLS, kill_all, phase_folder  # noqa: E402
from postgres_server import PostgresServer  # noqa: E402


class StatementServer(PostgresServer):
    def start_server(self):
        self._run(f"{self.bin}/pg_ctl", "-D", f"{self.directory}/data", "-w", "-l", f"{self.directory}/server.log",
                  "-o", f"-k {self.directory} -c listen_addresses='' -c max_connections=200 "
                  "-c shared_preload_libraries=pg_stat_statements -c pg_stat_statements.track=all "
                  "-c pg_stat_statements.track_planning=on", "start")


def psql(server, sql):
    result = subprocess.run([f"{server.bin}/psql", server.conninfo("postgres"), "-XAtq", "-F", " | ", "-c", sql],
                            capture_output=True, text=True, check=True)
    return [line.split(" | ") for line in result.stdout.splitlines()]


def server_cpu_seconds(server):
    postmaster = int(open(f"{server.directory}/data/postmaster.pid").readline())
    fields = open(f"/proc/{postmaster}/stat").read().rsplit(")", 1)[1].split()
    return sum(int(value) for value in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def main():
    subprocess.run([os.path.join(str(ROOT), "scripts", "generate-test-certs.sh"), str(TLS)], check=True,
                   stdout=subprocess.DEVNULL)
    server = StatementServer(durable=True).start()
    try:
        server.query("postgres", "CREATE EXTENSION pg_stat_statements")
        server.query("postgres", "SELECT pg_stat_statements_reset()")
        before = server_cpu_seconds(server)
        figures = phase_postgres.latency_figures(phase_postgres.Databases(server), phase_folder("pg_trickle"))
        cpu = server_cpu_seconds(server) - before
        # The harness's own set-up (CREATE DATABASE, the schema) is not the relay's work at a trickle.
        relay_only = "query NOT LIKE '%DATABASE%' AND query NOT LIKE '%CREATE%' AND query NOT LIKE '%--%'"
        total, planning = psql(server, "SELECT round(sum(total_exec_time + total_plan_time)::numeric), "
                                       f"round(sum(total_plan_time)::numeric) FROM pg_stat_statements WHERE {relay_only}")[0]
        print(f"tree {TREE}")
        print(f"p99 {figures['p99']['median']} ms; PostgreSQL CPU {cpu:.2f} s; "
              f"statements {total} ms, of which planning {planning} ms")
        print("calls | execution ms | planning ms | mean µs | statement")
        for row in psql(server, "SELECT calls, round(total_exec_time::numeric, 1), round(total_plan_time::numeric, 1), "
                                "round((total_exec_time / greatest(calls, 1))::numeric * 1000, 1), "
                                "left(translate(query, E'\\n', ' '), 100) FROM pg_stat_statements "
                                f"WHERE {relay_only} ORDER BY total_exec_time + total_plan_time DESC LIMIT 15"):
            print(" | ".join(row))
    finally:
        server.stop()
        kill_all()


if __name__ == "__main__":
    main()
