"""SPEC §4 "Restarts and upgrades refuse nothing": a rolling upgrade from the previous release, on both stores.

The previous release (`v0.1.0`, commit a3fd44f) is built from git once and kept in `.cache/` between runs. Its
ingest and deliver serve under continuous webhook load; this release's ingest joins (migrating the database while
the old processes keep running) and then its deliver; the old deliverer stops, then the old ingest once the load
has moved off it, as a balancer drains a host. Every webhook to either ingest is answered 202, every one is
delivered, in per-device order, and no process exits on its own.
"""
import os
import pathlib
import signal
import subprocess
import threading
import time

import pytest

from conftest import ROOT, TLS, TOPIC
from relayproc import Relay, free_port, relay_env, request, wait_until
from test_delivery import alert, assert_accepted_in_order, register

PREVIOUS = "a3fd44f"  # v0.1.0; the tag itself may not travel with a clone
CACHE = ROOT / ".cache" / "v0.1.0"
DEVICES = 12


def previous_release_binary():
    """kumapush-relay as v0.1.0 built it: from `git archive` of its commit, built once (a few minutes) and cached."""
    binary = CACHE / "src" / ".build" / "debug" / "kumapush-relay"
    if binary.exists():
        return binary
    source = CACHE / "src"
    source.mkdir(parents=True, exist_ok=True)
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", PREVIOUS], capture_output=True, check=True, timeout=120)
    subprocess.run(["tar", "-x", "-C", str(source)], input=archive.stdout, check=True, timeout=120)
    subprocess.run(["swift", "build", "--product", "kumapush-relay"], cwd=source, check=True, timeout=1800,
                   stdout=subprocess.DEVNULL)
    return binary


@pytest.fixture(scope="module")
def previous_binary():
    return previous_release_binary()


class Load:
    """Posts one alert per device in turn, each device's alerts numbered, to whichever ingests are in rotation."""

    def __init__(self, devices, targets):
        self.devices = devices
        self.targets = list(targets)
        self.accepted = {index: [] for index in range(len(devices))}
        self.refused = []
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def rotate(self, targets):
        with self.lock:
            self.targets = list(targets)

    def sent(self):
        return sum(len(numbers) for numbers in self.accepted.values())

    def _run(self):
        number = 0
        while not self.stopping.is_set():
            with self.lock:
                targets = list(self.targets)
            for index, device in enumerate(self.devices):
                target = targets[(number + index) % len(targets)]
                try:
                    status, body, _ = request("POST", f"{target.base}/wh/{device}", alert(index, "M", number % 2, str(number)))
                except OSError as error:
                    status, body = None, str(error)
                if status == 202:
                    self.accepted[index].append(str(number))
                else:
                    self.refused.append((target.base, status, body))
            number += 1

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *_):
        self.stopping.set()
        self.thread.join(timeout=60)


def _miscounted_devices(store, request):
    """Devices whose live-job count, which DEVICE_QUEUE_MAX reads, disagrees with their live jobs, in one snapshot. On
    SQLite the previous release's jobs are counted by the schema's insert trigger and this release's by its writer,
    which fires no trigger (docs/architecture.md, "Counting live jobs"): a job counted twice or not at all shows here."""
    sql = ("SELECT count(*) FROM devices d WHERE live_jobs <> "
           "(SELECT count(*) FROM jobs j WHERE j.device_id = d.id AND j.state <> 'discarded')")
    if "DATABASE_PATH" in store:
        import sqlite3
        with sqlite3.connect(store["DATABASE_PATH"]) as connection:
            return connection.execute(sql).fetchone()[0]
    name = store["DATABASE_URL"].split("///", 1)[1].split("?", 1)[0]
    return int(request.getfixturevalue("shared_postgres").query(name, sql)[0][0])


