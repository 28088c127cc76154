"""Rate limits as the app and Uptime Kuma meet them (SPEC §2.4), with the default settings."""
import http.client
import json
import math
import threading
import time

from relayproc import Relay, relay_env, request

ALERT = b'{"heartbeat":{"status":0,"msg":"connect ECONNREFUSED"},"monitor":{"id":7,"name":"DB"},"msg":"x"}'


def start_ingest(relay_binary, tmp_path, **overrides):
    env = relay_env(tmp_path, **overrides)
    return Relay(relay_binary, "ingest", env, tmp_path / "ingest.log").wait_healthy()


def register(relay, seed):
    status, body, _ = request("POST", f"{relay.base}/devices", {"device_token": f"{seed:064x}"})
    assert status == 201, body
    return body["id"], body["auth_token"]


def post_from(source, port, path, body):
    """One webhook from a chosen loopback source address (127.0.0.2 is another client to the relay)."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10, source_address=(source, 0))
    try:
        connection.request("POST", path, body, {"Content-Type": "application/json"})
        return connection.getresponse().status
    finally:
        connection.close()


def limited_after_failures(timed, limit=10, window=60.0):
    """What the failed-webhook limit (`limit`/`window`, a sliding window estimated from epoch-aligned fixed windows)
    allows for failures sent one after another: `timed` is [(status, sent_at, answered_at)]. Within one window the
    first `limit` fail as 404 and every later one is 429. A window boundary during the run (a few times in a thousand
    runs) lets the previous window's count fade by the part of the new window gone: a failure after it may pass
    again, at most `limit` times that part, plus one. Judged so, the test is right whenever it runs; it asserted the
    single-window answer before and failed at minute boundaries. Returns the violations, empty when there are none."""
    statuses = [status for status, _, _ in timed]
    if statuses[:limit] != [404] * limit:
        return [f"the first {limit} failures must be 404: {statuses}"]
    boundary = (math.floor(timed[0][1] / window) + 1) * window
    violations = []
    for index, (status, sent_at, answered_at) in enumerate(timed[limit:], start=limit):
        if status == 429:
            continue
        faded = max(0.0, (answered_at - boundary) / window)
        passed_again = statuses[limit:index + 1].count(404)
        if status != 404 or answered_at < boundary or passed_again > math.floor(limit * faded) + 1:
            violations.append(f"failure {index + 1}: {status} ({passed_again} let through again, {faded:.3f} of the "
                              f"next window gone): {statuses}")
    return violations


def assert_limited_after_ten_failures(send, count=30):
    timed = []
    for _ in range(count):
        sent_at = time.time()
        status = send()
        timed.append((status, sent_at, time.time()))
    assert not limited_after_failures(timed)


def test_the_limit_check_allows_a_fading_window_only_after_a_boundary():
    """The judgement above: exact within one window, and only as lenient as the fading previous window after one."""
    def run(statuses, start=120.0, step=0.01):
        return [(status, start + n * step, start + n * step + step / 2) for n, status in enumerate(statuses)]
    assert limited_after_failures(run([404] * 10 + [429] * 20)) == []
    assert limited_after_failures(run([404] * 11 + [429] * 19)) != [], "one too many within a window"
    assert limited_after_failures(run([404] * 9 + [429] * 21)) != [], "limited too early"
    # Crossing the boundary at 180 s: 10 failures before it, then 1.2 s into the next window (0.02 of it).
    crossing = run([404] * 10 + [429] * 19 + [404], start=178.81, step=0.08)
    assert limited_after_failures(crossing) == []
    assert limited_after_failures(run([404] * 10 + [429] * 17 + [404] * 3, start=178.81, step=0.08)) != []


def test_the_app_reads_its_device_200_times_while_another_client_floods_webhooks(relay_binary, tmp_path):
    """The app wipes its registration when GET /devices/:id fails, so that call must answer under any load."""
    relay = start_ingest(relay_binary, tmp_path, RATE_LIMIT_REGISTER="off")
    try:
        device_id, auth = register(relay, 1)
        flooded, _ = register(relay, 2)
        stop = threading.Event()
        flood_statuses, flood_errors = [], []

        def flood():
            try:
                while not stop.is_set():
                    flood_statuses.append(post_from("127.0.0.2", relay.port, f"/wh/{flooded}", ALERT))
            except Exception as error:  # noqa: BLE001 - a failed flood fails the test below, with its error
                flood_errors.append(error)

        floods = [threading.Thread(target=flood) for _ in range(6)]
        for thread in floods:
            thread.start()
        try:
            statuses = [request("GET", f"{relay.base}/devices/{device_id}", headers={"Authorization": f"Bearer {auth}"})[0]
                        for _ in range(200)]
        finally:
            stop.set()
            for thread in floods:
                thread.join(60)
        assert not flood_errors, flood_errors[:3]
        assert statuses == [200] * 200
        assert len(flood_statuses) > 200 and set(flood_statuses) <= {202, 429}, "the flood really ran"
    finally:
        relay.stop()


def test_a_stale_url_hammered_by_one_uptime_kuma_does_not_block_its_valid_device(relay_binary, tmp_path):
    relay = start_ingest(relay_binary, tmp_path)
    try:
        device_id, _ = register(relay, 3)
        stale = "Stale_Device01"  # well-formed, never registered (a device the user deleted)
        assert_limited_after_ten_failures(lambda: request("POST", f"{relay.base}/wh/{stale}", ALERT)[0])
        answers = [request("POST", f"{relay.base}/wh/{device_id}", ALERT) for _ in range(30)]
        assert [status for status, _, _ in answers] == [202] * 30
        assert all(body["status"] == "queued" for _, body, _ in answers)
    finally:
        relay.stop()


def test_addresses_of_one_ipv6_slash64_are_limited_as_one_client(relay_binary, tmp_path):
    """Issue 13: keyed per address, one /64 (2^64 addresses) defeated every per-IP limit. The addresses come from
    X-Forwarded-For of a trusted proxy (loopback), as behind Caddy or nginx."""
    relay = start_ingest(relay_binary, tmp_path, BEHIND_PROXY="true", RATE_LIMIT_WEBHOOK_FAILED="10/1m")
    try:
        def post(address, device="Unknown_Dev_01"):
            return request("POST", f"{relay.base}/wh/{device}", ALERT, headers={"X-Forwarded-For": address})[0]

        addresses = iter(f"2001:db8:7:7:{n:x}::{n:x}" for n in range(1, 31))
        assert_limited_after_ten_failures(lambda: post(next(addresses)))
        assert post("2001:db8:7:8::1") == 404, "the next /64 is another client"
        assert post("192.0.2.1") == 404
    finally:
        relay.stop()
