"""The two PostgreSQL claim shapes of DESIGN.md "PostgreSQL store", measured at the SQL level (issue #15).

A: the relay's schema and statements today (Sources/Queue/Postgres): a partial unique index allows one head
   (available, running or retryable job) per device; a claim leases due heads with FOR UPDATE SKIP LOCKED, a
   completion deletes the head and promotes the device's oldest pending job.
B: the same schema without the head indexes, plus a `device_queue` row per device that has live jobs, whose
   `next_run_at` is the time the device is due or, while `leased_by` is set, its lease expiry. A claim leases due
   device_queue rows with FOR UPDATE SKIP LOCKED and takes each device's oldest job; a completion deletes the job
   and makes the device due again, or deletes its device_queue row when it has no job left.
A': A's schema and statements, with one line more in the completion: `SET LOCAL plan_cache_mode =
   force_custom_plan`. A prepared statement gets a generic plan after five runs, and the generic plan of A's
   DELETE … USING unnest(ids, attempts) … AND state = 'running' walks the jobs_leased partial index and rescans
   the unnest for every row: batch² comparisons, 1,000,000 at a batch of 1,000 (the DELETE took about 110 ms
   instead of about 15 in a trial with `pgbench -r`). B's DELETE has no state predicate to lead it there. A' is
   measured at batches of 1,000, on A's databases, to tell the shape apart from that plan.

Both are driven by pgbench custom scripts on a durable throwaway PostgreSQL (fsync on, `Tests/e2e/postgres_server.py`),
in databases of 1,000 devices with 10 or 1,000 jobs queued behind each. Schema A is read from the relay's own
migrations (PostgresMigrations.swift), so it follows them. Each claim script is what one delivery batch does:
the claim statement (its own transaction, as in the relay), then one transaction that completes the batch. To keep
the depth constant for the whole run, that transaction also inserts one new job per device it completed (a plain
INSERT of a pending job in both shapes: the device still has jobs, so shape B's device_queue row stays). That
INSERT is workload, not shape, and is in every figure. Enqueue is measured apart: batches of 256 jobs (the relay's
chunk) to random devices into an empty queue; shape B upserts device_queue.

Figures are jobs claimed and completed (or enqueued) per second, median of --runs (min–max beside it); the runs of
A, A' and B alternate so drift on the shared machine hits all of them. Runs are 4 s by default so that the whole
matrix (16 claim cases, 4 more for A', and the enqueue, 3 runs each) takes about 6 minutes; --seconds 20 gives
longer runs (about 20 minutes).

Usage: python3 bench/pg_claim_shapes.py [--seconds 4] [--runs 3] [--output FILE]
(as the project asks for measurements: flock -x /work/notes/cpu.lock python3 bench/pg_claim_shapes.py)"""
import argparse
import datetime
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "Tests", "e2e"))
from postgres_server import PostgresServer  # noqa: E402

MIGRATIONS = os.path.join(ROOT, "Sources", "Queue", "Postgres", "PostgresMigrations.swift")
DEVICES = 1_000
DEPTHS = (10, 1_000)
BATCHES = (100, 1_000)
CLAIMERS = (1, 2)
ENQUEUE_BATCH = 256
LEASE_MS = 60_000
HEAD_STATES = "('available', 'running', 'retryable')"

# A job's payload: the size of an ordinary alert's APNs JSON.
PAYLOAD = "convert_to(repeat('x', 300), 'UTF8')"
NOW = "SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint AS now \\gset\n"
# From DeviceBurst.swift: the claim returns the device's pushes in the last minute, a completion counts one more.
RECENT_PUSHES = "CASE WHEN d.burst_started_at > :now::bigint - 60000 THEN d.burst_count ELSE 0 END"
RECORD_PUSH = """burst_count = CASE WHEN burst_started_at > :now::bigint - 60000 THEN burst_count + 1 ELSE 1 END,
                   burst_started_at = CASE WHEN burst_started_at > :now::bigint - 60000 THEN burst_started_at ELSE :now::bigint END"""
