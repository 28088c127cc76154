"""The plan and time of PostgreSQL's promotion of many devices' next jobs, with and without the planner settings the
relay runs it under (`PostgresStore.promotionPlannerSettings`). A durable throwaway server; `QueueBench prefill` fills a
fresh database with JOBS jobs over 1,000 devices (the relay's own schema); optionally `ANALYZE jobs` first (by
default the table keeps no statistics, as a new database does until autovacuum's first ANALYZE of it), or
(`--stale`) after the first 1,000 jobs, one per device, with the rest added after it. Then, per round, the heads
are leased and deleted as a completion batch would, and the promotion (the statement in `PostgresStore+Jobs.swift`,
prepared as the relay prepares it) runs under EXPLAIN ANALYZE; so does, once, the one-device promotion (planned per
call, without settings, as the relay runs it) for a device whose head was just deleted.

Usage: python3 bench/pg_promotion_plan.py [JOBS] [--analyze | --stale] [--rounds N]   (default 50000 jobs, 6 rounds)
Prints, per setting, the plan's scan of `jobs` and each round's execution time."""
import argparse
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "Tests", "e2e"))
from postgres_server import PostgresServer  # noqa: E402

# PostgresStore.promoteNextOfDevices, word for word.
# PostgresStore.promoteNext (one device), word for word.
ONE_DEVICE = """UPDATE jobs SET state = 'available'
    WHERE id = (SELECT id FROM jobs WHERE device_id = $1::text AND state = 'pending' ORDER BY id LIMIT 1)"""
PROMOTION = """UPDATE jobs SET state = 'available' WHERE id IN (
    SELECT next.id FROM unnest($1::text[]) AS d (id)
    CROSS JOIN LATERAL (SELECT id FROM jobs WHERE device_id = d.id AND state = 'pending' ORDER BY id LIMIT 1) AS next)"""
SETTINGS = {
    "generic plan only (before)": ["plan_cache_mode = force_generic_plan"],
    "promotionPlannerSettings (the relay)": ["plan_cache_mode = force_generic_plan", "enable_bitmapscan = off"],
}


def main():
    parser = argparse.ArgumentParser(description="PostgreSQL's plan of the relay's promotion of many devices")
    parser.add_argument("jobs", nargs="?", type=int, default=50_000, help="jobs queued over 1,000 devices")
    when = parser.add_mutually_exclusive_group()
    when.add_argument("--analyze", action="store_true", help="ANALYZE jobs once it is full")
    when.add_argument("--stale", action="store_true", help="ANALYZE jobs at one job per device, then fill it")
    parser.add_argument("--rounds", type=int, default=6)
    options = parser.parse_args()
    jobs, rounds = options.jobs, options.rounds
    for label, settings in SETTINGS.items():
        server = PostgresServer(durable=True).start()
        try:
            server.query("postgres", "CREATE DATABASE p")
            prefill = lambda count: subprocess.run(
                [os.path.join(ROOT, ".build", "release", "QueueBench"), "prefill", server.url("p"), str(count), "1000"],
                check=True, capture_output=True)
            psql = lambda sql: subprocess.run([f"{server.bin}/psql", server.conninfo("p"), "-XAtq", "-c", sql],
                                              capture_output=True, text=True, check=True).stdout
            if options.stale:
                prefill(1000)
                psql("ANALYZE jobs")
                prefill(jobs - 1000)
            else:
                prefill(jobs)
            if options.analyze:
                psql("ANALYZE jobs")
            device = psql("SELECT device_id FROM jobs WHERE state = 'available' LIMIT 1").strip()
            one = psql(f"""BEGIN;
                DELETE FROM jobs WHERE device_id = '{device}' AND state = 'available';
                PREPARE one (text) AS {ONE_DEVICE};
                EXPLAIN (ANALYZE, TIMING OFF) EXECUTE one ('{device}');
                ROLLBACK;""")
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
            statistics = ", analyzed" if options.analyze else ", analyzed at 1 job per device" if options.stale else ", no statistics"
            print(f"{label}, {jobs} jobs over 1,000 devices{statistics}:")
            print(f"  scan: {'; '.join(sorted(scans))}")
            print(f"  execution per round: {', '.join(times)}")
            one_scan = [line.strip().split("  (")[0].lstrip("-> ") for line in one.splitlines() if "on jobs jobs_1" in line]
            one_time = [line.split(":")[1].strip() for line in one.splitlines() if "Execution Time" in line]
            print(f"  one-device promotion (unchanged): {'; '.join(one_scan)}, {', '.join(one_time)}")
        finally:
            server.stop()


if __name__ == "__main__":
    main()
