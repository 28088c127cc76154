"""systemd notifications (SPEC §2.3, `Type=notify`): READY=1 once migrations are done and the listeners are open,
WATCHDOG=1 again and again while the loops turn (only with the watchdog on and meant for this process), and
STOPPING=1 at SIGTERM. The test owns the NOTIFY_SOCKET and plays systemd's part, socket included."""
import signal

import pytest

from conftest import TLS, TOPIC
from relayproc import free_port, relay_env, request, wait_until
from systemd_standin import NotifySocket, listening_socket, start_activated

WATCHDOG_USEC = 2_000_000


def settings(tmp_path, fake_apns):
    return relay_env(
        tmp_path, APNS_URL=f"https://127.0.0.1:{fake_apns.port}", APNS_CA_FILE=TLS / "ca.pem",
        APNS_AUTH_KEY_PATH=TLS / "apns-key.p8", APNS_KEY_ID="KEY1234567", APNS_TEAM_ID="TEAM123456",
        APP_BUNDLE_IDENTIFIER=TOPIC, WATCHDOG_USEC=WATCHDOG_USEC, PORT=free_port())


@pytest.fixture
def notify(tmp_path):
    socket = NotifySocket(tmp_path / "notify.sock")
    yield socket
    socket.close()


@pytest.mark.parametrize("command", ["serve", "ingest", "deliver"])
def test_ready_then_regular_watchdog_pings_then_stopping(relay_binary, tmp_path, fake_apns, notify, command):
    listener = listening_socket() if command != "deliver" else None
    env = settings(tmp_path, fake_apns)
    # WATCHDOG_PID names the process the watchdog is for: the relay itself (the shell execs it, keeping its pid).
    process = start_activated(relay_binary, command, env, tmp_path / f"{command}.log", listener=listener,
                              notify_path=notify.path, watchdog_for_self=True)
    try:
        wait_until(lambda: notify.times("READY"), timeout=30, what="READY=1")
        # READY=1 means the listeners are open: asked now, they answer at once.
        if listener is not None:
            assert request("GET", f"http://127.0.0.1:{listener.getsockname()[1]}/readyz")[0] == 200
        ready = notify.times("READY")[0]
        wait_until(lambda: len([at for at in notify.times("WATCHDOG") if at > ready]) >= 3, timeout=30,
                   what="three WATCHDOG=1 after READY=1")
        assert not [at for at in notify.times("WATCHDOG") if at < ready], "no ping before the process is ready"
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=60) == 0
        stopping = notify.times("STOPPING")
        assert len(stopping) == 1
        assert not [at for at in notify.times("WATCHDOG") if at > stopping[0]], "no ping once stopping"
        # The stop may take SHUTDOWN_GRACE (10 s), twice in serve (its API, then pushes in flight), and 5 s more.
        extended = [value for _, key, value in notify.fields() if key == "EXTEND_TIMEOUT_USEC"]
        assert extended == [str({"serve": 25, "ingest": 15, "deliver": 15}[command] * 1_000_000)]
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=10)
        if listener is not None:
            listener.close()


def test_a_long_shutdown_delay_extends_the_stop_timeout_and_a_second_sigterm_ends_it(relay_binary, tmp_path, fake_apns,
                                                                                      notify):
    """SHUTDOWN_DELAY past the units' TimeoutStopSec=30: STOPPING=1 tells systemd how long the stop may take, so it
    is not ended by SIGKILL; an operator's second SIGTERM ends the delay early."""
    listener = listening_socket()
    env = settings(tmp_path, fake_apns)
    env["SHUTDOWN_DELAY"] = "300s"
    env["LOG_LEVEL"] = "info"
    process = start_activated(relay_binary, "ingest", env, tmp_path / "ingest.log", listener=listener,
                              notify_path=notify.path)
    try:
        wait_until(lambda: notify.times("READY"), timeout=30, what="READY=1")
        process.send_signal(signal.SIGTERM)
        wait_until(lambda: notify.times("STOPPING"), what="STOPPING=1")
        extended = [value for _, key, value in notify.fields() if key == "EXTEND_TIMEOUT_USEC"]
        assert extended == [str(315 * 1_000_000)], "the delay, the grace (10 s) and 5 s"
        readyz = f"http://127.0.0.1:{listener.getsockname()[1]}/readyz"
        wait_until(lambda: request("GET", readyz)[0] == 503, what="/readyz 503 during the delay")
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=60) == 0
        assert "shutdown delay cut short" in (tmp_path / "ingest.log").read_text()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=10)
        listener.close()


def test_no_watchdog_pings_for_a_watchdog_meant_for_another_process(relay_binary, tmp_path, fake_apns, notify):
    """WATCHDOG_PID names another process (a wrapper's, say): the relay must not take the watchdog as its own."""
    env = settings(tmp_path, fake_apns)
    env["WATCHDOG_PID"] = "1"
    process = start_activated(relay_binary, "deliver", env, tmp_path / "deliver.log", notify_path=notify.path)
    try:
        wait_until(lambda: notify.times("READY"), timeout=30, what="READY=1")
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=60) == 0
        assert notify.times("STOPPING") and not notify.times("WATCHDOG")
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=10)


def test_a_writer_held_past_the_watchdog_interval_is_logged_and_unfed_until_it_moves(relay_binary, tmp_path, fake_apns, notify):
    """Another process holds SQLite's write lock longer than the watchdog interval while a webhook waits to be
    committed (the busy timeout is 5 s, WATCHDOG_USEC 2 s): the writer loop makes no progress, so the relay stops
    feeding systemd's watchdog and says so in the words docs/operations.md gives; once the lock goes, the webhook is
    answered and the pings come back."""
    import sqlite3
    import threading
    listener = listening_socket()
    env = settings(tmp_path, fake_apns)
    log = tmp_path / "ingest.log"
    process = start_activated(relay_binary, "ingest", env, log, listener=listener, notify_path=notify.path,
                              watchdog_for_self=True)
    base = f"http://127.0.0.1:{listener.getsockname()[1]}"
    try:
        wait_until(lambda: notify.times("WATCHDOG"), timeout=30, what="the first WATCHDOG=1")
        status, device, _ = request("POST", base + "/devices", {"device_token": "ab" * 32})
        assert status == 201, device
        holder = sqlite3.connect(env["DATABASE_PATH"], isolation_level=None, timeout=5)
        holder.execute("BEGIN IMMEDIATE")
        answers = []
        alert = {"heartbeat": {"status": 0, "msg": "x"}, "monitor": {"id": 1, "name": "DB"}, "msg": "x"}
        waiting = threading.Thread(target=lambda: answers.append(request("POST", f"{base}/wh/{device['id']}", alert, timeout=30)[0]))
        waiting.start()
        wait_until(lambda: "a loop made no progress for the whole watchdog interval" in log.read_text(), timeout=30,
                   what="the wedged loop logged")
        holder.execute("ROLLBACK")
        holder.close()
        waiting.join(30)
        # Stored once the lock went (202), or refused honestly if the busy timeout ran out first on a slow host (503).
        assert answers in ([202], [503]), answers
        released = len(notify.times("WATCHDOG"))
        wait_until(lambda: len(notify.times("WATCHDOG")) > released, timeout=30, what="the pings back")
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=10)
        listener.close()

