"""Uptime Kuma's own HTTP client (real axios and form-data, uptime_kuma_client.js) against the real relay and the
independent APNs fake: every body mode Uptime Kuma has, with real ping, HTTP and keyword failures, arrives as a push
that says what the monitor said (SPEC §2.2, issue #12)."""
import pytest

import uptime_kuma
from relayproc import request, wait_until

SEEDS = {event: 500 + n for n, event in enumerate(uptime_kuma.EVENTS)}


def token(seed):
    return f"{seed:064x}"


def expected_alert(mode, event):
    """(title, body) the phone must show for `event` sent in `mode`."""
    monitor, heartbeat = uptime_kuma.EVENTS[event]
    if mode in ("json", "form-data", "get", "json-urlencoded-header"):
        if heartbeat is None:
            return "KumaPush", uptime_kuma.TEST_MESSAGE
        return f"{monitor['name']} is {'up' if heartbeat['status'] == 1 else 'down'}", heartbeat["msg"]
    if mode == "custom-text":
        return "KumaPush", uptime_kuma.rendered(uptime_kuma.TEXT_TEMPLATE, monitor, heartbeat).strip()
    name = "Monitor Name not available" if monitor is None else monitor["name"]
    return name, uptime_kuma.uptime_kuma_msg(monitor, heartbeat)


@pytest.mark.parametrize("mode", list(uptime_kuma.MODES))
def test_every_alert_arrives_as_a_push_that_holds_the_message(mode, relays, fake_apns):
    relay = relays("serve")
    for event, seed in SEEDS.items():
        status, device, _ = request("POST", relay.base + "/devices", {"device_token": token(seed)})
        assert status == 201, device
        result = uptime_kuma.send(f"{relay.base}/wh/{device['id']}", mode, event)
        assert result["ok"], (event, result)
        assert result["status"] in (200, 202), (event, result)

        push = wait_until(lambda: fake_apns.pushes(token(seed)), what=f"the {event} push")[0]
        alert = push["payload"]["aps"]["alert"]
        title, body = expected_alert(mode, event)
        assert (alert["title"], alert["body"]) == (title, body), event
    # The messages hold what broke custom bodies before (#3778, #7211): newlines, quotes, a tab, backslashes, emoji.
    bodies = [fake_apns.bodies(token(seed))[0] for seed in SEEDS.values()]
    assert any("\n\n--- 10.20.0.7 ping statistics ---\n" in body for body in bodies)
    assert any('<html lang="en">\n<head>\n\t<title>Shop "Main" C:\\' in body for body in bodies)


def test_a_template_uptime_kuma_cannot_render_as_json_reports_a_useful_error_and_nothing_is_sent(relays, fake_apns):
    """A custom body whose text has no usable content is the one thing refused; Uptime Kuma shows the error."""
    relay = relays("serve")
    status, device, _ = request("POST", relay.base + "/devices", {"device_token": token(599)})
    assert status == 201
    no_text = {"webhookContentType": "custom", "webhookCustomBody": '{"name":"{{name}}"}'}
    result = uptime_kuma.send(f"{relay.base}/wh/{device['id']}", no_text, "http-down")
    assert not result["ok"] and result["status"] == 400
    assert result["data"] == {"error": "invalid request body: no title, body or msg field"}
    assert fake_apns.pushes(token(599), status=None) == []


@pytest.mark.parametrize("mode", ["json", "form-data", "custom"])
def test_a_keyword_miss_cut_in_the_middle_of_an_emoji_arrives(mode, relays, fake_apns):
    """Uptime Kuma's keyword monitor quotes the page's first 47 UTF-16 units (JavaScript's substring), which can cut
    an emoji in half. axios's JSON.stringify then writes the lone half as \\ud83d (a custom body gets Node's own
    U+FFFD instead). Refused as invalid JSON, that lost the whole DOWN alert; the phone now shows U+FFFD there."""
    page = "<title>" + "x" * 39 + "🐘 Shop</title>"  # the elephant's first half is UTF-16 unit 46, the last kept
    cut = page.encode("utf-16-le", "surrogatepass")[:94].decode("utf-16-le", "surrogatepass")
    assert cut.endswith("\ud83d")
    monitor, heartbeat = uptime_kuma.monitor_alert(22, "Shop page", 0, f"200 - OK, but keyword is not in [{cut}...]")
    relay = relays("serve")
    status, device, _ = request("POST", relay.base + "/devices", {"device_token": token(610)})
    assert status == 201
    result = uptime_kuma.send_many([uptime_kuma.webhook(f"{relay.base}/wh/{device['id']}", mode, monitor, heartbeat)])[0]
    assert result["ok"] and result["status"] == 202, result
    alert = wait_until(lambda: fake_apns.pushes(token(610)), what="the push")[0]["payload"]["aps"]["alert"]
    shown = "200 - OK, but keyword is not in [<title>" + "x" * 39 + "\ufffd...]"
    if mode == "custom":
        assert (alert["title"], alert["body"]) == ("Shop page", f"[Shop page] [🔴 Down] {shown}")
    else:
        assert (alert["title"], alert["body"]) == ("Shop page is down", shown)
