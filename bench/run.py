#!/usr/bin/env python3
"""`make bench`: SPEC §7's figures, each next to a ceiling measured in the same run on the same machine.

Writes bench/results/latest.{json,md,png} and a dated copy of each. Progress goes to stdout as it runs.
"""
import datetime
import json
import os
import pathlib
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

ROOT = pathlib.Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
BIN = ROOT / ".build" / "release"
RELAY = BIN / "kumapush-relay"
TOPIC = "bench.kumapush.app"
PY = sys.executable
WORK = pathlib.Path(tempfile.mkdtemp(prefix="kumapush-bench-"))
TLS = WORK / "tls"
processes = []


def step(message):
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(args, **kwargs):
    """subprocess.run with every argument turned into text."""
    return subprocess.run([str(a) for a in args], **kwargs)


def start(args, env=None, log=None):
    full_env = dict(os.environ, LOG_LEVEL="warning", **(env or {}))
    out = open(log or os.devnull, "ab")
    process = subprocess.Popen([str(a) for a in args], env=full_env, stdout=out, stderr=out)
    processes.append(process)
    return process


def stop(process):
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()


def peak_rss_mib(process):
    try:
        status = open(f"/proc/{process.pid}/status").read()
        return int(re.search(r"VmHWM:\s+(\d+) kB", status).group(1)) / 1024
    except (OSError, AttributeError):
        return None