WORKER = "('w' || :client_id::text)"

# What both shapes' completions do around their own statements (PostgresStore.finish): find the batch's devices,
# lock them in id order, record each device's success; at the end, wake deliverers. The last INSERT keeps the
# depth. B needs the device locks as much as A: without them a completion that sees no job left could delete the
# device_queue row that an enqueue committing beside it found and left alone (ON CONFLICT DO NOTHING).
COMPLETE_START = """BEGIN;
SELECT coalesce(array_agg(DISTINCT device_id), '{}') AS devs FROM jobs WHERE id = ANY(:ids::bigint[]) \\gset
SELECT id FROM devices WHERE id = ANY(:devs::text[]) ORDER BY id FOR NO KEY UPDATE;
"""
COMPLETE_END = f"""UPDATE devices SET last_successful_notification = :now::bigint, last_delivery_error = '',
                   {RECORD_PUSH}
    WHERE id = ANY(:devs::text[]);
INSERT INTO jobs (public_id, device_id, state, payload, created_at, scheduled_at, expires_at)
    SELECT gen_random_uuid()::text, d, 'pending', {PAYLOAD}, :now::bigint, :now::bigint, :now::bigint + 86400000
    FROM unnest(:devs::text[]) AS d;
NOTIFY kumapush_jobs;
COMMIT;
"""
CLAIM_COLUMNS = f"""jobs.id, jobs.public_id, jobs.device_id, jobs.payload, jobs.attempt, jobs.created_at,
              jobs.expires_at, jobs.reports_outcome, d.device_token, d.down_notification_level,
              jobs.folded, jobs.badge, d.apns_environment, {RECENT_PUSHES} AS recent, d.last_successful_notification"""
# The claim's rows go to the client as in the relay; pgbench keeps the ids and attempts for the completion.
CLAIM_RESULT = """SELECT coalesce(array_agg(id), '{}') AS ids, coalesce(array_agg(attempt), '{}') AS attempts,
       sum(length(payload) + length(device_token)) AS bytes FROM claimed \\gset
"""

