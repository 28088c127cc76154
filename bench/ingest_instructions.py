"""Instructions the `ingest` process spends per webhook, counted by callgrind (deterministic where timings on a
shared host are not): N webhooks (Example A, 1.8 KB) to 100 devices over one keep-alive connection, minus a run
that registers the devices and sends none. Every commit is then a batch of one, so SQLite weighs more than under
load: compare builds with it, not with `make bench`.
Usage: python3 bench/ingest_instructions.py [RELAY_BINARY] [N]   (defaults .build/release/kumapush-relay, 2000;
needs `apt-get install valgrind`). On 2026-12-01: 361,838 at the start of the day, 308,847 at its end."""
import http.client
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BODY = open(os.path.join(ROOT, "Tests", "Fixtures", "webhooks", "a-1.23-http-down.json"), "rb").read()


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def instructions(relay, webhooks):
    """Total instructions of one `ingest` run under callgrind that takes `webhooks` webhooks."""
    work, port = tempfile.mkdtemp(), free_port()
    env = dict(os.environ, DATABASE_PATH=f"{work}/relay.db", PORT=str(port), HOST="127.0.0.1", LOG_LEVEL="warning",
               RATE_LIMIT_REGISTER="off", RATE_LIMIT_WEBHOOK_IP="off", RATE_LIMIT_WEBHOOK="off",
               RATE_LIMIT_WEBHOOK_FAILED="off", QUEUE_MAX="10000000")
    process = subprocess.Popen(["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", relay, "ingest"],
                               env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
                connection.request("GET", "/health")
                connection.getresponse().read()
                break
            except OSError:
                if time.monotonic() > deadline or process.poll() is not None:
                    raise RuntimeError("ingest did not start under valgrind")
                time.sleep(0.2)
        devices = []
        for seed in range(1, 101):
            connection.request("POST", "/devices", json.dumps({"device_token": f"{seed:064x}"}),
                               {"Content-Type": "application/json"})
            devices.append(json.loads(connection.getresponse().read())["id"])
        for n in range(webhooks):
            connection.request("POST", f"/wh/{devices[n % 100]}", BODY, {"Content-Type": "application/json"})
            answer = connection.getresponse()
            answer.read()
            if answer.status != 202:
                raise RuntimeError(f"webhook answered {answer.status}")
        process.send_signal(signal.SIGTERM)
        report = process.communicate(timeout=120)[1]
        return int(re.search(r"Collected : (\d+)", report).group(1))
    finally:
        if process.poll() is None:
            process.kill()
        shutil.rmtree(work, ignore_errors=True)


def main():
    relay = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, ".build", "release", "kumapush-relay")
    webhooks = int(sys.argv[2]) if len(sys.argv) > 2 else 2000
    per_webhook = (instructions(relay, webhooks) - instructions(relay, 0)) / webhooks
    print(f"{per_webhook:,.0f} instructions per webhook ({webhooks} webhooks, {relay})")


if __name__ == "__main__":
    main()
