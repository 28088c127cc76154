"""A crash costs no wait (SPEC §4, issue 40): a deliverer restarted on the same host takes back the leases of its
predecessor whose pid is gone at once, instead of leaving its in-flight pushes for LEASE_TIMEOUT. The worker id
names the host, the pid and the node (the boot and pid namespace: `WorkerIdentity`); on SQLite each deliverer also
holds a lock file beside the database (`DelivererLocks`), which tells a container's restarted PID 1 that the last
one has ended."""
import os
import pathlib
import signal
import sqlite3

import pytest

from relayproc import request, wait_until
from test_delivery import alert, register, token


def running_workers(db):
    with sqlite3.connect(db) as connection:
        return [row[0] for row in connection.execute("SELECT attempted_by FROM jobs WHERE state = 'running'")]


def test_a_deliverer_restarted_after_sigkill_takes_back_its_predecessors_lease_at_once(relays, fake_apns, tmp_path):
    # An hour's lease: only taking it back can deliver the push within the test's deadline.
    settings = dict(LEASE_TIMEOUT="1h")
    ingest = relays("ingest")
    first = relays("deliver", **settings)
    device_id, _ = register(ingest, 1)
    fake_apns.hold = True
    assert request("POST", f"{ingest.base}/wh/{device_id}", alert(1, "DB", 0, "in flight at the crash"))[0] == 202
    wait_until(lambda: fake_apns.held(), what="the push in flight")
    [holder] = running_workers(tmp_path / "relay.db")
    assert f":{first.process.pid}:" in holder, f"the worker id {holder} names the pid {first.process.pid}"
    first.signal(signal.SIGKILL)
    first.wait()
    fake_apns.hold = False
    second = relays("deliver", LOG_LEVEL="info", **settings)
    wait_until(lambda: fake_apns.pushes(token(1)), timeout=30, what="the push delivered by the next deliverer")
    log = (tmp_path / "deliver-2.log").read_bytes().decode()
    assert "took back the leases" in log and holder in log
    assert second.process.poll() is None


# What Docker gives a container's process (deploy/Dockerfile, restart: unless-stopped): PID 1 of a new pid namespace
# at every start, with /proc of its own. --kill-child: SIGKILL to unshare ends the deliverer too.
CONTAINER = ("unshare", "--pid", "--fork", "--mount-proc", "--kill-child")


@pytest.mark.skipif(os.geteuid() != 0, reason="new pid namespaces need root")
def test_a_deliverer_restarted_as_pid_1_of_a_new_container_takes_back_its_predecessors_lease(relays, fake_apns, tmp_path):
    """Neither the pid (1, its own) nor the pid namespace (a new one) tells the restarted deliverer that the holder is
    gone; before the lock files it waited out LEASE_TIMEOUT, an hour here."""
    settings = dict(LEASE_TIMEOUT="1h")
    ingest = relays("ingest")
    first = relays("deliver", prefix=CONTAINER, **settings)
    [deliverer] = pathlib.Path(f"/proc/{first.process.pid}/task/{first.process.pid}/children").read_text().split()
    device_id, _ = register(ingest, 3)
    fake_apns.hold = True
    assert request("POST", f"{ingest.base}/wh/{device_id}", alert(1, "DB", 0, "in flight at the crash"))[0] == 202
    wait_until(lambda: fake_apns.held(), what="the push in flight")
    [holder] = running_workers(tmp_path / "relay.db")
    assert ":1:" in holder, f"the worker id {holder} names PID 1"
    first.signal(signal.SIGKILL)
    first.wait()

    def ended():
        try:
            return pathlib.Path(f"/proc/{deliverer}/stat").read_text().rsplit(")", 1)[1].split()[0] in ("Z", "X")
        except FileNotFoundError:
            return True
    wait_until(ended, what="the deliverer killed with its container")
    fake_apns.hold = False
    relays("deliver", prefix=CONTAINER, LOG_LEVEL="info", **settings)
    wait_until(lambda: fake_apns.pushes(token(3)), timeout=30, what="the push delivered by the next deliverer")
    log = (tmp_path / "deliver-2.log").read_bytes().decode()
    assert "took back the leases" in log and holder in log


def test_a_live_deliverers_leases_are_not_taken(relays, fake_apns, tmp_path):
    """Two deliverers on one host: the second one starting must leave the first one's lease alone."""
    settings = dict(LEASE_TIMEOUT="1h")
    ingest = relays("ingest")
    relays("deliver", **settings)
    device_id, _ = register(ingest, 2)
    fake_apns.hold = True
    assert request("POST", f"{ingest.base}/wh/{device_id}", alert(1, "DB", 0, "in flight"))[0] == 202
    wait_until(lambda: fake_apns.held(), what="the push in flight")
    [holder] = running_workers(tmp_path / "relay.db")
    relays("deliver", **settings)
    assert running_workers(tmp_path / "relay.db") == [holder], "the live worker keeps its lease"
    assert len(fake_apns.requests) == 1, "nothing sent twice"