SHAPES = {
    "A": {
        "name": "one head per device (partial unique index), as built",
        "schema": "A",
        "claim": NOW + f"""WITH due AS (
    SELECT id FROM jobs WHERE state IN ('available', 'retryable') AND scheduled_at <= :now::bigint
    ORDER BY scheduled_at LIMIT :batch::bigint
    FOR UPDATE SKIP LOCKED
), claimed AS (
    UPDATE jobs SET state = 'running', attempt = jobs.attempt + 1, attempted_at = :now::bigint,
                    attempted_by = {WORKER}, lease_expires_at = :now::bigint + {LEASE_MS}
    FROM due, devices d
    WHERE jobs.id = due.id AND d.id = jobs.device_id
    RETURNING {CLAIM_COLUMNS}
)
""" + CLAIM_RESULT + COMPLETE_START + f"""DELETE FROM jobs USING unnest(:ids::bigint[], :attempts::integer[]) AS o (id, attempt)
    WHERE jobs.id = o.id AND jobs.attempt = o.attempt AND jobs.state = 'running' AND jobs.attempted_by = {WORKER}
    RETURNING jobs.id, jobs.device_id, jobs.public_id, jobs.reports_outcome;
UPDATE jobs SET state = 'available' WHERE id IN (
    SELECT next.id FROM unnest(:devs::text[]) AS d (id)
    CROSS JOIN LATERAL (SELECT id FROM jobs WHERE device_id = d.id AND state = 'pending' ORDER BY id LIMIT 1) AS next);
""" + COMPLETE_END,
        # PostgresStore+Enqueue: lock the devices, read which have a head, insert (head or pending) in one statement.
        "enqueue": NOW + f"""SELECT array_agg(md5(floor(random() * {DEVICES})::int::text)) AS batch FROM generate_series(1, :n) \\gset
BEGIN;
SELECT id FROM devices WHERE id = ANY(:batch::text[]) ORDER BY id FOR NO KEY UPDATE;
SELECT coalesce(array_agg(device_id), '{{}}') AS heads FROM jobs
    WHERE device_id = ANY(:batch::text[]) AND state IN {HEAD_STATES} \\gset
INSERT INTO jobs (public_id, device_id, state, payload, created_at, scheduled_at, expires_at)
    SELECT gen_random_uuid()::text, b.d,
           CASE WHEN b.nth = 1 AND NOT b.d = ANY(:heads::text[]) THEN 'available' ELSE 'pending' END,
           {PAYLOAD}, :now::bigint, :now::bigint, :now::bigint + 86400000
    FROM (SELECT d, g, row_number() OVER (PARTITION BY d ORDER BY g) AS nth
          FROM unnest(:batch::text[]) WITH ORDINALITY AS u (d, g)) AS b
    ORDER BY b.g;
NOTIFY kumapush_jobs;
COMMIT;
""",
    },
    "B": {
        "name": "a device_queue row per device with jobs",
        "schema": "B",
        "claim": NOW + f"""WITH due AS (
    SELECT device_id FROM device_queue WHERE next_run_at <= :now::bigint
    ORDER BY next_run_at LIMIT :batch::bigint
    FOR UPDATE SKIP LOCKED
), leased AS (
    UPDATE device_queue q SET next_run_at = :now::bigint + {LEASE_MS}, leased_by = {WORKER}
    FROM due WHERE q.device_id = due.device_id
    RETURNING q.device_id
), heads AS (
    SELECT head.id FROM leased
    CROSS JOIN LATERAL (SELECT id FROM jobs WHERE device_id = leased.device_id AND state = 'pending'
                        ORDER BY id LIMIT 1) AS head
), claimed AS (
    UPDATE jobs SET attempt = jobs.attempt + 1, attempted_at = :now::bigint, attempted_by = {WORKER}
    FROM heads, devices d
    WHERE jobs.id = heads.id AND d.id = jobs.device_id
    RETURNING {CLAIM_COLUMNS}
)
""" + CLAIM_RESULT + COMPLETE_START + f"""DELETE FROM jobs USING unnest(:ids::bigint[], :attempts::integer[]) AS o (id, attempt)
    WHERE jobs.id = o.id AND jobs.attempt = o.attempt AND jobs.attempted_by = {WORKER}
    RETURNING jobs.id, jobs.device_id, jobs.public_id, jobs.reports_outcome;
DELETE FROM device_queue q WHERE q.device_id = ANY(:devs::text[]) AND q.leased_by = {WORKER}
    AND NOT EXISTS (SELECT 1 FROM jobs WHERE jobs.device_id = q.device_id AND jobs.state = 'pending');
UPDATE device_queue SET next_run_at = :now::bigint, leased_by = NULL
    WHERE device_id = ANY(:devs::text[]) AND leased_by = {WORKER};
""" + COMPLETE_END,
        # No head to decide: every job is pending; the device becomes due unless it already is (or is leased).
        "enqueue": NOW + f"""SELECT array_agg(md5(floor(random() * {DEVICES})::int::text)) AS batch FROM generate_series(1, :n) \\gset
BEGIN;
SELECT id FROM devices WHERE id = ANY(:batch::text[]) ORDER BY id FOR NO KEY UPDATE;
INSERT INTO jobs (public_id, device_id, state, payload, created_at, scheduled_at, expires_at)
    SELECT gen_random_uuid()::text, d, 'pending', {PAYLOAD}, :now::bigint, :now::bigint, :now::bigint + 86400000
    FROM unnest(:batch::text[]) WITH ORDINALITY AS u (d, g) ORDER BY g;
INSERT INTO device_queue (device_id, next_run_at)
    SELECT DISTINCT d, :now::bigint FROM unnest(:batch::text[]) AS d ORDER BY 1
    ON CONFLICT (device_id) DO NOTHING;
NOTIFY kumapush_jobs;
COMMIT;
""",
    },
}

