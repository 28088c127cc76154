"""Sandbox and production tokens on one relay (SPEC §4), against two instances of the independent APNs fake: the
configured (production) one and a sandbox. Each refuses the other's tokens with BadDeviceToken, as Apple does."""
import re

import pytest

from conftest import TLS, TOPIC
from fake_apns import FakeAPNs
from relayproc import request, wait_until


@pytest.fixture
def sandbox():
    fake = FakeAPNs(str(TLS / "server.pem"), str(TLS / "server.key"), str(TLS / "apns-key.pub.pem"), TOPIC).start()
    yield fake
    fake.stop()


def register(relay, seed):
    status, body, _ = request("POST", relay.base + "/devices", {"device_token": f"{seed:064x}"})
    assert status in (200, 201), body
    return body["id"], body["auth_token"]


def alert(n):
    return {"heartbeat": {"monitorID": 1, "status": 0, "msg": f"event {n}", "important": True},
            "monitor": {"id": 1, "name": "DB"}, "msg": f"event {n}"}


def metric(relay, name, labels):
    status, text, _ = request("GET", f"http://{relay.env['METRICS_ADDR']}/metrics")
    text = text.decode() if isinstance(text, bytes) else str(text)
    match = re.search(rf'^{name}\{{{labels}\}} (\S+)$', text, re.M)
    return float(match.group(1)) if match else 0.0


def test_sandbox_and_production_tokens_on_one_relay(relays, fake_apns, sandbox):
    relay = relays("serve", APNS_SANDBOX_URL=f"https://127.0.0.1:{sandbox.port}", DEVICE_BURST="off")
    testflight, _ = register(relay, 41)
    app_store, _ = register(relay, 42)
    broken, broken_auth = register(relay, 43)
    fake_apns.by_token[f"{41:064x}"] = (400, "BadDeviceToken")
    fake_apns.by_token[f"{43:064x}"] = (400, "BadDeviceToken")
    sandbox.by_token[f"{42:064x}"] = (400, "BadDeviceToken")
    sandbox.by_token[f"{43:064x}"] = (400, "BadDeviceToken")

    # A sandbox token on a production relay gets its alert: one resend, then straight to the sandbox.
    for n in range(3):
        assert request("POST", f"{relay.base}/wh/{testflight}", alert(n))[0] == 202
    wait_until(lambda: len(sandbox.bodies(f"{41:064x}")) == 3, what="three pushes through the sandbox")
    assert sandbox.bodies(f"{41:064x}") == ["event 0", "event 1", "event 2"]
    assert len([r for r in fake_apns.received if r["token"] == f"{41:064x}"]) == 1
    assert metric(relay, "kumapush_apns_environment_switches_total", 'to="sandbox"') >= 1
    assert metric(relay, "kumapush_apns_environment_learned_total", 'environment="sandbox"') == 1

    # A production token never touches the sandbox.
    assert request("POST", f"{relay.base}/wh/{app_store}", alert(9))[0] == 202
    wait_until(lambda: fake_apns.bodies(f"{42:064x}") == ["event 9"], what="the App Store device's push")
    assert not [r for r in sandbox.received if r["token"] == f"{42:064x}"]

    # A token both refuse is dead-lettered once, and the device is kept.
    assert request("POST", f"{relay.base}/wh/{broken}", alert(5))[0] == 202

    def kept_with_error():
        status, device, _ = request("GET", f"{relay.base}/devices/{broken}", headers={"Authorization": f"Bearer {broken_auth}"})
        return status == 200 and device["last_delivery_error"] == "BadDeviceToken"
    wait_until(kept_with_error, what="the device kept with BadDeviceToken")
    assert len([r for r in sandbox.received if r["token"] == f"{43:064x}"]) == 1
