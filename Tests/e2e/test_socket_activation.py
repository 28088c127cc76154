"""Restarts refuse nothing (SPEC §4, issue 40): `serve` and `ingest` take their listening socket from systemd, stop
accepting at SIGTERM and answer what they accepted, so connections made while no process runs wait in the socket's
backlog for the next one. The test plays systemd: it holds the socket and starts each process with it as fd 3."""
import signal
import threading
import time

import pytest

from conftest import TLS, TOPIC
from relayproc import free_port, relay_env, request, wait_until
from systemd_standin import listening_socket, start_activated
from test_delivery import alert, assert_accepted_in_order, register, token

DEVICES = 4


def serve_env(tmp_path, fake_apns, port):
    return relay_env(
        tmp_path, APNS_URL=f"https://127.0.0.1:{fake_apns.port}", APNS_CA_FILE=TLS / "ca.pem",
        APNS_AUTH_KEY_PATH=TLS / "apns-key.p8", APNS_KEY_ID="KEY1234567", APNS_TEAM_ID="TEAM123456",
        APP_BUNDLE_IDENTIFIER=TOPIC, RETRY_BASE="50ms", RETRY_MAX="500ms", RATE_LIMIT_REGISTER="off",
        RATE_LIMIT_WEBHOOK_IP="off", DEVICE_BURST="off",
        # Not the held socket's port: a relay that bound its own port would wait for webhooks nobody sends there.
        PORT=free_port())


class Load:
    """Webhooks from one client thread per device, all at once, a new connection each (as Uptime Kuma sends them),
    until stopped; every answer is recorded. A restart so meets several connections at every stage: being answered
    by the old process, waiting in the backlog while no process runs, and taken by the next one. Each device's
    webhooks go one after the other, so their order is the order they were acknowledged in."""

    def __init__(self, base, device_ids):
        self.base, self.device_ids = base, device_ids
        self.sent = {device: 0 for device in device_ids}
        self.answers = []
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.threads = [threading.Thread(target=self._run, args=(device,)) for device in device_ids]

    def start(self):
        for thread in self.threads:
            thread.start()

    def stop(self):
        """Stops the clients; each finishes the webhook it is posting (60 s at most), all within two minutes."""
        self.stopping.set()
        deadline = time.monotonic() + 120
        for thread in self.threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        assert not any(thread.is_alive() for thread in self.threads), "a client still posting two minutes after stop"

    def _run(self, device):
        while not self.stopping.is_set():
            n = self.sent[device]
            try:
                status = request("POST", f"{self.base}/wh/{device}", alert(1, "DB", n % 2, f"event {n}"), timeout=60)[0]
            except OSError as error:
                status = repr(error)
            with self.lock:
                self.answers.append((device, n, status))
            self.sent[device] = n + 1

    def count(self):
        with self.lock:
            return len(self.answers)


@pytest.mark.parametrize("command", ["serve", "ingest"])
def test_three_restarts_on_a_held_socket_under_load_answer_and_deliver_every_webhook(relay_binary, tmp_path, fake_apns, command):
    """`serve` restarted three times; or `ingest`, with a `deliver` process beside it that keeps running."""
    listener = listening_socket()
    port = listener.getsockname()[1]
    base = f"http://127.0.0.1:{port}"
    env = serve_env(tmp_path, fake_apns, port)
    processes = []

    def start():
        process = start_activated(relay_binary, command, env, tmp_path / f"{command}-{len(processes)}.log", listener=listener)
        processes.append(process)
        return process

    try:
        if command == "ingest":
            deliver_env = dict(env, PORT=str(free_port()), METRICS_ADDR=f"127.0.0.1:{free_port()}")
            processes.append(start_activated(relay_binary, "deliver", deliver_env, tmp_path / "deliver.log"))
        current = start()
        wait_until(lambda: request("GET", base + "/readyz")[0] == 200, what=f"the first {command} ready on the held socket")
        devices = [register(type("R", (), {"base": base})(), seed)[0] for seed in range(1, DEVICES + 1)]
        load = Load(base, devices)
        load.start()
        try:
            for restart in range(3):
                # Some webhooks answered by this process before it goes (the load is really running through it).
                floor = load.count() + 20
                wait_until(lambda: load.count() >= floor, timeout=60, what=f"webhooks answered before restart {restart + 1}")
                current.send_signal(signal.SIGTERM)
                assert current.wait(timeout=60) == 0, f"restart {restart + 1}: the old process exits 0"
                current = start()
            floor = load.count() + 20
            wait_until(lambda: load.count() >= floor, timeout=60, what="webhooks answered after the last restart")
        finally:
            load.stop()
        refused = [answer for answer in load.answers if answer[2] != 202]
        assert not refused, f"{len(refused)} of {len(load.answers)} webhooks not 202, first {refused[:5]}"
        for seed, device in enumerate(devices, start=1):
            expected = [f"event {n}" for n in range(load.sent[device])]
            wait_until(lambda: len({p["payload"]["aps"]["alert"]["body"] for p in fake_apns.pushes(token(seed))}) >= len(expected),
                       timeout=60, what=f"device {seed}'s pushes")
            assert_accepted_in_order(fake_apns, seed, expected, f"device {seed}")
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait(timeout=10)
        listener.close()