CUSTOM_PLAN = "A'"
SHAPES[CUSTOM_PLAN] = {
    "name": "A with its completion planned for the batch at hand (SET LOCAL plan_cache_mode = force_custom_plan)",
    "schema": "A",
    "claim": SHAPES["A"]["claim"].replace("BEGIN;\n", "BEGIN;\nSET LOCAL plan_cache_mode = force_custom_plan;\n", 1),
}
# Measured at this batch only: at 100 the generic plan's batch² is 10,000 comparisons, a small part of the batch.
CUSTOM_PLAN_BATCHES = (1_000,)

# Shape B on top of the relay's migrations: the head indexes and the job-level lease go; the lease is the
# device_queue row's. attempted_by and attempt stay on the job: they fence a completion.
SHAPE_B_SCHEMA = """
DROP INDEX jobs_one_head_per_device;
DROP INDEX jobs_due;
DROP INDEX jobs_leased;
DO $$ DECLARE c text; BEGIN
    SELECT conname INTO c FROM pg_constraint
    WHERE conrelid = 'jobs'::regclass AND contype = 'c' AND pg_get_constraintdef(oid) LIKE '%attempted_by%';
    EXECUTE format('ALTER TABLE jobs DROP CONSTRAINT %I', c);
END $$;
CREATE TABLE device_queue (
    device_id TEXT PRIMARY KEY REFERENCES devices (id) ON DELETE CASCADE,
    next_run_at BIGINT NOT NULL,
    leased_by TEXT
);
CREATE INDEX device_queue_due ON device_queue (next_run_at);
"""


def relay_migrations():
    """The SQL of every migration in PostgresMigrations.swift, in order."""
    source = open(MIGRATIONS).read()
    blocks = re.findall(r'sql: """\n(.*?)\n\s*"""\)', source, re.S)
    if not blocks or any("\\" in block for block in blocks):
        raise RuntimeError(f"could not read the migrations of {MIGRATIONS}")
    return blocks


