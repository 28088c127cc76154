"""QUEUE_MAX as an operator meets it: refusals while the queue is full, and acceptance again once it drains."""
from relayproc import request, wait_until

ALERT = b'{"heartbeat":{"status":0,"msg":"timeout of 48000ms exceeded"},"monitor":{"id":3,"name":"API"},"msg":"x"}'


def test_a_full_queue_refuses_then_accepts_again_within_seconds_of_draining(relays, fake_apns):
    """Issue 12: the depth estimate used to be refreshed only after a commit, and nothing commits while everything
    is refused, so ingest answered 503 until restarted."""
    ingest = relays("ingest", QUEUE_MAX="5")
    status, body, _ = request("POST", f"{ingest.base}/devices", {"device_token": "ab" * 32})
    device_id = body["id"]
    url = f"{ingest.base}/wh/{device_id}"
    assert [request("POST", url, ALERT)[0] for _ in range(5)] == [202] * 5
    status, body, headers = request("POST", url, ALERT)
    assert status == 503 and body == {"error": "queue unavailable"} and headers["Retry-After"] == "5"

    relays("deliver", DEVICE_BURST="off")
    wait_until(lambda: len(fake_apns.pushes()) == 5, timeout=30, what="the backlog delivered")

    def accepted():
        status, body, _ = request("POST", url, ALERT)
        assert status in (202, 503), (status, body)
        return status == 202
    wait_until(accepted, timeout=10, interval=0.2, what="ingest accepting again after the queue drained")
