"""SPEC §2.3: a scrape shows the outage breaker's state and a configuration pause with APNs' reason, so a dashboard
and an alert rule see what the deliverer is doing (before, a pause showed only as one probe a minute in a counter)."""
import re

from relayproc import request, wait_until
from test_delivery import register, token


def scrape(relay):
    _, text, _ = request("GET", f"http://{relay.env['METRICS_ADDR']}/metrics")
    return {(m.group(1), m.group(2)): float(m.group(3))
            for m in re.finditer(r'^(kumapush_outage_breaker|kumapush_delivery_paused)\{(\w+="[^"]*")\} (\S+)$',
                                 text.decode(), re.M)}


def test_an_outage_opens_the_breaker_on_the_scrape_and_recovery_closes_it(relays, fake_apns):
    relay = relays("serve", DEVICE_BURST="off")
    device, _ = register(relay, 41)
    assert scrape(relay)[("kumapush_outage_breaker", 'state="closed"')] == 1
    fake_apns.unavailable = True
    for n in range(12):  # enough failures for the breaker to call it an outage
        assert request("POST", f"{relay.base}/wh/{device}", {"title": "t", "body": f"during {n}"})[0] == 202
    wait_until(lambda: scrape(relay).get(("kumapush_outage_breaker", 'state="open"')) == 1, timeout=60,
               what="the breaker open on the scrape")
    assert scrape(relay)[("kumapush_delivery_paused", 'reason=""')] == 0
    fake_apns.unavailable = False
    wait_until(lambda: scrape(relay).get(("kumapush_outage_breaker", 'state="closed"')) == 1, timeout=60,
               what="the breaker closed again")


def test_a_configuration_fault_shows_as_a_pause_with_its_reason(relays, fake_apns):
    relay = relays("serve", DEVICE_BURST="off")
    device, _ = register(relay, 42)
    fake_apns.by_token[token(42)] = (400, "BadTopic")
    assert request("POST", f"{relay.base}/wh/{device}", {"title": "t", "body": "b"})[0] == 202
    wait_until(lambda: scrape(relay).get(("kumapush_delivery_paused", 'reason="BadTopic"')) == 1, timeout=60,
               what="the pause on the scrape")
    assert scrape(relay)[("kumapush_outage_breaker", 'state="paused"')] == 1
