"""What ingest's once-a-second QUEUE_MAX recount costs PostgreSQL with a deep queue: the count of live jobs
(a scan of `jobs`) against the sum of each device's live-job count (what SQLite reads, and DEVICE_QUEUE_MAX
already trusts), on a throwaway server holding N jobs over 1,000 devices.

    .venv/bin/python bench/pg_live_count.py [N]      (N defaults to 1,000,000)

Prints each statement's result and median execution time (EXPLAIN ANALYZE, 7 runs). Needs the release binary
(`swift build -c release`), which creates the schema.
"""
import os
import statistics
import subprocess
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(ROOT, "Tests", "e2e"))
from postgres_server import PostgresServer  # noqa: E402

STATEMENTS = {
    "count of live jobs (before)": "SELECT count(*) FROM jobs WHERE state <> 'discarded'",
    "sum of devices.live_jobs (now)": "SELECT coalesce(sum(live_jobs), 0) FROM devices",
}


def main():
    jobs = int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000
    server = PostgresServer().start()
    try:
        name = server.create_database()
        created = subprocess.run([os.path.join(ROOT, ".build", "release", "kumapush-relay"), "stats"], capture_output=True,
                                 text=True, env=dict(os.environ, DATABASE_URL=server.url(name)))
        assert created.returncode == 0, created.stderr
        server.query(name, f"""
            INSERT INTO devices (id, device_token, date_added)
            SELECT 'd' || g, lpad(to_hex(g), 64, '0'), 0 FROM generate_series(1, 1000) g;
            INSERT INTO jobs (public_id, device_id, state, payload, created_at, scheduled_at, expires_at)
            SELECT md5(g::text), 'd' || (g % 1000 + 1), CASE WHEN g <= 1000 THEN 'available' ELSE 'pending' END,
                   convert_to(repeat('x', 300), 'UTF8'), 0, 0, 1
            FROM generate_series(1, {jobs}) g;
            UPDATE devices SET live_jobs = (SELECT count(*) FROM jobs WHERE device_id = devices.id);""")
        server.query(name, "VACUUM ANALYZE")
        print(f"{jobs:,} jobs over 1,000 devices, PostgreSQL {server.query('postgres', 'SHOW server_version')[0][0]}")
        for label, sql in STATEMENTS.items():
            result = server.query(name, sql)[0][0]
            times = []
            for _ in range(7):
                plan = server.query(name, "EXPLAIN (ANALYZE, TIMING OFF, SUMMARY ON) " + sql)
                times += [float(line[0].split(":")[1].split()[0]) for line in plan if line[0].startswith("Execution Time")]
            print(f"- {label}: {result}, median {statistics.median(times):.2f} ms (min {min(times):.2f}, max {max(times):.2f})")
    finally:
        server.stop()


if __name__ == "__main__":
    main()