class Cluster:
    def __init__(self):
        self.server = PostgresServer(durable=True).start()
        self.psql = f"{self.server.bin}/psql"
        self.pgbench = f"{self.server.bin}/pgbench"

    def sql(self, database, text):
        result = subprocess.run([self.psql, self.server.conninfo(database), "-XAtq", "-v", "ON_ERROR_STOP=1"],
                                input=text, check=True, capture_output=True, text=True)
        return result.stdout.strip()

    def value(self, database, text):
        return int(self.sql(database, text))

    def create(self, shape, depth):
        database = f"shape_{shape.lower()}_{depth}"
        self.sql("postgres", f"CREATE DATABASE {database}")
        for migration in relay_migrations():
            self.sql(database, migration)
        if shape == "B":
            self.sql(database, SHAPE_B_SCHEMA)
        self.sql(database, f"""
            INSERT INTO devices (id, device_token, date_added)
                SELECT md5(d::text), md5(d::text) || md5((-d)::text), 0 FROM generate_series(0, {DEVICES - 1}) AS d;""")
        self.fill(database, shape, depth)
        return database

    def fill(self, database, shape, depth):
        """depth jobs behind each device, ids in acceptance order (round after round over the devices)."""
        state = "CASE WHEN n = 1 THEN 'available' ELSE 'pending' END" if shape == "A" else "'pending'"
        self.sql(database, f"""
            INSERT INTO jobs (public_id, device_id, state, payload, created_at, scheduled_at, expires_at)
                SELECT 'load-' || n || '-' || d, md5(d::text), {state}, {PAYLOAD}, 0, 0, 86400000000000
                FROM generate_series(1, {depth}) AS n, generate_series(0, {DEVICES - 1}) AS d ORDER BY n, d;""")
        if shape == "B":
            self.sql(database, "INSERT INTO device_queue (device_id, next_run_at) SELECT id, 0 FROM devices;")
        self.sql(database, "VACUUM ANALYZE;")

    def release_leases(self, database, shape):
        """Leases a run left (its last claims) expire at once, as a rescue would make them: every run starts alike."""
        if shape == "A":
            self.sql(database, """UPDATE jobs SET state = 'available', attempted_by = NULL, lease_expires_at = NULL
                                  WHERE state = 'running';""")
        else:
            self.sql(database, "UPDATE device_queue SET next_run_at = 0, leased_by = NULL WHERE leased_by IS NOT NULL;")

    def check(self, database, shape, depth):
        """The invariants the run must keep: the depth, and at most one claimed-or-due job per device."""
        jobs = self.value(database, "SELECT count(*) FROM jobs;")
        if jobs != DEVICES * depth:
            raise RuntimeError(f"{database}: {jobs} jobs, expected {DEVICES * depth}")
        if shape == "A":
            heads = self.value(database, f"SELECT count(*) FROM jobs WHERE state IN {HEAD_STATES};")
        else:
            heads = self.value(database, "SELECT count(*) FROM device_queue;")
        if heads != DEVICES:
            raise RuntimeError(f"{database}: {heads} heads, expected {DEVICES}")

    def bench(self, database, script, clients, seconds, variables):
        """Runs pgbench; returns (scripts per second, scripts run)."""
        with tempfile.NamedTemporaryFile("w", suffix=".sql", dir=self.server.directory, delete=False) as file:
            file.write(script)
        os.chmod(file.name, 0o644)
        command = [self.pgbench, "-n", "-M", "prepared", "-c", str(clients), "-j", str(clients), "-T", str(seconds),
                   "-f", file.name, *(f"-D{name}={value}" for name, value in variables.items()),
                   self.server.conninfo(database)]
        result = subprocess.run(command, capture_output=True, text=True)
        os.unlink(file.name)
        output = result.stdout + result.stderr
        if result.returncode != 0 or "aborted" in output or "error" in output.lower():
            raise RuntimeError(f"pgbench failed ({result.returncode}):\n{output}")
        tps = float(re.search(r"tps = ([\d.]+) \(without initial connection time\)", output).group(1))
        scripts = int(re.search(r"number of transactions actually processed: (\d+)", output).group(1))
        return tps, scripts

    def stop(self):
        self.server.stop()


def claim_run(cluster, database, shape, depth, batch, claimers, seconds):
    schema = SHAPES[shape]["schema"]
    cluster.release_leases(database, schema)
    cluster.sql(database, "CHECKPOINT;")
    before = cluster.value(database, "SELECT last_value FROM jobs_id_seq;")
    tps, scripts = cluster.bench(database, SHAPES[shape]["claim"], claimers, seconds, {"batch": batch})
    # One job is refilled per job completed, so the identity counter counts the completions.
    completed = cluster.value(database, "SELECT last_value FROM jobs_id_seq;") - before
    cluster.check(database, schema, depth)
    return tps * completed / scripts


def enqueue_run(cluster, database, shape, seconds):
    cluster.sql(database, "TRUNCATE jobs; UPDATE devices SET live_jobs = 0;"
                + (" TRUNCATE device_queue;" if shape == "B" else ""))
    cluster.sql(database, "CHECKPOINT;")
    tps, _ = cluster.bench(database, SHAPES[shape]["enqueue"], 1, seconds, {"n": ENQUEUE_BATCH})
    return tps * ENQUEUE_BATCH


