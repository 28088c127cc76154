"""Rate limits as the app and Uptime Kuma meet them (SPEC §2.4), with the default settings."""
import http.client
import json
import threading

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
        stale_statuses = [request("POST", f"{relay.base}/wh/{stale}", ALERT)[0] for _ in range(30)]
        assert stale_statuses[:10] == [404] * 10 and set(stale_statuses[10:]) == {429}
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

        statuses = [post(f"2001:db8:7:7:{n:x}::{n:x}") for n in range(1, 31)]
        assert statuses[:10] == [404] * 10 and set(statuses[10:]) == {429}
        assert post("2001:db8:7:8::1") == 404, "the next /64 is another client"
        assert post("192.0.2.1") == 404
    finally:
        relay.stop()
