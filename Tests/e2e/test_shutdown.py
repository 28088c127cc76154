"""SIGTERM while requests are still waiting for their answer (SPEC §5, issue 12 item 3).

libmicrohttpd 0.9.x aborts the process (exit 134) in MHD_stop_daemon when a connection is still suspended, and a
Test-button webhook waiting for APNs is one. The relay must answer it, stop cleanly, and in `serve` release its
leases, whatever SHUTDOWN_GRACE is.
"""
import pathlib
import signal
import socket
import sqlite3
import subprocess
import threading

from relayproc import free_port, request, wait_until

ROOT = pathlib.Path(__file__).resolve().parents[2]
TLS = ROOT / "Tests" / "Fixtures" / "tls"
TEST_BUTTON = (ROOT / "Tests" / "Fixtures" / "webhooks" / "d-test-button.json").read_bytes()


def jobs(db):
    with sqlite3.connect(db) as connection:
        return connection.execute("SELECT state FROM jobs").fetchall()


def post_in_background(url):
    """Posts a Test-button webhook on a thread; returns (thread, answers list)."""
    answers = []
    thread = threading.Thread(target=lambda: answers.append(request("POST", url, TEST_BUTTON, timeout=60)))
    thread.start()
    return thread, answers


def register(relay):
    status, body, _ = request("POST", f"{relay.base}/devices", {"device_token": "cd" * 32})
    assert status == 201, body
    return body["id"]


def test_sigterm_with_a_waiting_test_request_and_no_grace_exits_0_and_answers_it(relays, tmp_path):
    """No deliverer runs, so the Test request would wait its whole TEST_WAIT."""
    ingest = relays("ingest", TEST_WAIT="60s", SHUTDOWN_GRACE="0")
    device_id = register(ingest)
    thread, answers = post_in_background(f"{ingest.base}/wh/{device_id}")
    wait_until(lambda: jobs(tmp_path / "relay.db"), what="the Test job committed (the request now waits)")
    ingest.signal(signal.SIGTERM)
    assert ingest.wait() == 0
    thread.join(30)
    assert answers and answers[0][:2] == (503, {"error": "shutting down"})


def test_sigterm_in_serve_with_apns_slow_to_answer_exits_0_answers_and_releases_the_lease(relay_binary, relays, tmp_path):
    """APNs (the simulator, answering after a minute) holds the Test push in flight when SIGTERM arrives."""
    sim_port = free_port()
    simulator = subprocess.Popen(
        [str(relay_binary), "apns-sim", "--cert", TLS / "server.pem", "--key", TLS / "server.key",
         "--token-key", TLS / "apns-key.pub.pem", "--listen", f"127.0.0.1:{sim_port}", "--latency", "60000", "--quiet"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_until(lambda: _listening(sim_port), what="apns-sim listening")
        relay = relays("serve", APNS_URL=f"https://127.0.0.1:{sim_port}", TEST_WAIT="60s", SHUTDOWN_GRACE="0")
        device_id = register(relay)
        thread, answers = post_in_background(f"{relay.base}/wh/{device_id}")
        wait_until(lambda: jobs(tmp_path / "relay.db") == [("running",)], what="the Test push in flight to APNs")
        relay.signal(signal.SIGTERM)
        assert relay.wait() == 0
        thread.join(30)
        assert answers and answers[0][:2] == (503, {"error": "shutting down"})
        assert jobs(tmp_path / "relay.db") == [("available",)], "the lease was released, the job kept"
    finally:
        simulator.kill()
        simulator.wait(timeout=10)


def _listening(port):
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True
    except OSError:
        return False


def test_with_a_shutdown_delay_sigterm_turns_readyz_503_and_webhooks_are_still_accepted_until_it_ends(relays, tmp_path):
    """A self-bound ingest behind a load balancer (SHUTDOWN_DELAY): at SIGTERM `/readyz` answers 503 at once, so the
    balancer stops sending, while the listener goes on accepting, so a webhook already on its way is stored, not
    refused; then the process stops as usual, exit 0."""
    ingest = relays("ingest", SHUTDOWN_DELAY="5s")
    device_id = register(ingest)
    ingest.signal(signal.SIGTERM)
    wait_until(lambda: request("GET", f"{ingest.base}/readyz")[:2] == (503, {"error": "shutting down"}),
               what="/readyz 503 shutting down")
    assert request("GET", f"{ingest.base}/livez")[0] == 200
    status, body, _ = request("POST", f"{ingest.base}/wh/{device_id}",
                              (ROOT / "Tests" / "Fixtures" / "webhooks" / "a-1.23-http-down.json").read_bytes())
    assert status == 202, body
    assert ingest.wait() == 0
    assert jobs(tmp_path / "relay.db") == [("available",)]