def wait_until(condition, timeout=60, what="condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.05)
    raise TimeoutError(what)


def http(method, url, body=None, headers=None):
    request = urllib.request.Request(url, data=body, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()
    except OSError:
        return 0, b""


def healthy(port):
    return http("GET", f"http://127.0.0.1:{port}/health")[0] == 200


def metric(port, name):
    status, body = http("GET", f"http://127.0.0.1:{port}/metrics")
    total = 0.0
    for line in body.decode(errors="replace").splitlines():
        if line.startswith(name) and not line.startswith("#"):
            total += float(line.rsplit(" ", 1)[1])
    return total


def relay_env(db, **extra):
    env = {"DATABASE_PATH": str(db), "RATE_LIMIT_REGISTER": "off", "RATE_LIMIT_WEBHOOK_IP": "off",
           "RATE_LIMIT_WEBHOOK_FAILED": "off", "QUEUE_MAX": "10000000", "HOST": "127.0.0.1"}
    env.update({k: str(v) for k, v in extra.items()})
    return env


def apns_env(sim_port):
    return {"APNS_URL": f"https://127.0.0.1:{sim_port}", "APNS_CA_FILE": str(TLS / "ca.pem"),
            "APNS_AUTH_KEY_PATH": str(TLS / "apns-key.p8"), "APNS_KEY_ID": "BENCHKEY01", "APNS_TEAM_ID": "BENCHTEAM1",
            "APP_BUNDLE_IDENTIFIER": TOPIC}


def start_sim(latency=0, record=None):
    port = free_port()
    args = [RELAY, "apns-sim", "--cert", TLS / "server.pem", "--key", TLS / "server.key", "--token-key", TLS / "apns-key.pub.pem",
            "--listen", f"127.0.0.1:{port}", "--topic", TOPIC, "--quiet", "--latency", latency]
    if record:
        args += ["--record", record]
    process = start(args, log=WORK / "sim.log")
    wait_until(lambda: run(["curl", "-s", "--http2", "--cacert", TLS / "ca.pem", f"https://127.0.0.1:{port}/sim/stats"],
                                      capture_output=True).returncode == 0, what="simulator")
    return process, port


def sim_faults(port, faults):
    run(["curl", "-s", "--http2", "--cacert", TLS / "ca.pem", "-X", "POST", "-d", json.dumps(faults),
                    f"https://127.0.0.1:{port}/sim/faults"], check=True, capture_output=True)


def register(port, seeds):
    ids = []
    for seed in seeds:
        status, body = http("POST", f"http://127.0.0.1:{port}/devices", json.dumps({"device_token": f"{seed:064x}"}).encode(),
                            {"Content-Type": "application/json"})
        ids.append(json.loads(body)["id"])
    return ids


def wrk(url, body_file, seconds=10, connections=64):
    script = WORK / "post.lua"
    script.write_text('wrk.method = "POST"\nwrk.headers["Content-Type"] = "application/json"\n'
                      f'local f = io.open("{body_file}", "rb")\nwrk.body = f:read("*a")\nf:close()\n')
    result = run(["wrk", "-t1", f"-c{connections}", f"-d{seconds}s", "-s", str(script), url],
                            capture_output=True, text=True)
    match = re.search(r"Requests/sec:\s+([\d.]+)", result.stdout)
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", result.stdout)
    total = re.search(r"(\d+) requests in", result.stdout)
    return (float(match.group(1)) if match else 0.0, int(non2xx.group(1)) if non2xx else 0, int(total.group(1)) if total else 0)


# --- the figures --------------------------------------------------------------------------------------------------

def bench_ingest(results):
    step("ingest: durable webhook acceptance vs nginx answering a fixed 202 (wrk, 64 keep-alive connections, 10 s each)")
    body = ROOT / "Tests" / "Fixtures" / "webhooks" / "a-1.23-http-down.json"
    port = free_port()
    # One device takes every webhook of the run: past DEVICE_QUEUE_MAX its alerts would fold into its waiting digest
    # (a storm's path, not an ordinary alert's). BENCH_DEVICE_QUEUE_MAX sets the cap for this phase (default: as
    # shipped, so the figure is what one stormy device costs).
    overrides = {"DEVICE_QUEUE_MAX": os.environ["BENCH_DEVICE_QUEUE_MAX"]} if os.environ.get("BENCH_DEVICE_QUEUE_MAX") else {}
    ingest = start([RELAY, "ingest"], relay_env(WORK / "ingest.db", PORT=port, METRICS_ADDR="off", **overrides), WORK / "ingest.log")
    wait_until(lambda: healthy(port), what="ingest")
    device = register(port, [1])[0]
    relay_rps, relay_errors, relay_total = wrk(f"http://127.0.0.1:{port}/wh/{device}", body)
    rss = peak_rss_mib(ingest)
    stop(ingest)
    stats = json.loads(run([RELAY, "stats", "--json", "--database-path", WORK / "ingest.db"], capture_output=True, text=True).stdout)
    stored = sum(stats["jobs"].values())

    nginx_port = free_port()
    conf = WORK / "nginx.conf"
    conf.write_text(f"""worker_processes 2; pid {WORK}/nginx.pid; error_log {WORK}/nginx-error.log; daemon off;
events {{ worker_connections 1024; }}
http {{ access_log off; client_body_temp_path {WORK}; proxy_temp_path {WORK}; fastcgi_temp_path {WORK};
  uwsgi_temp_path {WORK}; scgi_temp_path {WORK};
  server {{ listen 127.0.0.1:{nginx_port}; location / {{ default_type application/json;
    return 202 '{{"status":"queued","id":"00000000-0000-0000-0000-000000000000"}}'; }} }} }}
""")
    nginx = start(["nginx", "-c", conf, "-p", WORK], log=WORK / "nginx.log")
    wait_until(lambda: http("GET", f"http://127.0.0.1:{nginx_port}/")[0] == 202, what="nginx")
    nginx_rps, _, _ = wrk(f"http://127.0.0.1:{nginx_port}/wh/x", body)
    stop(nginx)
    results["ingest"] = {"relay_rps": round(relay_rps), "nginx_rps": round(nginx_rps), "ratio": round(relay_rps / nginx_rps, 3),
                         "errors": relay_errors, "answered": relay_total, "jobs_stored": stored}
    results.setdefault("rss_mib", {})["ingest"] = rss
    step(f"  relay {relay_rps:.0f} req/s, nginx {nginx_rps:.0f} req/s, ratio {relay_rps / nginx_rps:.2f}")


def drain(jobs, devices, latency=0, label="drain"):
    """Pre-fills `jobs` over `devices`, starts `deliver`, and times the drain. Returns (pushes/s, series, rss)."""
    db = WORK / f"{label}.db"
    run([BIN / "QueueBench", "prefill", db, jobs, devices], check=True)
    sim, sim_port = start_sim(latency=latency)
    metrics_port = free_port()
    # DEVICE_BURST off: this measures the push rate, not how well storms are merged into digests.
    deliver = start([RELAY, "deliver"], relay_env(db, METRICS_ADDR=f"127.0.0.1:{metrics_port}", DEVICE_BURST="off", **apns_env(sim_port)),
                    WORK / f"{label}.log")
    series = []
    started = time.monotonic()
    delivered = 0
    while delivered < jobs and time.monotonic() - started < 180:
        time.sleep(0.25)
        delivered = metric(metrics_port, 'kumapush_deliveries_total{outcome="delivered"')
        series.append((time.monotonic() - started, delivered))
    first = next((t for t, d in series if d > 0), 0.0)
    last = next((t for t, d in series if d >= jobs), series[-1][0])
    rss = peak_rss_mib(deliver)
    stop(deliver)
    stop(sim)
    rate = delivered / max(last - first, 0.25)
    return rate, series, rss


def bench_delivery(results, series_out):
    step("delivery: drain 100,000 queued pushes to the simulator (2 HTTP/2 connections, 1,000 in flight)")
    relay_pps, series, rss = drain(100_000, 1000, label="drain")
    series_out["relay (0 ms)"] = series
    step(f"  relay {relay_pps:.0f} pushes/s")

    step("delivery ceiling: h2load against the same simulator with the same request (2 connections × 500 streams)")
    sys.path.insert(0, str(ROOT / "Tests" / "e2e"))
    jwt = run([PY, "-c", f"""
import base64, json, time
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature
b = lambda d: base64.urlsafe_b64encode(d).rstrip(b"=").decode()
key = serialization.load_pem_private_key(open("{TLS / 'apns-key.p8'}", "rb").read(), None)
head = b(json.dumps({{"alg": "ES256", "kid": "BENCHKEY01"}}).encode()) + "." + b(json.dumps({{"iss": "BENCHTEAM1", "iat": int(time.time())}}).encode())
r, s = decode_dss_signature(key.sign(head.encode(), ec.ECDSA(hashes.SHA256())))
print(head + "." + b(r.to_bytes(32, "big") + s.to_bytes(32, "big")))
"""], capture_output=True, text=True, check=True).stdout.strip()
    payload = WORK / "payload.json"
    payload.write_text('{"aps":{"alert":{"title":"Monitor 1 is down","body":"Request failed with status code 503"},"sound":"default","interruption-level":"active","thread-id":"monitor-1"}}')
    sim, sim_port = start_sim()
    h2 = run(["h2load", "-n", "100000", "-c", "2", "-m", "500", "-d", str(payload),
                         "-H", f"authorization: bearer {jwt}", "-H", f"apns-topic: {TOPIC}", "-H", "apns-push-type: alert",
                         "-H", "apns-priority: 10", "-H", "content-type: application/json",
                         f"https://127.0.0.1:{sim_port}/3/device/{'ab' * 32}"], capture_output=True, text=True)
    match = re.search(r"finished in [\d.]+\w+, ([\d.]+) req/s", h2.stdout)
    h2load_pps = float(match.group(1)) if match else 0.0
    ok = re.search(r"status codes: (\d+) 2xx", h2.stdout)
    step(f"  h2load {h2load_pps:.0f} req/s ({ok.group(1) if ok else '?'} × 2xx)")

    step("delivery peer: Python aioapns sending 20,000 of the same pushes to the same simulator")
    aio = run([PY, ROOT / "bench" / "aioapns_client.py", sim_port, TLS / "ca.pem", TLS / "apns-key.p8", TOPIC, "20000", "1000"],
                         capture_output=True, text=True)
    aioapns_pps = float(aio.stdout.split()[0]) if aio.returncode == 0 and aio.stdout else 0.0
    if aio.returncode != 0:
        step(f"  aioapns failed: {aio.stderr.strip().splitlines()[-1:]}")
    stop(sim)
    step(f"  aioapns {aioapns_pps:.0f} pushes/s")

    step("delivery at 30 ms simulated APNs latency: drain 100,000 pushes")
    relay_30, series30, _ = drain(100_000, 1000, latency=30, label="drain30")
    series_out["relay (30 ms APNs)"] = series30
    step(f"  relay {relay_30:.0f} pushes/s at 30 ms")
    results["deliver"] = {"relay_pps": round(relay_pps), "h2load_pps": round(h2load_pps), "aioapns_pps": round(aioapns_pps),
                          "ratio_h2load": round(relay_pps / h2load_pps, 3) if h2load_pps else None,
                          "ratio_aioapns": round(relay_pps / aioapns_pps, 2) if aioapns_pps else None,
                          "relay_pps_30ms": round(relay_30)}
    results.setdefault("rss_mib", {})["deliver"] = rss


def bench_queue(results):
    step("queue: raw SQLite inserts vs enqueue; claim + complete at 10,000 vs 1,000,000 queued (about a minute)")
    out = run([BIN / "QueueBench", WORK], capture_output=True, text=True, check=True)
    queue = json.loads(out.stdout)
    queue["claim_ratio"] = round(queue["claim_rate_1m"] / queue["claim_rate_10k"], 3)
    queue["enqueue_ratio"] = round(queue["enqueue_rps"] / queue["raw_insert_rps"], 3)
    results["queue"] = queue
    step(f"  enqueue {queue['enqueue_rps']}/s (raw {queue['raw_insert_rps']}/s); claim {queue['claim_rate_10k']}/s at 10k, "
         f"{queue['claim_rate_1m']}/s at 1M")


def bench_queue_postgres(results):
    step("queue on PostgreSQL: enqueue; claim + complete at 10,000 vs 1,000,000 queued (a few minutes)")
    sys.path.insert(0, str(ROOT / "Tests" / "e2e"))
    from postgres_server import PostgresServer
    server = PostgresServer(durable=True).start()  # fsync on, as in production: durable commits
    try:
        urls = [server.url(server.create_database()) for _ in range(3)]
        out = run([BIN / "QueueBench", "postgres", *urls], capture_output=True, text=True, check=True)
    finally:
        server.stop()
    queue = json.loads(out.stdout)
    queue["claim_ratio"] = round(queue["claim_rate_1m"] / queue["claim_rate_10k"], 3)
    if "queue" in results:
        queue["enqueue_vs_sqlite"] = round(queue["enqueue_rps"] / results["queue"]["enqueue_rps"], 3)
    results["queue_postgres"] = queue
    step(f"  enqueue {queue['enqueue_rps']}/s; claim {queue['claim_rate_10k']}/s at 10k, {queue['claim_rate_1m']}/s at 1M")


def serve_with_sim(label, record):
    sim, sim_port = start_sim(record=record)
    port, metrics_port = free_port(), free_port()
    # DEVICE_BURST off: these runs send several alerts a second to each device, which the default (10 a minute)
    # would merge into digests — they measure per-alert latency and loss, where every job must reach APNs itself.
    serve = start([RELAY, "serve"], relay_env(WORK / f"{label}.db", PORT=port, METRICS_ADDR=f"127.0.0.1:{metrics_port}",
                                              RETRY_BASE="200ms", RETRY_MAX="5s", DEVICE_BURST="off", **apns_env(sim_port)),
                  WORK / f"{label}.log")
    wait_until(lambda: healthy(port), what="serve")
    return sim, sim_port, serve, port


def devices_file(port, count, label):
    """Registers `count` devices and writes their ids, one a line, for loadgen.py."""
    path = WORK / f"{label}-devices.txt"
    path.write_text("\n".join(register(port, range(1, count + 1))))
    return path


def queue_empty(db):
    stats = json.loads(run([RELAY, "stats", "--json", "--database-path", db], capture_output=True, text=True).stdout)
    return sum(stats["jobs"].values()) == 0


def read_loadgen(path):
    rows = []
    for line in open(path):
        job, device, seq, sent, status = line.split()
        rows.append((job, int(device), int(seq), int(sent), int(status)))
    return rows


def read_record(path):
    arrivals = {}
    for line in open(path):
        apns_id, status, micros = line.split()
        arrivals.setdefault(apns_id, []).append((int(status), int(micros)))
    return arrivals


def bench_latency(results, latencies_out):
    step("latency: open-loop 1,000 webhooks/s for 15 s into `serve`; webhook sent → APNs request received")
    record = WORK / "latency.record"
    sim, sim_port, serve, port = serve_with_sim("latency", record)
    devices = devices_file(port, 200, "latency")
    out = WORK / "latency.out"
    achieved = run([PY, ROOT / "bench" / "loadgen.py", port, 1000, 15, devices, out], capture_output=True, text=True)
    wait_until(lambda: queue_empty(WORK / "latency.db"), what="the last pushes")
    rss = peak_rss_mib(serve)
    stop(serve)
    stop(sim)
    arrivals = read_record(record)
    latencies = sorted((arrivals[job][-1][1] - sent) / 1000 for job, _, _, sent, status in read_loadgen(out)
                       if status == 202 and job in arrivals)
    latencies_out.extend(latencies)
    p = lambda q: round(latencies[min(len(latencies) - 1, int(q * len(latencies)))], 2) if latencies else None
    results["latency_ms"] = {"p50": p(0.5), "p90": p(0.9), "p99": p(0.99), "max": round(latencies[-1], 2) if latencies else None,
                             "samples": len(latencies), "offered_rps": float(achieved.stdout.strip() or 0)}
    results.setdefault("rss_mib", {})["serve"] = rss
    step(f"  p50 {p(0.5)} ms, p99 {p(0.99)} ms over {len(latencies)} pushes")


def bench_outage(results, series_out):
    step("outage: 200 webhooks/s into `serve` for 80 s; APNs answers 503 from second 10 to second 70")
    record = WORK / "outage.record"
    sim, sim_port, serve, port = serve_with_sim("outage", record)
    devices = devices_file(port, 100, "outage")
    out = WORK / "outage.out"
    load = subprocess.Popen([str(a) for a in (PY, ROOT / "bench" / "loadgen.py", port, 200, 80, devices, out)],
                            stdout=subprocess.PIPE, text=True)
    time.sleep(10)
    outage_end = time.time() + 60
    sim_faults(sim_port, {"unavailableUntil": int(outage_end * 1000)})
    load.wait()
    rows = read_loadgen(out)
    accepted = {job: (device, seq) for job, device, seq, _, status in rows if status == 202}
    def delivered():
        arrivals = read_record(record) if record.exists() else {}
        return all(any(s == 200 for s, _ in arrivals.get(job, [])) for job in accepted)
    # The simulator writes its record in 64 KiB chunks; stop it to flush once the relay's queue is empty.
    wait_until(lambda: queue_empty(WORK / "outage.db"), timeout=120, what="the backlog to drain")
    stop(serve)
    stop(sim)
    arrivals = read_record(record)
    lost = sum(1 for job in accepted if not any(s == 200 for s, _ in arrivals.get(job, [])))
    per_device = {}
    for job, (device, seq) in accepted.items():
        ok = [t for s, t in arrivals.get(job, []) if s == 200]
        if ok:
            per_device.setdefault(device, []).append((min(ok), seq))
    violations = sum(1 for pushes in per_device.values() for (a, b) in zip(sorted(pushes), sorted(pushes)[1:]) if b[1] < a[1])
    # The backlog: jobs accepted before APNs came back. Drain time = its last delivery − the end of the outage.
    sent_at = {job: sent for job, _, _, sent, status in rows if status == 202}
    backlog = [job for job in accepted if sent_at[job] / 1e6 < outage_end]
    last_delivery = max((t for job in backlog for s, t in arrivals.get(job, []) if s == 200), default=0) / 1e6
    failed_attempts = sum(1 for pushes in arrivals.values() for s, _ in pushes if s == 503)
    results["outage"] = {"accepted": len(accepted), "backlog": len(backlog), "lost": lost, "order_violations": violations,
                         "drain_s": round(max(0.0, last_delivery - outage_end), 2), "attempts_503": failed_attempts}
    step(f"  accepted {len(accepted)}, lost {lost}, order violations {violations}, drained {results['outage']['drain_s']} s "
         f"after recovery, {failed_attempts} attempts answered 503")


# --- output -------------------------------------------------------------------------------------------------------

TARGETS = [
    ("Ingest: durable webhooks/s vs nginx fixed 202", lambda r: r["ingest"]["relay_rps"], lambda r: r["ingest"]["nginx_rps"],
     lambda r: r["ingest"]["ratio"], "≥ 0.50", lambda r: r["ingest"]["ratio"] >= 0.5),
    ("Delivery: pushes/s vs h2load on the same simulator", lambda r: r["deliver"]["relay_pps"], lambda r: r["deliver"]["h2load_pps"],
     lambda r: r["deliver"]["ratio_h2load"], "≥ 0.50", lambda r: (r["deliver"]["ratio_h2load"] or 0) >= 0.5),
    ("Delivery: pushes/s vs Python aioapns", lambda r: r["deliver"]["relay_pps"], lambda r: r["deliver"]["aioapns_pps"],
     lambda r: r["deliver"]["ratio_aioapns"], "≥ 10×", lambda r: (r["deliver"]["ratio_aioapns"] or 0) >= 10),
    ("Delivery at 30 ms APNs latency (pushes/s)", lambda r: r["deliver"]["relay_pps_30ms"], lambda r: 10000,
     lambda r: round(r["deliver"]["relay_pps_30ms"] / 10000, 2), "≥ 10,000/s", lambda r: r["deliver"]["relay_pps_30ms"] >= 10000),
    ("Latency p99 at 1,000 webhooks/s (ms, webhook sent → APNs)", lambda r: r["latency_ms"]["p99"], lambda r: 10,
     lambda r: round(r["latency_ms"]["p99"] / 10, 2), "≤ 10 ms", lambda r: r["latency_ms"]["p99"] <= 10),
    ("Queue: claim rate at 1M vs 10k queued (jobs/s)", lambda r: r["queue"]["claim_rate_1m"], lambda r: r["queue"]["claim_rate_10k"],
     lambda r: r["queue"]["claim_ratio"], "≥ 0.80", lambda r: r["queue"]["claim_ratio"] >= 0.8),
    ("Queue: enqueue vs raw SQLite inserts (rows/s)", lambda r: r["queue"]["enqueue_rps"], lambda r: r["queue"]["raw_insert_rps"],
     lambda r: r["queue"]["enqueue_ratio"], "(no target)", lambda r: True),
    ("PostgreSQL: claim rate at 1M vs 10k queued (jobs/s)", lambda r: r["queue_postgres"]["claim_rate_1m"],
     lambda r: r["queue_postgres"]["claim_rate_10k"], lambda r: r["queue_postgres"]["claim_ratio"], "≥ 0.80",
     lambda r: r["queue_postgres"]["claim_ratio"] >= 0.8),
    ("PostgreSQL: enqueue vs SQLite enqueue (jobs/s, durable)", lambda r: r["queue_postgres"]["enqueue_rps"],
     lambda r: r["queue"]["enqueue_rps"], lambda r: r["queue_postgres"]["enqueue_vs_sqlite"], "≥ 0.50",
     lambda r: r["queue_postgres"]["enqueue_vs_sqlite"] >= 0.5),
    ("Outage: lost jobs / order violations", lambda r: f'{r["outage"]["lost"]} / {r["outage"]["order_violations"]}', lambda r: "0 / 0",
     lambda r: "", "0 / 0", lambda r: r["outage"]["lost"] == 0 and r["outage"]["order_violations"] == 0),
    ("Outage: backlog drained after recovery (s)", lambda r: r["outage"]["drain_s"], lambda r: "", lambda r: "", "seconds",
     lambda r: r["outage"]["drain_s"] < 30),
    ("Memory: peak RSS, MiB (ingest / deliver / serve)",
     lambda r: " / ".join(f"{v:.0f}" for v in (r["rss_mib"].get("ingest") or 0, r["rss_mib"].get("deliver") or 0, r["rss_mib"].get("serve") or 0)),
     lambda r: 64, lambda r: "", "< 64 each", lambda r: all((v or 0) < 64 for v in r["rss_mib"].values())),
]


def write_outputs(results, series, latencies, command):
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H%M%SZ")
    results["command"] = command
    results["date"] = stamp
    results["machine"] = f"{os.cpu_count()} cores, {platform_memory()}"
    rows = ["| Figure | Relay | Ceiling | Ratio | Target | Pass |", "|---|---|---|---|---|---|"]
    for name, value, ceiling, ratio, target, passed in TARGETS:
        try:
            rows.append(f"| {name} | {value(results)} | {ceiling(results)} | {ratio(results)} | {target} | {'yes' if passed(results) else '**no**'} |")
        except (KeyError, TypeError, ZeroDivisionError) as error:
            rows.append(f"| {name} | — | — | — | {target} | not measured ({error}) |")
    markdown = f"# Benchmark results\n\n`{command}` on {results['machine']}, {stamp}.\n\n" + "\n".join(rows) + "\n"
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "latest.json").write_text(json.dumps(results, indent=2) + "\n")
    (RESULTS / "latest.md").write_text(markdown)
    plot(series, latencies, RESULTS / "latest.png")
    for name in ("latest.json", "latest.md", "latest.png"):
        if (RESULTS / name).exists():
            shutil.copy(RESULTS / name, RESULTS / name.replace("latest", stamp))
    print("\n" + markdown)


def platform_memory():
    try:
        kb = int(re.search(r"MemTotal:\s+(\d+)", open("/proc/meminfo").read()).group(1))
        return f"{kb / 1048576:.0f} GiB"
    except (OSError, AttributeError):
        return "unknown memory"


def plot(series, latencies, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    figure, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
    for label, points in series.items():
        if len(points) > 1:
            rates = [(t1, (d1 - d0) / (t1 - t0)) for (t0, d0), (t1, d1) in zip(points, points[1:]) if t1 > t0]
            left.plot([t for t, _ in rates], [r for _, r in rates], label=label)
    left.set_title("Delivery throughput while draining 100,000 queued pushes")
    left.set_xlabel("seconds")
    left.set_ylabel("pushes/s")
    left.legend()
    if latencies:
        right.hist(latencies, bins=100, range=(0, max(20, 3 * latencies[int(len(latencies) * 0.99)])))
        for q, style in ((0.5, "--"), (0.99, ":")):
            right.axvline(latencies[int(q * len(latencies))], linestyle=style, color="black", label=f"p{int(q * 100)}")
        right.legend()
    right.set_title("Webhook sent → APNs request received, 1,000 webhooks/s")
    right.set_xlabel("milliseconds")
    right.set_ylabel("pushes")
    figure.tight_layout()
    figure.savefig(path, dpi=100)


def main():
    command = "make bench" + (f" BENCH={os.environ['BENCH']}" if os.environ.get("BENCH") else "")
    only = set(filter(None, os.environ.get("BENCH", "").split(",")))
    step(f"building release binaries; work folder {WORK}")
    run(["swift", "build", "-c", "release", "--product", "kumapush-relay"], cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
    run(["swift", "build", "-c", "release", "--product", "QueueBench"], cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
    run([ROOT / "scripts" / "generate-test-certs.sh", TLS], check=True, stdout=subprocess.DEVNULL)
    results, series, latencies = {}, {}, []
    started = time.monotonic()
    try:
        for name, measure in (("ingest", lambda: bench_ingest(results)), ("deliver", lambda: bench_delivery(results, series)),
                          ("queue", lambda: bench_queue(results)), ("postgres", lambda: bench_queue_postgres(results)),
                          ("latency", lambda: bench_latency(results, latencies)),
                          ("outage", lambda: bench_outage(results, series))):
            if not only or name in only:
                measure()
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
    results["elapsed_s"] = round(time.monotonic() - started)
    write_outputs(results, series, latencies, command)
    shutil.rmtree(WORK, ignore_errors=True)


if __name__ == "__main__":
    main()
