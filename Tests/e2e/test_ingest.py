"""The ingest process as the iPhone app and Uptime Kuma meet it, including being killed."""
import concurrent.futures
import pathlib
import signal
import sqlite3
import threading

import pytest

from relayproc import Relay, relay_env, request

FIXTURES = pathlib.Path(__file__).resolve().parents[1] / "Fixtures" / "webhooks"
TOKEN = "0f" * 32


@pytest.fixture
def ingest(relay_binary, tmp_path):
    started = []

    def start(**overrides):
        relay = Relay(relay_binary, "ingest", relay_env(tmp_path, **overrides), tmp_path / "ingest.log").wait_healthy()
        started.append(relay)
        return relay

    yield start
    for relay in started:
        relay.stop()


def register(relay, token=TOKEN):
    status, body, _ = request("POST", relay.base + "/devices", {"device_token": token})
    assert status in (200, 201), body
    return body["id"], body["auth_token"]


def test_the_app_registers_reads_updates_and_unregisters(ingest):
    relay = ingest()
    device_id, auth = register(relay)
    bearer = {"Authorization": f"Bearer {auth}"}

    status, device, headers = request("GET", f"{relay.base}/devices/{device_id}", headers=bearer)
    assert status == 200 and headers["Content-Type"] == "application/json"
    assert set(device) >= {"id", "device_token", "last_successful_notification", "date_added", "down_notification_level"}
    assert device["last_successful_notification"] == "" and "auth_token" not in device

    status, device, _ = request("PATCH", f"{relay.base}/devices/{device_id}", {"down_notification_level": "time-sensitive"},
                                headers=bearer)
    assert status == 200 and device["down_notification_level"] == "time-sensitive"

    status, _, _ = request("DELETE", f"{relay.base}/devices/{device_id}", headers=bearer)
    assert status == 204
    status, body, _ = request("POST", f"{relay.base}/wh/{device_id}", (FIXTURES / "a-1.23-http-down.json").read_bytes())
    assert status == 404 and body == {"error": "device not found"}


def test_every_uptime_kuma_body_mode_is_queued(ingest):
    relay = ingest()
    device_id, _ = register(relay)
    url = f"{relay.base}/wh/{device_id}"
    boundary = (FIXTURES / "l-form-data-test.boundary").read_text()
    answers = [
        request("POST", url, (FIXTURES / "b-2.5-http-down-in-group.json").read_bytes()),
        request("POST", url, (FIXTURES / "l-form-data-test.multipart").read_bytes(),
                headers={"Content-Type": f"multipart/form-data; boundary={boundary}"}),
        request("POST", url, (FIXTURES / "f-1.23-ping-down-reminder.json").read_bytes(),
                headers={"Content-Type": "application/x-www-form-urlencoded"}),
        request("POST", url, (FIXTURES / "h-double-encoded.json").read_bytes()),
        request("GET", url + "?" + (FIXTURES / "j-get-query.txt").read_text()),
    ]
    assert [status for status, _, _ in answers] == [202] * len(answers)
    assert all(body["status"] == "queued" for _, body, _ in answers)


def test_sigterm_exits_0_after_answering(ingest):
    relay = ingest()
    register(relay)
    relay.signal(signal.SIGTERM)
    assert relay.wait() == 0


def test_sigkill_while_clients_post_loses_no_acknowledged_webhook(ingest, tmp_path):
    """Clients post as fast as they can; the process is killed with SIGKILL mid-stream. Every id that got a 202
    must be in the database afterwards — "durable before acknowledged"."""
    relay = ingest(RATE_LIMIT_WEBHOOK="off")
    device_id, _ = register(relay)
    body = (FIXTURES / "g-multiline-emoji-ping-down.json").read_bytes()
    url = f"{relay.base}/wh/{device_id}"
    acknowledged, lock = [], threading.Lock()
    enough = threading.Event()

    def client():
        while True:
            try:
                status, answer, _ = request("POST", url, body, timeout=5)
            except OSError:
                return  # the server is gone
            if status == 202:
                with lock:
                    acknowledged.append(answer["id"])
                    if len(acknowledged) >= 300:
                        enough.set()

    with concurrent.futures.ThreadPoolExecutor(max_workers=16) as pool:
        for _ in range(16):
            pool.submit(client)
        assert enough.wait(timeout=60), "clients never got 300 acknowledgements"
        relay.signal(signal.SIGKILL)
        relay.wait()

    with sqlite3.connect(tmp_path / "relay.db") as connection:
        stored = {row[0] for row in connection.execute("SELECT public_id FROM jobs")}
    missing = set(acknowledged) - stored
    assert not missing, f"{len(missing)} acknowledged webhooks were lost"
    assert len(acknowledged) >= 300
