"""`aps.badge` = how many of the device's monitors are down (SPEC §3), against the real binary and the fake APNs."""
import concurrent.futures

from relayproc import request, wait_until


def register(relay, seed):
    status, body, _ = request("POST", relay.base + "/devices", {"device_token": f"{seed:064x}"})
    assert status in (200, 201), body
    return body["id"]


def alert(monitor_id, status):
    return {"heartbeat": {"monitorID": monitor_id, "status": status, "msg": "m", "important": True},
            "monitor": {"id": monitor_id, "name": f"M{monitor_id}"}, "msg": "m"}


def test_badges_count_the_devices_down_monitors_in_order(relays, fake_apns):
    relay = relays("serve")
    phone, other = register(relay, 21), register(relay, 22)
    assert request("POST", f"{relay.base}/wh/{other}", alert(1, 0))[0] == 202
    for monitor, status in [(1, 0), (2, 0), (3, 0), (2, 1)]:
        assert request("POST", f"{relay.base}/wh/{phone}", alert(monitor, status))[0] == 202
    pushes = wait_until(lambda: len(fake_apns.pushes(f"{21:064x}")) == 4 and fake_apns.pushes(f"{21:064x}"), what="four pushes")
    assert [p["payload"]["aps"]["badge"] for p in pushes] == [1, 2, 3, 2], "another device's monitors do not count"
    assert [p["payload"]["aps"]["alert"]["title"] for p in pushes] == ["M1 is down", "M2 is down", "M3 is down", "M2 is up"]
    assert wait_until(lambda: fake_apns.pushes(f"{22:064x}"))[0]["payload"]["aps"]["badge"] == 1
    # The Test button carries the current count; the UP that ends the last outage clears the badge with 0.
    test_button = {"heartbeat": None, "monitor": None, "msg": "My Webhook Alert (1) Testing"}
    assert request("POST", f"{relay.base}/wh/{phone}", test_button)[0] in (200, 202)
    for monitor in (1, 3):
        request("POST", f"{relay.base}/wh/{phone}", alert(monitor, 1))
    pushes = wait_until(lambda: len(fake_apns.pushes(f"{21:064x}")) == 7 and fake_apns.pushes(f"{21:064x}"), what="seven pushes")
    assert [p["payload"]["aps"]["badge"] for p in pushes[4:]] == [2, 1, 0]


def test_an_alert_storm_digest_carries_the_count_after_its_last_alert(relays, fake_apns):
    relay = relays("serve", RATE_LIMIT_WEBHOOK="off", DEVICE_BURST="3")
    phone = register(relay, 23)

    def post(monitor):
        return request("POST", f"{relay.base}/wh/{phone}", alert(monitor, 0))[0]

    with concurrent.futures.ThreadPoolExecutor(max_workers=4) as pool:
        assert set(pool.map(post, range(100, 140))) == {202}

    def carried(title):
        """A digest title starts with how many alerts it carries; a single alert is `<monitor> is down`."""
        return int(title.split()[0].replace(",", "")) if " is " not in title else 1

    def counted():
        return sum(carried(push["payload"]["aps"]["alert"]["title"]) for push in fake_apns.pushes(f"{23:064x}"))

    wait_until(lambda: counted() == 40, what="all 40 alerts accounted for")
    pushes = fake_apns.pushes(f"{23:064x}")
    assert any(carried(p["payload"]["aps"]["alert"]["title"]) > 1 for p in pushes), "a digest was sent"
    running = 0
    for push in pushes:
        running += carried(push["payload"]["aps"]["alert"]["title"])
        assert push["payload"]["aps"]["badge"] == running, "each push's badge counts every down alert so far"