def figure(values):
    return f"{statistics.median(values):,.0f} ({min(values):,.0f}–{max(values):,.0f})"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=int, default=4, help="length of each pgbench run, s")
    parser.add_argument("--runs", type=int, default=3, help="runs per figure (the median is reported)")
    parser.add_argument("--output", help="results file (default bench/results/pg-claim-shapes-<UTC stamp>.md)")
    arguments = parser.parse_args()
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H%M%SZ")
    output = arguments.output or os.path.join(ROOT, "bench", "results", f"pg-claim-shapes-{stamp}.md")
    started = time.monotonic()

    cluster = Cluster()
    try:
        databases = {}
        for depth in DEPTHS:
            for shape in ("A", "B"):
                print(f"filling {shape} with {DEVICES:,} devices × {depth:,} jobs", file=sys.stderr, flush=True)
                databases[shape, depth] = cluster.create(shape, depth)
        rows = []
        for depth in DEPTHS:
            for batch in BATCHES:
                for claimers in CLAIMERS:
                    shapes = ("A", CUSTOM_PLAN, "B") if batch in CUSTOM_PLAN_BATCHES else ("A", "B")
                    rates = {shape: [] for shape in shapes}
                    for _ in range(arguments.runs):
                        for shape in shapes:
                            database = databases[SHAPES[shape]["schema"], depth]
                            rates[shape].append(claim_run(cluster, database, shape, depth, batch, claimers,
                                                          arguments.seconds))
                    median = {shape: statistics.median(values) for shape, values in rates.items()}
                    custom = (f"{figure(rates[CUSTOM_PLAN])} | {median['B'] / median[CUSTOM_PLAN]:.2f}"
                              if CUSTOM_PLAN in rates else "— | —")
                    rows.append(f"| claim + complete | {depth:,} | {batch:,} | {claimers} | {figure(rates['A'])} | "
                                f"{figure(rates['B'])} | {median['B'] / median['A']:.2f} | {custom} |")
                    print(rows[-1], file=sys.stderr, flush=True)
        enqueue = {shape: [] for shape in ("A", "B")}
        for _ in range(arguments.runs):
            for shape in enqueue:
                enqueue[shape].append(enqueue_run(cluster, databases[shape, DEPTHS[0]], shape, arguments.seconds))
        ratio = statistics.median(enqueue["B"]) / statistics.median(enqueue["A"])
        rows.append(f"| enqueue into an empty queue | — | {ENQUEUE_BATCH} | 1 | {figure(enqueue['A'])} | "
                    f"{figure(enqueue['B'])} | {ratio:.2f} | — | — |")
        print(rows[-1], file=sys.stderr, flush=True)
    finally:
        cluster.stop()

    elapsed = time.monotonic() - started
    command = "flock -x /work/notes/cpu.lock python3 bench/pg_claim_shapes.py" + (
        f" --seconds {arguments.seconds}" if arguments.seconds != 4 else "") + (
        f" --runs {arguments.runs}" if arguments.runs != 3 else "")
    report = f"""# PostgreSQL claim shapes (issue #15)

`{command}` on {os.cpu_count()} cores, {stamp}, {elapsed:.0f} s. PostgreSQL 15, durable (fsync on), pgbench
`-M prepared -n -T {arguments.seconds}`, one pgbench client per claimer. {DEVICES:,} devices. Jobs/s claimed and
completed (enqueued for the last row), median of {arguments.runs} runs (min–max); the shapes' runs alternate.

- A: {SHAPES['A']['name']}.
- B: {SHAPES['B']['name']}.
- A': {SHAPES[CUSTOM_PLAN]['name']}, at batches of 1,000 only.

Every completion transaction also inserts one new job per job it completed, so the depth stays constant; the
enqueue row is batches of {ENQUEUE_BATCH} jobs to random devices, one client, starting from an empty queue. The
statements are in `bench/pg_claim_shapes.py`.

| Case | Jobs per device | Batch | Claimers | A jobs/s | B jobs/s | B / A | A' jobs/s | B / A' |
|---|---|---|---|---|---|---|---|---|
""" + "\n".join(rows) + "\n"
    with open(output, "w") as file:
        file.write(report)
    print(report)
    print(f"written to {output}", file=sys.stderr)


if __name__ == "__main__":
    main()
