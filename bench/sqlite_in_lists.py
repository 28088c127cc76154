"""What a constant IN list of three or more values costs an SQLite statement: SQLite builds a temporary B-tree
for it each time the statement runs. Writes 50,000 job rows into two copies of a cut-down jobs schema, one with
the state CHECK and the one-head partial index written with IN (...), one with OR'ed comparisons (schema 10), and
prints the µs per insert, state update and delete of each (docs/performance.md). Usage: python3 sqlite_in_lists.py"""
import os
import sqlite3
import sys
import tempfile
import time
def schema(form):
    states = ["pending", "available", "running", "retryable", "discarded"]
    heads = ["available", "running", "retryable"]
    if form == "in":
        check = "state IN (%s)" % ", ".join(f"'{s}'" for s in states)
        head = "state IN (%s)" % ", ".join(f"'{s}'" for s in heads)
    else:
        check = " OR ".join(f"state = '{s}'" for s in states)
        head = " OR ".join(f"state = '{s}'" for s in heads)
    return f"""
    CREATE TABLE devices (id TEXT PRIMARY KEY NOT NULL, live_jobs INTEGER NOT NULL DEFAULT 0);
    CREATE TABLE jobs (id INTEGER PRIMARY KEY, device_id TEXT NOT NULL REFERENCES devices(id) ON DELETE CASCADE,
      state TEXT NOT NULL CHECK ({check}), payload BLOB NOT NULL);
    CREATE UNIQUE INDEX one_head ON jobs (device_id) WHERE {head};
    CREATE INDEX by_device ON jobs (device_id, id);
    """
for form in sys.argv[1:] or ["in", "or", "in", "or"]:
    path = os.path.join(tempfile.gettempdir(), f"sqlite-in-lists-{form}.db")
    for s in ("", "-wal", "-shm"):
        try: os.remove(path + s)
        except FileNotFoundError: pass
    c = sqlite3.connect(path, isolation_level=None)
    c.execute("PRAGMA journal_mode=WAL"); c.execute("PRAGMA foreign_keys=ON")
    c.executescript(schema(form))
    c.execute("BEGIN")
    for d in range(1000): c.execute("INSERT INTO devices (id) VALUES (?)", (f"d{d}",))
    c.execute("COMMIT")
    n = 50000
    t = time.perf_counter()
    c.execute("BEGIN")
    for i in range(n): c.execute("INSERT INTO jobs (device_id, state, payload) VALUES (?, ?, x'00')", (f"d{i%1000}", "available" if i < 1000 else "pending"))
    c.execute("COMMIT")
    t1 = time.perf_counter()
    c.execute("BEGIN")
    for i in range(1000, n): c.execute("UPDATE jobs SET state = 'discarded' WHERE id = ?", (i + 1,))
    c.execute("COMMIT")
    t2 = time.perf_counter()
    c.execute("BEGIN")
    for i in range(n): c.execute("DELETE FROM jobs WHERE id = ?", (i + 1,))
    c.execute("COMMIT")
    t3 = time.perf_counter()
    print(form, f"insert {1e6*(t1-t)/n:.2f} us, update {1e6*(t2-t1)/(n-1000):.2f} us, delete {1e6*(t3-t2)/n:.2f} us")
