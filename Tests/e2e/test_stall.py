"""Delivery never stalls (issue #19, SPEC §4 "Outages"): an APNs outage that outlives JOB_TTL, a probe whose device
is deleted while it is in flight, a probe whose connection drops. After each, APNs recovers and the relay must
deliver a fresh webhook within seconds and every replayed dead letter in per-device order.

The deadlines below stay under STALL_TIMEOUT (30 s by default), so the stall detector's reset cannot rescue a
wedged outage breaker: these tests hold the breaker itself to having a way out of every state."""
import json
import pathlib
import subprocess
import time

import pytest

from relayproc import request, wait_until

OUTAGE_SECONDS = 6
RECOVERY_DEADLINE = 20  # generous for "within seconds", and below STALL_TIMEOUT


def token(seed):
    return f"{seed:064x}"


def register(relay, seed):
    status, body, _ = request("POST", relay.base + "/devices", {"device_token": token(seed)})
    assert status in (200, 201), body
    return body["id"], body["auth_token"]


def alert(text):
    return {"heartbeat": {"monitorID": 1, "status": 0, "msg": text, "important": True},
            "monitor": {"id": 1, "name": "DB"}, "msg": f"[DB] {text}"}


def cli(relay_binary, relay, *args):
    result = subprocess.run([str(relay_binary), *args], env=relay.env, capture_output=True, text=True, timeout=30)
    assert result.returncode == 0, result.stderr
    return result.stdout


def live_jobs(relay_binary, relay):
    jobs = json.loads(cli(relay_binary, relay, "stats", "--json"))["jobs"]
    return sum(count for state, count in jobs.items() if state != "discarded")


def no_device_had_two_pushes_in_flight(fake_apns):
    by_token = {}
    for record in fake_apns.requests:
        by_token.setdefault(record["token"], []).append(record)
    for records in by_token.values():
        records.sort(key=lambda r: r["started"])
        for earlier, later in zip(records, records[1:]):
            assert earlier["ended"] is not None and earlier["ended"] <= later["started"], (earlier, later)


def delete_the_probes_device(relay, fake_apns, devices, post):
    """Parks the next push (the probe, once the breaker is open), deletes its device while it is in flight, then
    lets APNs answer it with the outage's 503. A new webhook makes sure there is a job to probe with."""
    fake_apns.hold = True
    post(1, "event during the outage")
    probe = wait_until(lambda: fake_apns.held(), timeout=30, what="a push in flight during the outage")[0]
    seed = next(seed for seed, (_, _) in devices.items() if token(seed) == probe["token"])
    device_id, auth = devices.pop(seed)
    assert request("DELETE", f"{relay.base}/devices/{device_id}", headers={"Authorization": f"Bearer {auth}"})[0] == 204
    fake_apns.release()


def drop_the_probes_connection(relay, fake_apns, devices, post):
    """The next push's connection is cut before any answer (the probe, once the breaker is open). A new webhook
    makes sure there is a job to probe with."""
    answered = len(fake_apns.requests)
    fake_apns.drop_next = True
    post(2, "event during the outage")
    wait_until(lambda: not fake_apns.drop_next and len(fake_apns.requests) > answered, timeout=30,
               what="a push whose connection the fake cut")


def nothing_more(relay, fake_apns, devices, post):
    pass


@pytest.mark.parametrize("during_outage", [nothing_more, delete_the_probes_device, drop_the_probes_connection],
                         ids=["expired-probe", "probe-device-deleted", "probe-connection-dropped"])
def test_after_an_outage_longer_than_job_ttl_delivery_resumes_and_replayed_jobs_arrive_in_order(
        relays, fake_apns, relay_binary, during_outage):
    relay = relays("serve", JOB_TTL="2s", DEVICE_BURST="off")
    devices = {seed: register(relay, seed) for seed in (1, 2)}
    fake_apns.unavailable = True
    outage_started = time.monotonic()
    sent = {1: [], 2: []}
    last_post = [0.0]
    log = pathlib.Path(relay.log.name)

    def post(seed, text):
        status, body, _ = request("POST", f"{relay.base}/wh/{devices[seed][0]}", alert(text))
        assert status == 202, body
        sent[seed].append(text)
        last_post[0] = time.monotonic()
    for n in range(6):
        post(1 + n % 2, f"event {n}")
    # The breaker must be open (its error line logged) before its probe is interfered with. Two devices may not
    # fail often enough to open it before their jobs expire, so more devices keep failing until it opens.
    deadline = time.monotonic() + 30
    while "APNs outage" not in log.read_text():
        assert time.monotonic() < deadline, "the relay never opened its outage breaker (its log line 'APNs outage')"
        seed = 10 + len(devices)
        devices[seed], sent[seed] = register(relay, seed), []
        post(seed, f"keeping APNs busy {seed}")
        time.sleep(0.1)  # the load's pace
    during_outage(relay, fake_apns, devices, post)
    # The outage lasts its full length, and outlives every job's JOB_TTL (the scenario's pace, not a wait for the
    # relay: whatever the relay does meanwhile, APNs answers 503).
    end = max(outage_started + OUTAGE_SECONDS, last_post[0] + 2.5)
    time.sleep(max(0.0, end - time.monotonic()))
    fake_apns.unavailable = False

    fresh_id, _ = register(relay, 3)
    assert request("POST", f"{relay.base}/wh/{fresh_id}", alert("after the outage"))[0] == 202
    wait_until(lambda: fake_apns.bodies(token(3)) == ["after the outage"], timeout=RECOVERY_DEADLINE,
               what="a fresh webhook after APNs recovered")
    # Every outage job expired: none may be delivered now, each becomes an Expired dead letter.
    wait_until(lambda: live_jobs(relay_binary, relay) == 0, timeout=RECOVERY_DEADLINE,
               what="the expired outage jobs to be dead-lettered")
    assert all(fake_apns.pushes(token(seed)) == [] for seed in sent)

    expected = {seed: sent[seed] for seed in devices}
    replayed = cli(relay_binary, relay, "replay", "--reason", "Expired")
    assert f"replayed {sum(len(v) for v in expected.values())} dead letters" in replayed

    def delivered(seed):
        bodies = fake_apns.bodies(token(seed))
        return [b for i, b in enumerate(bodies) if i == 0 or bodies[i - 1] != b]  # at least once: repeats allowed
    wait_until(lambda: all(delivered(seed) == expected[seed] for seed in devices), timeout=RECOVERY_DEADLINE,
               what="every replayed job, in per-device order")
    assert live_jobs(relay_binary, relay) == 0
    no_device_had_two_pushes_in_flight(fake_apns)


def test_apns_unreachable_pauses_delivery_says_so_and_keeps_the_alert(relays, relay_binary, fake_apns):
    """Every connection to APNs refused (a firewall, a wrong APNS_URL): the deliverer says so in the runbook's words
    and keeps the alert."""
    from relayproc import free_port
    relay = relays("serve", APNS_URL=f"https://127.0.0.1:{free_port()}")
    device_id, _ = register(relay, 31)
    assert request("POST", f"{relay.base}/wh/{device_id}", alert("down"))[0] == 202
    wait_until(lambda: "APNs unreachable: every connection failing, delivery paused until a probe succeeds"
               in relay.log_path.read_text(), timeout=60, what="the runbook's line")
    stats = json.loads(cli(relay_binary, relay, "stats", "--json"))
    assert sum(stats["jobs"].values()) == 1, stats

