"""Hostile clients and a sick disk: limits hold, nothing acknowledged is lost, and the relay recovers."""
import json
import os
import resource
import signal
import socket
import sqlite3
import subprocess
import threading

import pytest

from relayproc import Relay, relay_env, request, wait_until

ALERT = b'{"heartbeat":{"status":0,"msg":"Request failed with status code 503"},"monitor":{"id":1,"name":"Shop API"},"msg":"x"}'


def start_ingest(relay_binary, tmp_path, preexec=None, **overrides):
    env = relay_env(tmp_path, RATE_LIMIT_WEBHOOK="off", RATE_LIMIT_WEBHOOK_FAILED="off", RATE_LIMIT_WEBHOOK_IP="off",
                    **overrides)
    relay = Relay(relay_binary, "ingest", env, tmp_path / "ingest.log")
    if preexec:
        relay.process.kill()
        relay.process.wait(timeout=10)
        relay.process = subprocess.Popen([str(relay_binary), "ingest"], env=env, stdout=relay.log, stderr=relay.log, preexec_fn=preexec)
    return relay.wait_healthy()


def register(relay, seed=1):
    status, body, _ = request("POST", f"{relay.base}/devices", {"device_token": f"{seed:064x}"})
    assert status == 201
    return body["id"]


def stored_ids(db):
    with sqlite3.connect(db) as connection:
        return {row[0] for row in connection.execute("SELECT public_id FROM jobs")}


def test_a_database_locked_by_another_process_answers_503_without_hanging(relay_binary, tmp_path):
    relay = start_ingest(relay_binary, tmp_path)
    try:
        device = register(relay)
        holder = sqlite3.connect(tmp_path / "relay.db", isolation_level=None, timeout=1)
        holder.execute("BEGIN IMMEDIATE")  # the write lock, held longer than the relay's 5 s busy timeout
        # "Without hanging": an answer within the request's generous 30 s deadline (the busy timeout is 5 s).
        status, body, headers = request("POST", f"{relay.base}/wh/{device}", ALERT, timeout=30)
        assert status == 503 and body == {"error": "queue unavailable"} and headers["Retry-After"] == "5"
        holder.execute("ROLLBACK")
        holder.close()
        status, body, _ = request("POST", f"{relay.base}/wh/{device}", ALERT)
        assert status == 202 and stored_ids(tmp_path / "relay.db") == {body["id"]}
    finally:
        relay.stop()


def test_a_full_disk_answers_503_loses_nothing_acknowledged_and_recovers(relay_binary, tmp_path):
    """RLIMIT_FSIZE stands in for a full disk: writes past it fail (EFBIG), as they would with ENOSPC."""
    limit = 600 * 1024

    def small_disk():
        # Soft limit only: raising it back later (the disk "freed") needs no privilege.
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.RLIM_INFINITY))

    relay = start_ingest(relay_binary, tmp_path, preexec=small_disk)
    try:
        device = register(relay)
        acknowledged, statuses = [], []
        for _ in range(3000):
            status, body, headers = request("POST", f"{relay.base}/wh/{device}", ALERT)
            statuses.append(status)
            if status == 202:
                acknowledged.append(body["id"])
            elif status == 503:
                assert body == {"error": "queue unavailable"} and headers["Retry-After"] == "5"
                break
        assert statuses[-1] == 503, "the disk filled up"
        assert set(acknowledged) <= stored_ids(tmp_path / "relay.db"), "every acknowledged webhook is stored"
        # The database still answers (reads need no space): /health stays 200, so Docker or systemd do not restart a
        # relay whose restart would free nothing, while each webhook it cannot store gets 503 (SPEC §2.3).
        assert request("GET", f"{relay.base}/health")[:2] == (200, {"status": "ok"})

        resource.prlimit(relay.process.pid, resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))

        status, body, _ = wait_until(lambda: (r := request("POST", f"{relay.base}/wh/{device}", ALERT))[0] == 202 and r,
                                     timeout=30, what="recovery once space returns")
        assert body["id"] in stored_ids(tmp_path / "relay.db")
    finally:
        relay.stop()


def test_a_file_that_is_not_a_database_stops_startup_with_exit_2(relay_binary, tmp_path):
    (tmp_path / "relay.db").write_bytes(os.urandom(16384))
    result = subprocess.run([str(relay_binary), "ingest"], env=relay_env(tmp_path), capture_output=True, text=True, timeout=30)
    assert result.returncode == 2 and "DATABASE_PATH" in result.stderr


def test_slow_clients_cannot_pin_the_server_and_are_cut_off(relay_binary, tmp_path):
    """Slow clients take every connection HTTP_MAX_CONNECTIONS allows (before: 64 against a limit of 10,000, which
    nothing reached); the server cuts them off at HTTP_IDLE_TIMEOUT and serves the client that waited behind them."""
    limit = 16
    # HTTP_REQUEST_TIMEOUT far above the test's deadlines: the idle timeout is what must cut these clients off.
    relay = start_ingest(relay_binary, tmp_path, HTTP_IDLE_TIMEOUT="3s", HTTP_REQUEST_TIMEOUT="1h", HTTP_MAX_CONNECTIONS=str(limit))
    slow = []
    try:
        for _ in range(limit):
            sock = socket.create_connection(("127.0.0.1", relay.port), timeout=20)
            sock.sendall(b"POST /wh/x HTTP/1.1\r\nHost: x\r\n")  # and never more
            slow.append(sock)
        # Every connection is taken (the gauge counts them as libmicrohttpd accepted them; the timeout is far above
        # the milliseconds that takes, and it only bounds how long a failure takes).
        wait_until(lambda: open_connections(relay) == limit, what=f"{limit} open connections")
        # The next client waits behind them in the listen backlog, and is served once they are cut off.
        waiting = socket.create_connection(("127.0.0.1", relay.port), timeout=20)
        waiting.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")

        def closed(sock):
            """The server ended the connection: an orderly close (b"", or the 408 libmicrohttpd may send first,
            then b"") or a reset. Still open after the deadline is a failure."""
            sock.settimeout(20)
            try:
                while chunk := sock.recv(1024):
                    if not chunk.startswith(b"HTTP/1.1 4"):
                        return False
                return True
            except ConnectionResetError:
                return True
            except socket.timeout:
                return False
        assert all(closed(sock) for sock in slow), "idle connections are closed by the server"
        waiting.settimeout(20)
        answer = b""
        while chunk := waiting.recv(4096):
            answer += chunk
        waiting.close()
        assert answer.startswith(b"HTTP/1.1 200"), answer[:200]
    finally:
        for sock in slow:
            sock.close()
        relay.stop()


def open_connections(relay):
    """kumapush_http_connections_open from the ingest's /metrics."""
    _, text, _ = request("GET", f"http://{relay.env['METRICS_ADDR']}/metrics")
    for line in (text or b"").decode().splitlines():
        if line.startswith("kumapush_http_connections_open "):
            return int(float(line.split()[1]))
    return None
