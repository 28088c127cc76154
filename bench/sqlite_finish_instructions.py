"""Instructions SQLite spends per delivered push in the relay's claim and finish statements, counted by callgrind
(deterministic where timings on a shared host are not). Prefills a relay database with `QueueBench prefill`
(20,000 jobs over 1,000 devices), then for each variant claims and finishes three batches of 1,000 on a copy of
it under `valgrind --tool=callgrind --toggle-collect=sqlite3_step` and prints instructions per push:
  schema-11   the index by device (device_id, id) put back, and the next job promoted through it
  schema-12   as shipped: the job after the claimed one's number promoted (migration 12)
Usage: python3 bench/sqlite_finish_instructions.py   (needs `apt-get install valgrind` and a release build)
On 2026-12-01 (eighth session, schema 11 against its predecessor): migration 7's triggers 117,639, schema-11
87,909 instructions per push. Ninth session, the variants above: schema-11 90,469, schema-12 87,143 — nearly the
same work per push at this depth; what schema 12 saves at a million queued is pages written, not instructions."""
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BATCHES, BATCH = 3, 1000
GUARD = "id = ?1 AND state = 'running' AND attempted_by = ?2 AND attempt = ?3"
BY_DEVICE = "DROP INDEX jobs_by_device_seq; CREATE INDEX jobs_by_device ON jobs (device_id, id)"
PROMOTE_BY_DEVICE = ("UPDATE jobs SET state = 'available' WHERE id = "
                     "(SELECT id FROM jobs WHERE device_id = ?1 AND state = 'pending' ORDER BY id LIMIT 1)")
PROMOTE_NUMBERED = "UPDATE jobs SET state = 'available' WHERE device_seq = ?1 AND device_id = ?2 AND state = 'pending'"
SUCCESS = ("UPDATE devices SET {live}last_successful_notification = ?1, last_delivery_error = '', "
           "burst_count = CASE WHEN burst_started_at > ?1 - 60000 THEN burst_count + 1 ELSE 1 END, "
           "burst_started_at = CASE WHEN burst_started_at > ?1 - 60000 THEN burst_started_at ELSE ?1 END WHERE id = ?2")


def deliver(path, variant):
    """The measured part (run under callgrind): claims and finishes BATCHES × BATCH jobs as SQLiteStore does."""
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA secure_delete=ON")
    success = SUCCESS.format(live="live_jobs = live_jobs - ?3, ")
    for _ in range(BATCHES):
        heads = db.execute("SELECT id, device_id, device_seq FROM jobs WHERE state = 'available' OR state = 'retryable' "
                           "ORDER BY id LIMIT ?", (BATCH,)).fetchall()
        db.execute("BEGIN IMMEDIATE")
        db.execute("UPDATE jobs SET state = 'running', attempt = attempt + 1, attempted_by = 'w', "
                   "lease_expires_at = 9e15 WHERE id IN (%s)" % ",".join(str(job) for job, _, _ in heads))
        db.execute("COMMIT")
        db.execute("BEGIN IMMEDIATE")
        for job, device, number in heads:
            db.execute(f"DELETE FROM jobs WHERE {GUARD}", (job, "w", 1))
            if variant == "schema-11":
                db.execute(PROMOTE_BY_DEVICE, (device,))
            else:
                db.execute(PROMOTE_NUMBERED, (number + 1, device))
            db.execute(success, (1, device, 1))
        db.execute("COMMIT")


def main():
    if len(sys.argv) == 3:
        return deliver(sys.argv[1], sys.argv[2])
    work = tempfile.mkdtemp()
    try:
        base = os.path.join(work, "base.db")
        subprocess.run([os.path.join(ROOT, ".build", "release", "QueueBench"), "prefill", base, "20000", "1000"], check=True)
        sqlite3.connect(base).execute("PRAGMA wal_checkpoint(TRUNCATE)")
        for variant in ("schema-11", "schema-12"):
            copy = os.path.join(work, f"{variant}.db")
            shutil.copy(base, copy)
            if variant == "schema-11":
                # Outside the measured run: building the index would count as sqlite3_step instructions.
                setup = sqlite3.connect(copy)
                setup.executescript(BY_DEVICE)
                setup.close()
            run = subprocess.run(["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null",
                                  "--toggle-collect=sqlite3_step", sys.executable, __file__, copy, variant],
                                 capture_output=True, text=True, check=True)
            collected = int(re.search(r"Collected : (\d+)", run.stderr).group(1))
            print(f"{variant:10} {collected / (BATCHES * BATCH):>9,.0f} instructions per delivered push inside SQLite")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