def test_a_rolling_upgrade_from_the_previous_release_refuses_and_loses_nothing(previous_binary, relay_binary, fake_apns,
                                                                               store, request, tmp_path):
    started = []

    def start(binary, command, **extra):
        settings = dict(APNS_URL=f"https://127.0.0.1:{fake_apns.port}", APNS_CA_FILE=TLS / "ca.pem",
                        APNS_AUTH_KEY_PATH=TLS / "apns-key.p8", APNS_KEY_ID="KEY1234567", APNS_TEAM_ID="TEAM123456",
                        APP_BUNDLE_IDENTIFIER=TOPIC, RETRY_BASE="50ms", RETRY_MAX="500ms", RATE_LIMIT_REGISTER="off",
                        RATE_LIMIT_WEBHOOK_IP="off", DEVICE_BURST="off", LEASE_TIMEOUT="5s", APNS_REQUEST_TIMEOUT="2s",
                        **store, **extra)
        env = relay_env(tmp_path, **settings)
        if command == "deliver":
            env["PORT"] = str(free_port())
        process = Relay(binary, command, env, tmp_path / f"{command}-{len(started)}.log")
        process.wait_metrics() if command == "deliver" else process.wait_healthy()
        started.append(process)
        return process

    try:
        old_ingest = start(previous_binary, "ingest")
        old_deliver = start(previous_binary, "deliver")
        devices = [register(old_ingest, 7000 + index)[0] for index in range(DEVICES)]
        with Load(devices, [old_ingest]) as load:
            wait_until(lambda: load.sent() >= 5 * DEVICES, what="load on the previous release")
            new_ingest = start(relay_binary, "ingest")  # migrates while the old processes run
            load.rotate([old_ingest, new_ingest])
            mark = load.sent()
            wait_until(lambda: load.sent() >= mark + 5 * DEVICES, what="load on both ingests")
            assert _miscounted_devices(store, request) == 0, "live jobs miscounted with both releases' ingests writing"
            new_deliver = start(relay_binary, "deliver")
            mark = load.sent()
            wait_until(lambda: load.sent() >= mark + 5 * DEVICES, what="load with both deliverers")
            old_deliver.signal(signal.SIGTERM)
            assert old_deliver.wait(timeout=30) == 0
            load.rotate([new_ingest])  # the balancer drains the old ingest first
            mark = load.sent()
            wait_until(lambda: load.sent() >= mark + 5 * DEVICES, what="load on the new ingest alone")
            old_ingest.signal(signal.SIGTERM)
            assert old_ingest.wait(timeout=30) == 0
            mark = load.sent()
            wait_until(lambda: load.sent() >= mark + 5 * DEVICES, what="load after the old ingest stopped")
        assert load.refused == [], f"webhooks not answered 202 during the upgrade: {load.refused[:5]}"
        for process in (new_ingest, new_deliver):
            assert process.process.poll() is None, "a process of this release exited on its own"

        def delivered(index):
            bodies = [push["payload"]["aps"]["alert"]["body"] for push in fake_apns.pushes(f"{7000 + index:064x}")]
            return set(load.accepted[index]) <= set(bodies)
        wait_until(lambda: all(delivered(index) for index in range(DEVICES)), timeout=120,
                   what="every acknowledged webhook delivered")
        for index in range(DEVICES):
            assert_accepted_in_order(fake_apns, 7000 + index, load.accepted[index], f"device {index}")
        assert _miscounted_devices(store, request) == 0, "live jobs miscounted after the upgrade"
    finally:
        for process in started:
            process.stop()


def _record_next_release(store, request, keeps_working_from, version=15):
    """The ledger row the next release's migration writes: a version this binary does not know, and what it says of
    older binaries (None: it changes what they read or write)."""
    kept = "NULL" if keeps_working_from is None else str(keeps_working_from)
    sql = (f"INSERT INTO schema_migrations (version, name, applied_at, keeps_working_from) "
           f"VALUES ({version}, 'a later release', 0, {kept})")
    if "DATABASE_PATH" in store:
        import sqlite3
        with sqlite3.connect(store["DATABASE_PATH"]) as connection:
            connection.execute(sql)
    else:
        name = store["DATABASE_URL"].split("///", 1)[1].split("?", 1)[0]
        request.getfixturevalue("shared_postgres").query(name, sql)


def test_this_release_restarts_beside_a_next_release_whose_migration_keeps_it_working(relays, relay, fake_apns, store,
                                                                                      request, tmp_path):
    """The limit v0.1.0 has (a restart refuses the newer schema) ends with this release: the next release's migration
    that only adds says so in the ledger, and this release's processes that restart during that upgrade start again
    and deliver, in order; one that does not keep it working still stops start-up with exit 2."""
    assert "(database schema 14)" in relay("version").stdout, "the versions written below follow this release's 14"
    settings = dict(DEVICE_BURST="off", **store)
    ingest, deliver = relays("ingest", **settings), relays("deliver", **settings)
    device, token = register(ingest, 7100)
    for number in range(3):
        assert request_alert(ingest, device, number) == 202
    wait_until(lambda: len(fake_apns.pushes(f"{7100:064x}")) == 3, what="the first alerts delivered")

    _record_next_release(store, request, keeps_working_from=14)
    migrated = relay("migrate", env=store)
    assert migrated.returncode == 0, migrated.stderr
    assert "database at schema version 15, newer than this release's 14" in migrated.stdout, migrated.stdout
    deliver.signal(signal.SIGTERM)
    ingest.signal(signal.SIGTERM)
    assert deliver.wait(timeout=30) == 0 and ingest.wait(timeout=30) == 0
    ingest, deliver = relays("ingest", **settings), relays("deliver", **settings)  # each waits until it serves
    for number in range(3, 6):
        assert request_alert(ingest, device, number) == 202
    wait_until(lambda: len(fake_apns.pushes(f"{7100:064x}")) == 6, what="the alerts after the restart delivered")
    assert_accepted_in_order(fake_apns, 7100, [str(number) for number in range(6)], "the device")
    for process in (ingest, deliver):
        assert "keeps it working" in process.log_path.read_text(), "the restart says it runs beside a newer release"

    _record_next_release(store, request, keeps_working_from=None, version=16)
    deliver.signal(signal.SIGTERM)
    assert deliver.wait(timeout=30) == 0
    with pytest.raises(RuntimeError, match="relay exited with 2"):
        relays("deliver", **settings)
    refused = max(tmp_path.glob("deliver-*.log"), key=lambda path: path.stat().st_mtime).read_text()
    assert "migration 16 does not keep it working" in refused, refused


def request_alert(ingest, device, number):
    status, _, _ = request("POST", f"{ingest.base}/wh/{device}", alert(0, "M", number % 2, str(number)))
    return status
