"""Liveness and readiness of each process kind (SPEC §2.3): ingest's `/readyz` (and `/health`) on the API port says
whether a webhook would be stored now and never depends on delivery; delivery's `/readyz` on METRICS_ADDR says
whether pushes go out. A deliverer that cannot send (an APNs that grants no stream: jobs due, nothing sent, no
failure known) reports a stall there while ingest stays ready and keeps storing webhooks."""
import subprocess

import pytest

from conftest import TLS, TOPIC
from relayproc import request, wait_until
from test_delivery import alert, register, token


@pytest.fixture
def streamless_apns(fake_apns):
    """An APNs that takes every push and answers none (parked), one stream per connection: with one connection the
    first push holds the only stream, the next device's job is due and cannot be sent, and APNs reports no failure.
    The stall detector's reset gets a new connection whose one push is parked again, so the stall stands."""
    fake_apns.max_streams = 1
    fake_apns.hold = True
    return fake_apns


def probe(relay, path):
    status, body, _ = request("GET", f"http://{relay.env['METRICS_ADDR']}{path}")
    return status, body


def healthcheck(relay_binary, relay, *flags):
    return subprocess.run([str(relay_binary), "healthcheck", *flags], env=relay.env, capture_output=True, text=True,
                          timeout=30)


def stall(relay, ingest, streamless_apns):
    """Gets the deliverer stalled: the first push takes the only stream, the second device's has none to go on."""
    device_id, _ = register(ingest, 1)
    second_id, _ = register(ingest, 2)
    assert request("POST", f"{ingest.base}/wh/{device_id}", alert(1, "DB", 0, "first"))[0] == 202
    wait_until(lambda: streamless_apns.held(), what="the first push parked")
    assert request("POST", f"{ingest.base}/wh/{second_id}", alert(1, "DB", 1, "second"))[0] == 202
    wait_until(lambda: probe(relay, "/readyz") == (503, {"error": "delivery stalled"}), timeout=30,
               what="delivery's /readyz reporting the stall")
    return device_id


def assert_ingest_ready(ingest, device_id):
    assert request("GET", ingest.base + "/readyz")[:2] == (200, {"status": "ok"})
    assert request("GET", ingest.base + "/health")[:2] == (200, {"status": "ok"}), "/health is ingest's readiness"
    assert request("GET", ingest.base + "/livez")[:2] == (200, {"status": "ok"})
    assert request("POST", f"{ingest.base}/wh/{device_id}", alert(1, "DB", 0, "third"))[0] == 202


def test_serve_stays_ready_for_webhooks_while_its_delivery_is_stalled(relays, relay_binary, streamless_apns):
    relay = relays("serve", APNS_CONNECTIONS="1", STALL_TIMEOUT="1s")
    assert probe(relay, "/readyz") == (200, {"status": "ok"})
    device_id = stall(relay, relay, streamless_apns)
    assert_ingest_ready(relay, device_id)
    assert probe(relay, "/livez") == (200, {"status": "ok"}), "a stalled deliverer is not a wedged loop"
    assert healthcheck(relay_binary, relay).returncode == 0
    failed = healthcheck(relay_binary, relay, "--delivery")
    assert failed.returncode == 1 and "/readyz answered 503" in failed.stderr


def test_a_stalled_deliverer_is_not_ready_while_ingest_is(relays, relay_binary, streamless_apns):
    ingest = relays("ingest")
    deliver = relays("deliver", APNS_CONNECTIONS="1", STALL_TIMEOUT="1s")
    assert probe(deliver, "/readyz") == (200, {"status": "ok"})
    assert healthcheck(relay_binary, deliver, "--delivery").returncode == 0
    device_id = stall(deliver, ingest, streamless_apns)
    assert_ingest_ready(ingest, device_id)
    assert probe(deliver, "/livez") == (200, {"status": "ok"})
    assert healthcheck(relay_binary, deliver, "--delivery").returncode == 1


def test_a_deliverer_paused_for_a_configuration_fault_says_why(relays, fake_apns):
    relay = relays("serve")
    device_id, _ = register(relay, 7)
    fake_apns.by_token[token(7)] = (403, "InvalidProviderToken")
    assert request("POST", f"{relay.base}/wh/{device_id}", alert(1, "DB", 0, "down"))[0] == 202
    wait_until(lambda: probe(relay, "/readyz") == (503, {"error": "paused: InvalidProviderToken"}), timeout=30,
               what="delivery's /readyz reporting the pause")
    assert request("GET", relay.base + "/readyz")[:2] == (200, {"status": "ok"}), "a pause never makes ingest unready"
