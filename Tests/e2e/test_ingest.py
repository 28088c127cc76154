"""The ingest process as the iPhone app and Uptime Kuma meet it, including being killed."""
import concurrent.futures
import http.client
import json
import pathlib
import signal
import socket
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


def replay(relay, fixture, device_id):
    """Sends a request captured from Uptime Kuma's real client (Tests/Fixtures/webhooks/real-*.http) byte for byte."""
    raw = (FIXTURES / fixture).read_bytes().replace(b"DEVICE_ID_HERE", device_id.encode())
    raw = raw.replace(b"Connection: keep-alive", b"Connection: close")
    with socket.create_connection(("127.0.0.1", relay.port), timeout=10) as connection:
        connection.sendall(raw)
        answer = b""
        while chunk := connection.recv(65536):
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    return int(head.split(b" ")[1]), json.loads(body)


def test_every_body_uptime_kuma_sends_is_stored_as_what_it_says(ingest, tmp_path):
    relay = ingest()
    device_id, _ = register(relay)
    ping, keyword = "\n1 packets transmitted, 0 received, 100% packet loss", 'not in [<html lang="en">\n<head>\n\t<title>'
    cases = {  # captured request -> (the job's event: k kind, s status, id monitor, n name, t title; text in its message)
        "real-json-ping-down.http": ({"k": "monitor", "s": 0, "id": 15, "n": "NAS ping"}, ping),
        "real-form-data-keyword-down.http": ({"k": "monitor", "s": 0, "id": 21, "n": 'Shop "Main" page'}, keyword),
        "real-custom-ping-down.http": ({"k": "generic", "t": "NAS ping"}, ping),
        "real-custom-keyword-down.http": ({"k": "generic", "t": 'Shop "Main" page'}, keyword),
        "real-custom-json-header-ping-down.http": ({"k": "generic", "t": "NAS ping"}, ping),
        "real-custom-text-ping-down.http": ({"k": "generic", "t": None}, "🔴 Down NAS ping: [NAS ping] [🔴 Down] PING"),
        "real-json-urlencoded-header-http-down.http": ({"k": "monitor", "s": 0, "id": 12, "n": "Shop API"}, "status code 503"),
        "real-get-http-up.http": ({"k": "monitor", "s": 1, "id": 33, "n": "Web 🐘🔴 \\ edge"}, "200 - OK"),
    }
    for fixture, (expected, text) in cases.items():
        status, body = replay(relay, fixture, device_id)
        assert status == 202 and body["status"] == "queued", (fixture, body)
        with sqlite3.connect(tmp_path / "relay.db") as connection:
            payload = connection.execute("SELECT payload FROM jobs WHERE public_id = ?", (body["id"],)).fetchone()[0]
        event = json.loads(payload)
        assert {key: event.get(key) for key in expected} == expected, fixture
        assert text in event["m"], fixture


def test_a_custom_body_with_no_usable_text_is_refused_with_what_and_where(ingest):
    relay = ingest()
    device_id, _ = register(relay)
    url = f"{relay.base}/wh/{device_id}"
    assert request("POST", url, b'{"title" "x"}')[:2] == (
        400, {"error": "invalid request body: invalid JSON at byte 9: expected ':'"})
    assert request("POST", url, b'{"name":"x"}', headers={"Content-Type": "text/plain"})[:2] == (
        400, {"error": "invalid request body: no title, body or msg field"})
    assert request("POST", url, b"<alert/>", headers={"Content-Type": "application/xml"})[:2] == (
        415, {"error": "unsupported content type: send JSON, a form or text/plain"})


def test_sigterm_exits_0_after_answering(ingest):
    relay = ingest()
    register(relay)
    relay.signal(signal.SIGTERM)
    assert relay.wait() == 0


def test_sigkill_while_clients_post_loses_no_acknowledged_webhook(ingest, tmp_path):
    """Clients post as fast as they can; the process is killed with SIGKILL mid-stream. Every id that got a 202
    must be in the database afterwards — "durable before acknowledged"."""
    # Every 202 must carry its job's id: no alert may fold into a digest (DEVICE_QUEUE_MAX) or be rate limited.
    relay = ingest(RATE_LIMIT_WEBHOOK="off", RATE_LIMIT_WEBHOOK_IP="off", DEVICE_QUEUE_MAX="100000")
    device_id, _ = register(relay)
    body = (FIXTURES / "g-multiline-emoji-ping-down.json").read_bytes()
    url = f"{relay.base}/wh/{device_id}"
    acknowledged, lock = [], threading.Lock()
    enough, killed = threading.Event(), threading.Event()

    def client():
        """Posts until the server is gone; returns how many answers were not 202 (there must be none)."""
        refused = 0
        while True:
            try:
                status, answer, _ = request("POST", url, body, timeout=5)
            except (OSError, http.client.HTTPException):
                if killed.is_set():
                    return refused  # the server is gone (mid-answer, or refusing connections)
                raise
            if status != 202:
                refused += 1
                continue
            with lock:
                acknowledged.append(answer["id"])
                if len(acknowledged) >= 300:
                    enough.set()

    with concurrent.futures.ThreadPoolExecutor(max_workers=16) as pool:
        clients = [pool.submit(client) for _ in range(16)]
        try:
            reached = enough.wait(timeout=60)
        finally:  # the kill also ends the clients' loops, so leaving the pool never waits on a live server
            killed.set()
            relay.signal(signal.SIGKILL)
            relay.wait()
        # A client that failed before the kill fails the test here, with its own error.
        refused = [future.result(timeout=60) for future in clients]
        assert reached, "clients never got 300 acknowledgements"
        assert refused == [0] * 16, "answers other than 202 before the kill"

    with sqlite3.connect(tmp_path / "relay.db") as connection:
        stored = {row[0] for row in connection.execute("SELECT public_id FROM jobs")}
    missing = set(acknowledged) - stored
    assert not missing, f"{len(missing)} acknowledged webhooks were lost"
    assert len(acknowledged) >= 300
