"""The plan and time of PostgreSQL's promotion of many devices' next jobs, with and without the planner settings the
relay runs it under (`PostgresStore.promotionPlanner`). A durable throwaway server; `QueueBench prefill` fills a
fresh database with JOBS jobs over 1,000 devices (the relay's own schema); optionally `ANALYZE jobs` first (by
default the table keeps no statistics, as a new database does until autovacuum's first ANALYZE of it). Then, per
round, the heads are leased and deleted as a completion batch would, and the promotion (the statement in
`PostgresStore+Jobs.swift`, prepared as the relay prepares it) runs under EXPLAIN ANALYZE.

Usage: python3 bench/pg_promotion_plan.py [JOBS] [--analyze] [--rounds N]   (default 50000 jobs, 6 rounds)
Prints, per setting, the plan's scan of `jobs` and each round's execution time."""
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "Tests", "e2e"))
from postgres_server import PostgresServer  # noqa: E402

# PostgresStore.promoteNextOfDevices, word for word.
PROMOTION = """UPDATE jobs SET state = 'available' WHERE id IN (
    SELECT next.id FROM unnest($1::text[]) AS d (id)
    CROSS JOIN LATERAL (SELECT id FROM jobs WHERE device_id = d.id AND state = 'pending' ORDER BY id LIMIT 1) AS next)"""
SETTINGS = {
    "generic plan only (before)": ["plan_cache_mode = force_generic_plan"],
    "promotionPlanner (the relay)": ["plan_cache_mode = force_generic_plan", "enable_bitmapscan = off"],
}


def main():
    arguments = sys.argv[1:]
    jobs = next((a for a in arguments if a.isdigit()), "50000")
    rounds = int(arguments[arguments.index("--rounds") + 1]) if "--rounds" in arguments else 6
    for label, settings in SETTINGS.items():
        server = PostgresServer(durable=True).start()
        try:
            server.query("postgres", "CREATE DATABASE p")
            subprocess.run([os.path.join(ROOT, ".build", "release", "QueueBench"), "prefill", server.url("p"), jobs, "1000"],
                           check=True, capture_output=True)
            psql = lambda sql: subprocess.run([f"{server.bin}/psql", server.conninfo("p"), "-XAtq", "-c", sql],
                                              capture_output=True, text=True, check=True).stdout
            if "--analyze" in arguments:
                psql("ANALYZE jobs")
            times, scans = [], set()
            for _ in range(rounds):
                devices = psql("SELECT string_agg(DISTINCT device_id, ',') FROM jobs WHERE state = 'available'").strip()
                plan = psql(f"""
                    UPDATE jobs SET state = 'running', attempt = attempt + 1, attempted_at = 1, attempted_by = 'w',
                                    lease_expires_at = 9 WHERE state = 'available';
                    BEGIN;
                    DELETE FROM jobs WHERE state = 'running';
                    {' '.join(f'SET LOCAL {s};' for s in settings)}
                    PREPARE promote (text[]) AS {PROMOTION};
                    EXPLAIN (ANALYZE, BUFFERS, TIMING OFF) EXECUTE promote ('{{{devices}}}');
                    COMMIT;""")
                times += [line.split(":")[1].strip() for line in plan.splitlines() if "Execution Time" in line]
                scans |= {line.strip().split("  (")[0].lstrip("-> ") for line in plan.splitlines() if "Scan on jobs jobs_1" in line
                          or "Scan using jobs_by_device" in line}
            print(f"{label}, {jobs} jobs over 1,000 devices{', analyzed' if '--analyze' in arguments else ', no statistics'}:")
            print(f"  scan: {'; '.join(sorted(scans))}")
            print(f"  execution per round: {', '.join(times)}")
        finally:
            server.stop()


if __name__ == "__main__":
    main()
