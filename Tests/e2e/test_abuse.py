"""Hostile clients cannot grow the relay's memory or take it down (issue 13). Bounded loops, loopback only."""
import http.client
import os
import random
import string
import subprocess

import pytest

from relayproc import Relay, relay_env, request, wait_until


def start_ingest(relay_binary, tmp_path, **overrides):
    env = relay_env(tmp_path, **overrides)
    return Relay(relay_binary, "ingest", env, tmp_path / "ingest.log").wait_healthy()


def metrics_text(relay):
    status, body, _ = request("GET", f"http://{relay.env['METRICS_ADDR']}/metrics")
    assert status == 200
    return body.decode() if isinstance(body, bytes) else body


def rss_kib(pid):
    return int([line for line in open(f"/proc/{pid}/status") if line.startswith("VmRSS")][0].split()[1])


def hostile_requests(port, count):
    """Requests with random 1-200 character methods and random paths, on keep-alive connections."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    statuses = set()
    for _ in range(count):
        method = "".join(random.choices(string.ascii_uppercase + "-_!", k=random.randint(1, 200)))
        path = random.choice(["/", "/devices/", "/wh/", "/health/", "/x/"]) + "".join(random.choices(string.ascii_letters, k=12))
        try:
            connection.request(method, path)
            response = connection.getresponse()
            response.read()
            statuses.add(response.status)
        except (http.client.HTTPException, OSError):
            connection.close()
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    connection.close()
    return statuses


def test_ten_thousand_random_methods_and_paths_leave_metrics_and_memory_flat(relay_binary, tmp_path):
    """Before: every method token became a metrics label; /metrics grew from 3 KB to 550 KB in 2,000 requests."""
    relay = start_ingest(relay_binary, tmp_path, LOG_LEVEL="info")
    try:
        hostile_requests(relay.port, 1000)
        size_before, rss_before = len(metrics_text(relay)), rss_kib(relay.process.pid)
        statuses = hostile_requests(relay.port, 9000)
        size_after, rss_after = len(metrics_text(relay)), rss_kib(relay.process.pid)
        assert statuses <= {400, 404, 405, 501}, statuses
        assert size_after <= size_before + 256, (size_before, size_after)
        assert rss_after <= rss_before + 8 * 1024, (rss_before, rss_after)
        assert request("GET", f"{relay.base}/health")[0] == 200
    finally:
        relay.stop()


def _close_stderr():
    os.close(2)


@pytest.mark.parametrize("how", ["closed", "broken_pipe"])
def test_the_relay_keeps_serving_with_stderr_closed_or_broken(relay_binary, tmp_path, how):
    """Before: the logger treated a failed write to stderr as fatal and the process crashed on the next line."""
    env = relay_env(tmp_path, LOG_LEVEL="info", RATE_LIMIT_REGISTER="off")
    if how == "closed":
        process = subprocess.Popen([str(relay_binary), "ingest"], env=env, stdout=subprocess.DEVNULL,
                                   preexec_fn=_close_stderr)
    else:
        process = subprocess.Popen([str(relay_binary), "ingest"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        process.stderr.close()  # the reader is gone: every write to stderr now fails with EPIPE
    base = f"http://127.0.0.1:{env['PORT']}"
    try:
        def healthy():
            assert process.poll() is None, f"the relay exited with {process.returncode}"
            try:
                return request("GET", f"{base}/health")[0] == 200
            except OSError:
                return False
        wait_until(healthy, what="/health")
        status, body, _ = request("POST", f"{base}/devices", {"device_token": "ef" * 32})
        assert status == 201
        for _ in range(200):  # each one logs a line at info
            assert request("POST", f"{base}/wh/{body['id']}", {"title": "t", "body": "b"})[0] == 202
        assert process.poll() is None, "still running"
        if how == "broken_pipe":
            status, metrics, _ = request("GET", f"http://{env['METRICS_ADDR']}/metrics")
            dropped = [line for line in metrics.decode().splitlines() if line.startswith("kumapush_log_lines_dropped_total ")]
            assert dropped and float(dropped[0].split()[1]) >= 200, dropped
    finally:
        process.kill()
        process.wait()
