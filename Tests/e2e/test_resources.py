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
        assert request("GET", f"{relay.base}/health")[0] in (200, 503)

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
    relay = start_ingest(relay_binary, tmp_path, HTTP_IDLE_TIMEOUT="1s")
    try:
        slow = []
        for _ in range(64):
            sock = socket.create_connection(("127.0.0.1", relay.port), timeout=20)
            sock.sendall(b"POST /wh/x HTTP/1.1\r\nHost: x\r\n")  # and never more
            slow.append(sock)
        assert request("GET", f"{relay.base}/health")[0] == 200, "others are still served"

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
    finally:
        for sock in slow:
            sock.close()
        relay.stop()


def test_oversized_headers_are_refused_counted_and_logged_and_the_server_stays_healthy(relay_binary, tmp_path):
    """libmicrohttpd refuses them itself (with its own short text page, before any of our code runs): 431 for the
    headers, 414 for a URL, which is where a GET webhook carries its whole alert (docs/tuning.md). Its error log is
    the relay's only sight of them: each is counted by status and logged as a warning, without the URL."""
    relay = start_ingest(relay_binary, tmp_path, HTTP_MAX_HEADER_BYTES="8192", LOG_FORMAT="json", LOG_LEVEL="debug")
    try:
        for head, status in ((b"GET /health HTTP/1.1\r\nHost: x\r\nX-Padding: " + b"a" * 20000, b"431"),
                             (b"GET /wh/x?msg=" + b"secret" * 1500 + b" HTTP/1.1\r\nHost: x", b"414"),
                             (b"GET /wh/x?msg=secret HTTP/1.1\r\nHost: x\r\nno colon", b"400")):
            sock = socket.create_connection(("127.0.0.1", relay.port), timeout=5)
            sock.sendall(head + b"\r\n\r\n")
            answer = sock.recv(4096)
            sock.close()
            assert answer.split(b" ")[1] == status, answer[:80]
        # A request cut off half way: libmicrohttpd logs it with a message of its own (kept at debug level).
        sock = socket.create_connection(("127.0.0.1", relay.port), timeout=5)
        sock.sendall(b"POST /wh/x?msg=secret HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{")
        sock.close()
        assert request("GET", f"{relay.base}/health")[0] == 200
        _, metrics, _ = request("GET", f"http://{relay.env['METRICS_ADDR']}/metrics")
        refused = sorted(line for line in metrics.decode().splitlines() if line.startswith("kumapush_http_refused_total{"))
        assert refused == ['kumapush_http_refused_total{status="400"} 1', 'kumapush_http_refused_total{status="414"} 1',
                           'kumapush_http_refused_total{status="431"} 1']
        wait_until(lambda: "HTTP library message" in (tmp_path / "ingest.log").read_text(), what="the cut request logged")
    finally:
        relay.stop()
    log = (tmp_path / "ingest.log").read_text()
    warnings = [json.loads(line) for line in log.splitlines() if "refused before it was read" in line]
    assert [(w["http.status"], w["reason"]) for w in warnings] == [
        ("431", "request headers larger than HTTP_MAX_HEADER_BYTES allows"),
        ("414", "URL longer than HTTP_MAX_HEADER_BYTES allows"),
        ("400", "malformed request")], warnings
    assert "secret" not in log, "neither a refusal's nor another library message's URL is logged"


def proc_status(pid):
    fds = len(os.listdir(f"/proc/{pid}/fd"))
    rss = int([l for l in open(f"/proc/{pid}/status") if l.startswith("VmRSS")][0].split()[1]) // 1024
    return fds, rss


def test_file_descriptors_and_memory_stay_flat_over_100000_requests(relay_binary, tmp_path):
    # One device takes all 100,000: the per-device cap must not fold them (this test counts stored jobs).
    relay = start_ingest(relay_binary, tmp_path, DEVICE_QUEUE_MAX="200000")
    try:
        device = register(relay)
        payload = (f"POST /wh/{device} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                   f"Content-Length: {len(ALERT)}\r\n\r\n").encode() + ALERT
        samples = {}

        errors = []

        def client(count):
            try:
                send_all(count)
            except Exception as error:  # noqa: BLE001 - any failure in a client thread fails the test below
                errors.append(error)

        def receive(sock):
            chunk = sock.recv(65536)
            if not chunk:
                raise ConnectionError("the server closed the connection mid-answer")
            return chunk

        def send_all(count):
            sock = socket.create_connection(("127.0.0.1", relay.port), timeout=30)
            buffer = b""
            for _ in range(count):
                sock.sendall(payload)
                while b"\r\n\r\n" not in buffer:
                    buffer += receive(sock)
                head, _, buffer = buffer.partition(b"\r\n\r\n")
                length = int([l for l in head.split(b"\r\n") if l.lower().startswith(b"content-length")][0].split(b":")[1])
                while len(buffer) < length:
                    buffer += receive(sock)
                assert head.startswith(b"HTTP/1.1 202"), head
                buffer = buffer[length:]
            sock.close()

        def round_of(total):
            threads = [threading.Thread(target=client, args=(total // 8,)) for _ in range(8)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()

        round_of(20_000)
        samples["after 20k"] = proc_status(relay.process.pid)
        round_of(80_000)
        samples["after 100k"] = proc_status(relay.process.pid)
        assert not errors, errors[:3]
        (fds_a, rss_a), (fds_b, rss_b) = samples["after 20k"], samples["after 100k"]
        assert fds_b <= fds_a + 2, samples
        assert rss_b <= rss_a + 16, samples  # the SQLite page cache may still fill; no per-request growth
        assert len(stored_ids(tmp_path / "relay.db")) == 100_000
    finally:
        relay.stop()
