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


def test_a_rolling_upgrade_from_the_previous_release_refuses_and_loses_nothing(previous_binary, relay_binary, fake_apns,
                                                                               store, tmp_path):
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
    finally:
        for process in started:
            process.stop()
