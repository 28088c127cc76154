"""Hostile clients and storage (issue 13): one registered device flooded with 64 KiB bodies whose token APNs
refuses cannot fill the disk or the queue, and other devices' webhooks keep getting 202."""
import json
import os
import sqlite3
import threading

from relayproc import request, wait_until

FLOOD = 600
DEAD_LETTER_MAX = 100


def register(relay, seed):
    status, body, _ = request("POST", relay.base + "/devices", {"device_token": f"{seed:064x}"})
    assert status in (200, 201), body
    return body["id"]


def database_bytes(path):
    return sum(os.path.getsize(f"{path}{suffix}") for suffix in ("", "-wal") if os.path.exists(f"{path}{suffix}"))


def test_a_dead_lettering_device_flooded_with_large_bodies_stays_within_its_budgets(relays, fake_apns):
    relay = relays("serve", DEAD_LETTER_MAX=str(DEAD_LETTER_MAX), DEVICE_QUEUE_MAX="50", DEVICE_BURST="off",
                   RATE_LIMIT_WEBHOOK_IP="off")
    attacker, victim = register(relay, 61), register(relay, 62)
    fake_apns.by_token[f"{61:064x}"] = (400, "BadDeviceToken")
    big = "x" * 60_000
    body = json.dumps({"heartbeat": {"status": 0, "msg": big}, "monitor": {"id": 1, "name": "M"}, "msg": "m"}).encode()
    assert len(body) > 60_000
    statuses, errors = [], []

    def flood(count):
        try:
            for _ in range(count):
                statuses.append(request("POST", f"{relay.base}/wh/{attacker}", body, timeout=30)[0])
        except Exception as error:  # noqa: BLE001 - any failure in a client thread fails the test below
            errors.append(error)

    threads = [threading.Thread(target=flood, args=(FLOOD // 4,)) for _ in range(4)]
    for thread in threads:
        thread.start()
    # Meanwhile another device's alerts keep being accepted and delivered.
    for n in range(10):
        alert = {"heartbeat": {"status": 0, "msg": f"victim {n}"}, "monitor": {"id": 2, "name": "V"}, "msg": "v"}
        assert request("POST", f"{relay.base}/wh/{victim}", alert, timeout=30)[0] == 202
    for thread in threads:
        thread.join(timeout=120)
    assert not errors, errors[:3]
    assert set(statuses) == {202} and len(statuses) == FLOOD
    wait_until(lambda: len(fake_apns.bodies(f"{62:064x}")) == 10, timeout=60, what="the other device's alerts")

    db = relay.env["DATABASE_PATH"]

    def counts():
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10) as connection:
            live = connection.execute("SELECT count(*) FROM jobs WHERE state != 'discarded'").fetchone()[0]
            dead = connection.execute("SELECT count(*) FROM jobs WHERE state = 'discarded'").fetchone()[0]
            largest = connection.execute("SELECT coalesce(max(length(payload)), 0) FROM jobs").fetchone()[0]
        return live, dead, largest

    # Every flood job is dead-lettered, and the budget purges the oldest (the deliverer checks every 10 s).
    wait_until(lambda: counts()[0] == 0 and counts()[1] <= DEAD_LETTER_MAX, timeout=90, what="dead letters within the budget")
    live, dead, largest = counts()
    assert largest < 5_000, "a job keeps what a push can show, not 60 KB"
    # 600 bodies of 60 KB went in (36 MB); what stays on disk is bounded by the budgets, not by the flood.
    assert database_bytes(db) < 12 * 1024 * 1024, database_bytes(db)
