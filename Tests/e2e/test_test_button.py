"""The Test button against the real binary and the independent APNs fake: it never says "sent" for a push that
cannot arrive (SPEC §2.2, the 502 rows)."""
import pathlib
import time

from relayproc import request, wait_until

FIXTURES = pathlib.Path(__file__).resolve().parents[1] / "Fixtures" / "webhooks"
TEST_BODY = (FIXTURES / "d-test-button.json").read_bytes()


def register(relay, seed):
    status, body, _ = request("POST", relay.base + "/devices", {"device_token": f"{seed:064x}"})
    assert status in (200, 201), body
    return body["id"]


def test_a_wrong_topic_answers_the_test_button_with_502_at_once(relays, fake_apns):
    """APNs answers BadTopic (a configuration fault): delivery pauses and keeps the job, and the waiting Test
    request is answered with the reason instead of waiting out TEST_WAIT (30 s here) into a 202 that Uptime Kuma
    shows as "Sent Successfully". A 502 is only possible before TEST_WAIT ends, so the status alone shows it was
    answered early; the elapsed time is printed for the record."""
    relay = relays("serve", TEST_WAIT="30s")
    device = register(relay, 7)
    fake_apns.by_token[f"{7:064x}"] = (400, "BadTopic")
    started = time.monotonic()
    status, body, _ = request("POST", f"{relay.base}/wh/{device}", TEST_BODY, timeout=40)
    print(f"answered in {time.monotonic() - started:.3f} s")
    assert (status, body) == (502, {"error": "relay cannot deliver: BadTopic (configuration)"})

    # While paused, a second Test request is answered the same way, and a real alert is still kept (202).
    assert request("POST", f"{relay.base}/wh/{device}", TEST_BODY, timeout=40)[:2] == \
        (502, {"error": "relay cannot deliver: BadTopic (configuration)"})
    assert request("POST", f"{relay.base}/wh/{device}", (FIXTURES / "a-1.23-http-down.json").read_bytes())[0] == 202


def test_a_test_press_folded_at_the_device_cap_while_delivery_is_paused_answers_502(relays, fake_apns):
    """Delivery paused by BadTopic keeps every job, so a device fills to DEVICE_QUEUE_MAX; a Test press then is folded
    into the waiting digest. It was answered 202 merged, which Uptime Kuma shows as sent, for a push that cannot
    arrive (SPEC §2.2)."""
    relay = relays("serve", TEST_WAIT="30s", DEVICE_QUEUE_MAX="3")
    device = register(relay, 8)
    fake_apns.by_token[f"{8:064x}"] = (400, "BadTopic")
    alert = (FIXTURES / "a-1.23-http-down.json").read_bytes()
    assert request("POST", f"{relay.base}/wh/{device}", alert)[0] == 202
    wait_until(lambda: "APNs rejects our credentials or topic: delivery paused, jobs kept" in relay.log_path.read_text(),
               what="delivery paused (the runbook's log line)")
    assert [request("POST", f"{relay.base}/wh/{device}", alert)[1]["status"] for _ in range(2)] == ["queued", "queued"]

    status, body, _ = request("POST", f"{relay.base}/wh/{device}", TEST_BODY, timeout=40)
    assert (status, body) == (502, {"error": "relay cannot deliver: BadTopic (configuration)"})
    assert request("POST", f"{relay.base}/wh/{device}", alert)[:2] == (202, {"status": "merged"}), "an alert is kept"
