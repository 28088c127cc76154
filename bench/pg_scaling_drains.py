"""PostgreSQL deliver drains, several per process count, to tell a change in `make bench`'s scaling curve from its
noise (the curve's point is the median of three drains since the twenty-first session, one before). Each run: a
fresh database on a durable throwaway server, 50,000 jobs prefilled over 1,000 devices, `PROCESSES` deliver
processes (DEVICE_BURST off, as `make bench`'s drain; polled every 100 ms rather than its 250, so its figures
compare with each other, and only roughly with the bench's points), timed from the first delivery to the last; also
how many claims and completion batches the deliverers made (their store histograms). A run that hits the 180 s cap
says so (`"complete": false`).

    .venv/bin/python bench/pg_scaling_drains.py RUNS PROCESSES

uses the release build of the checkout it is in (`swift build -c release --static-swift-stdlib`); run it from two
checkouts to compare two commits. One JSON line per run. Needs a quiet machine, like `make bench`."""
import json
import subprocess
import sys
import time
import urllib.request

from harness import (QUEUE_BENCH, RELAY, ROOT, TLS, apns_env, free_port, metric, phase_folder, postgres_store, relay_env,
                     run, start, start_sim, stop)
from phase_postgres import SCALING_JOBS, Databases

sys.path.insert(0, str(ROOT / "Tests" / "e2e"))
from postgres_server import PostgresServer  # noqa: E402 - after the path it lives on


def store_operations(port, operation):
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    prefix = f'kumapush_delivery_store_seconds_count{{operation="{operation}"'
    return sum(float(line.split()[-1]) for line in text.splitlines() if line.startswith(prefix))


def drain_once(databases, processes, folder, number):
    name, url = databases.create()
    run([QUEUE_BENCH, "prefill", url, SCALING_JOBS, 1000], check=True)
    sim, sim_port = start_sim()
    ports = [free_port() for _ in range(processes)]
    delivers = [start([RELAY, "deliver"], relay_env(postgres_store(url), METRICS_ADDR=f"127.0.0.1:{port}", DEVICE_BURST="off",
                                                      **apns_env(sim_port)), folder / f"run{number}-{n}.log")
                for n, port in enumerate(ports)]
    started, first, delivered = time.monotonic(), None, 0
    try:
        while delivered < SCALING_JOBS and time.monotonic() - started < 180:
            time.sleep(0.1)
            try:
                delivered = sum(metric(port, 'kumapush_deliveries_total{outcome="delivered"') for port in ports)
            except OSError:
                continue
            if delivered and first is None:
                first = time.monotonic()
        last = time.monotonic()
        claims = sum(store_operations(port, "claim") for port in ports)
        finishes = sum(store_operations(port, "finish") for port in ports)
    finally:
        for process in delivers:
            stop(process)
        stop(sim)
        databases.drop(name)
    return {"run": number, "processes": processes, "pps": round(delivered / max(last - (first or last), 0.1)),
            "delivered": int(delivered), "complete": delivered >= SCALING_JOBS, "claims": int(claims),
            "finishes": int(finishes)}


def main():
    runs, processes = int(sys.argv[1]), int(sys.argv[2])
    run([ROOT / "scripts" / "generate-test-certs.sh", TLS], check=True, stdout=subprocess.DEVNULL)
    folder = phase_folder("scaling-drains")
    server = PostgresServer(durable=True).start()
    try:
        databases = Databases(server)
        for number in range(1, runs + 1):
            print(json.dumps(drain_once(databases, processes, folder, number)), flush=True)
    finally:
        server.stop()


if __name__ == "__main__":
    main()
