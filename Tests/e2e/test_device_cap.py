"""SPEC §4 "No single point of trouble": one device cannot fill the queue. Test-shaped webhooks (no heartbeat, no
monitor: the Test button, certificate expiry) count against DEVICE_QUEUE_MAX like alerts; a device has at most one
Test request waiting; whatever is posted, the device never holds more than its cap of live jobs — on SQLite and on
PostgreSQL — and every acknowledged notice still reaches the phone."""
import concurrent.futures
import json


from relayproc import request, wait_until

CAP = 20


def live_jobs(relay, settings):
    result = relay("stats", "--json", env=settings)
    assert result.returncode == 0, result.stderr
    jobs = json.loads(result.stdout)["jobs"]
    return sum(jobs[state] for state in ("pending", "available", "running", "retryable"))


def post_all(relay_base, device, bodies):
    """Posts every body at once from 16 clients, as a flood would; returns the answers in order."""
    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        return list(pool.map(lambda body: request("POST", f"{relay_base}/wh/{device}", body, timeout=30)[:2], bodies))


def test_300_test_presses_and_300_expiry_notices_during_an_outage_leave_at_most_the_cap(relays, relay, fake_apns, store):
    """APNs is down (ingest alone runs: nothing is delivered). 300 identical Test presses store one job, answered
    202 with that job's id; 300 distinct Test-shaped notices are acknowledged and folded past the cap. The device
    never holds more than DEVICE_QUEUE_MAX live jobs; once a deliverer runs, the queue drains and the notices
    arrive as a handful of pushes."""
    ingest = relays("ingest", DEVICE_QUEUE_MAX=str(CAP), TEST_WAIT="100ms", RATE_LIMIT_WEBHOOK_IP="off", **store)
    status, body, _ = request("POST", ingest.base + "/devices", {"device_token": f"{11:064x}"})
    assert status == 201, body
    device = body["id"]

    presses = post_all(ingest.base, device, [b'{"msg":"x"}'] * 300)
    assert all(status == 202 for status, _ in presses), {status for status, _ in presses}
    ids = {answer["id"] for _, answer in presses}
    assert len(ids) == 1, "every press names the one Test job stored"
    assert live_jobs(relay, store) == 1

    notices = [json.dumps({"msg": f"[site {n}] certificate expires in 7 days"}).encode() for n in range(300)]
    answers = post_all(ingest.base, device, notices)
    assert all(status == 202 for status, _ in answers), {status for status, _ in answers}
    statuses = [answer["status"] for _, answer in answers]
    assert statuses.count("queued") == CAP - 1 and statuses.count("merged") == 300 - (CAP - 1), statuses
    assert live_jobs(relay, store) == CAP

    relays("deliver", DEVICE_QUEUE_MAX=str(CAP), DEVICE_BURST="off", **store)
    wait_until(lambda: live_jobs(relay, store) == 0, timeout=60, what="the queue to drain")
    titles = [push["payload"]["aps"]["alert"]["title"] for push in fake_apns.pushes(f"{11:064x}")]
    assert len(titles) == CAP, "one push per stored job"
    # The Test, 18 notices on their own, and the tail: the 19th notice with the 281 folded into it. Every one of
    # the 301 acknowledged requests is accounted for.
    assert titles.count("KumaPush") == CAP - 1 and "282 alerts" in titles, titles
