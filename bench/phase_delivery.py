"""Delivery: `deliver` draining 100,000 queued pushes to the simulator, against h2load sending the same request to
the same simulator (throughput, and CPU time per push against h2load's CPU time per request) and Python aioapns;
then the same drain with 30 ms of simulated APNs latency."""
import re
import shutil
import time

from harness import (PY, QUEUE_BENCH, RELAY, ROOT, RUNS, SIM_THREADS, TLS, TOPIC, apns_env, cpu_seconds, free_port,
                     metric, peak_rss_mib, phase_folder, relay_env, run, run_with_rusage, sqlite_store, start, start_sim,
                     step, stop, summarize)

JOBS = 100_000
DEVICES = 1000
AIOAPNS_PUSHES = 10_000


def prefill(folder, jobs=JOBS, devices=DEVICES):
    """A relay database with `jobs` queued over `devices`, copied for each drain (filling it takes longer)."""
    template = folder / "template.db"
    run([QUEUE_BENCH, "prefill", template, jobs, devices], check=True)
    return template


def copy_database(template, target):
    for suffix in ("", "-wal", "-shm"):
        if template.with_name(template.name + suffix).exists():
            shutil.copy(template.with_name(template.name + suffix), target.with_name(target.name + suffix))
    return target


def remove_database(path):
    for suffix in ("", "-wal", "-shm"):
        path.with_name(path.name + suffix).unlink(missing_ok=True)


# How often a drain reads the deliverers' delivered counter. A 100,000-push drain lasts about 2.5 s, so 0.25 s
# samples put its rate on steps of about 10 % (most drains of one build read 39,6xx or 44,0xx pushes/s); at
# 50 ms the steps are 2 %. A scrape costs `deliver` about 0.11 ms of CPU (2,000 scrapes: 220 ms), so 0.05 µs of
# its CPU a push over such a drain. The PostgreSQL scaling drains keep 0.25 s: each of their samples also reads
# every PostgreSQL process's CPU, and the machine's busy share decides their verdict.
FAST_SAMPLES = 0.05


def drain(store, jobs, sim_port, folder, label, deliverers=1, timeout=180, watch=None, every=0.25):
    """Starts `deliverers` deliver processes on `store` (holding `jobs` queued) and times the drain from the first
    delivery to the last (to within `every`, the sampling interval). Returns pushes/s, the [(s, delivered)] series, peak RSS (MiB), the deliverers' CPU seconds
    (whole lifetime), pushes delivered, and — over the window from the first delivery to the last — the CPU seconds
    of the deliverers and of each process group `watch()` reports ({name: CPU seconds so far}) with the window's length."""
    ports = [free_port() for _ in range(deliverers)]
    # DEVICE_BURST off: this measures the push rate, not how well storms are merged into digests.
    delivers = [start([RELAY, "deliver"], relay_env(store, METRICS_ADDR=f"127.0.0.1:{port}", DEVICE_BURST="off", **apns_env(sim_port)),
                      folder / f"{label}-{n}.log") for n, port in enumerate(ports)]
    cpu_now = lambda: {"deliver": sum(cpu_seconds(d.pid) for d in delivers), **(watch() if watch else {})}
    series, samples = [], []
    started = time.monotonic()
    delivered = 0
    while delivered < jobs and time.monotonic() - started < timeout:
        time.sleep(every)
        delivered = sum(metric(port, 'kumapush_deliveries_total{outcome="delivered"') for port in ports)
        series.append((time.monotonic() - started, delivered))
        samples.append((series[-1][0], delivered, cpu_now()))
    cpu = sum(cpu_seconds(d.pid) for d in delivers)
    first = next((t for t, d in series if d > 0), 0.0)
    last = next((t for t, d in series if d >= jobs), series[-1][0])
    # The CPU window: from the last sample before any delivery to the first sample with every push delivered.
    opening = max((s for s in samples if s[1] == 0), key=lambda s: s[0], default=samples[0])
    closing = next((s for s in samples if s[1] >= jobs), samples[-1])
    window = {name: closing[2][name] - opening[2].get(name, 0.0) for name in closing[2]}
    rss = max(peak_rss_mib(d) or 0 for d in delivers)
    for d in delivers:
        stop(d)
    return {"pps": delivered / max(last - first, every), "series": series, "rss_mib": rss, "cpu_s": cpu,
            "delivered": delivered, "window_s": max(closing[0] - opening[0], every), "window_cpu_s": window}


def provider_token():
    return run([PY, "-c", f"""
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


def h2load(sim_port, folder, requests=JOBS, token=None):
    """h2load (2 connections × 500 streams) with the relay's request. Returns (requests/s, 2xx, CPU seconds). `token`:
    a provider token signed beforehand (else one is signed here, by a Python child)."""
    payload = folder / "payload.json"
    payload.write_text('{"aps":{"alert":{"title":"Monitor 1 is down","body":"Request failed with status code 503"},"sound":"default","interruption-level":"active","thread-id":"monitor-1"}}')
    status, cpu, out = run_with_rusage(["h2load", "-n", requests, "-c", "2", "-m", "500", "-d", payload,
                                        "-H", f"authorization: bearer {token or provider_token()}", "-H", f"apns-topic: {TOPIC}",
                                        "-H", "apns-push-type: alert", "-H", "apns-priority: 10", "-H", "content-type: application/json",
                                        f"https://127.0.0.1:{sim_port}/3/device/{'ab' * 32}"], folder / "h2load.out")
    match = re.search(r"finished in [\d.]+\w+, ([\d.]+) req/s", out)
    ok = re.search(r"status codes: (\d+) 2xx", out)
    return float(match.group(1)) if match else 0.0, int(ok.group(1)) if ok else 0, cpu


def aioapns(sim_port):
    result = run([PY, ROOT / "bench" / "aioapns_client.py", sim_port, TLS / "ca.pem", TLS / "apns-key.p8", TOPIC,
                  AIOAPNS_PUSHES, 1000], capture_output=True, text=True)
    if result.returncode != 0 or not result.stdout:
        step(f"  aioapns failed: {result.stderr.strip().splitlines()[-1:]}")
        return None
    return float(result.stdout.split()[0])


def delivery_once(template, folder, number, series_out):
    figures = {}
    db = copy_database(template, folder / f"drain{number}.db")
    sim, sim_port = start_sim()
    sim_cpu = cpu_seconds(sim.pid)
    drained = drain(sqlite_store(db), JOBS, sim_port, folder, f"drain{number}", every=FAST_SAMPLES)
    figures["relay_pps"], figures["rss_mib"] = drained["pps"], drained["rss_mib"]
    figures["sim_cpu_s_relay"] = cpu_seconds(sim.pid) - sim_cpu
    figures["relay_cpu_us_per_push"] = drained["cpu_s"] / max(drained["delivered"], 1) * 1e6
    remove_database(db)
    series_out.setdefault("relay (0 ms)", drained["series"])

    sim_cpu = cpu_seconds(sim.pid)
    figures["h2load_pps"], ok, h2_cpu = h2load(sim_port, folder)
    figures["sim_cpu_s_h2load"] = cpu_seconds(sim.pid) - sim_cpu
    figures["h2load_cpu_us_per_request"] = h2_cpu / max(ok, 1) * 1e6
    figures["aioapns_pps"] = aioapns(sim_port)
    stop(sim)
    figures["ratio_h2load"] = figures["relay_pps"] / figures["h2load_pps"] if figures["h2load_pps"] else None
    figures["ratio_cpu"] = figures["relay_cpu_us_per_push"] / figures["h2load_cpu_us_per_request"] if ok else None
    figures["ratio_aioapns"] = figures["relay_pps"] / figures["aioapns_pps"] if figures["aioapns_pps"] else None

    db = copy_database(template, folder / f"drain30-{number}.db")
    sim, sim_port = start_sim(latency=30)
    drained = drain(sqlite_store(db), JOBS, sim_port, folder, f"drain30-{number}", every=FAST_SAMPLES)
    figures["relay_pps_30ms"] = drained["pps"]
    stop(sim)
    remove_database(db)
    series_out.setdefault("relay (30 ms APNs)", drained["series"])
    return figures


def bench_delivery(results, series_out):
    folder = phase_folder("deliver")
    step(f"delivery: drain {JOBS:,} queued pushes to the simulator ({SIM_THREADS} event loops); h2load and aioapns "
         f"against the same simulator; the drain again at 30 ms APNs latency × {RUNS}")
    template = prefill(folder)
    runs = []
    for number in range(1, RUNS + 1):
        figures = delivery_once(template, folder, number, series_out)
        runs.append(figures)
        step(f"  run {number}: relay {figures['relay_pps']:.0f}/s at {figures['relay_cpu_us_per_push']:.1f} µs CPU/push; "
             f"h2load {figures['h2load_pps']:.0f}/s at {figures['h2load_cpu_us_per_request']:.1f} µs CPU/request; "
             f"aioapns {figures['aioapns_pps'] or 0:.0f}/s; at 30 ms {figures['relay_pps_30ms']:.0f}/s")
    results["deliver"] = summarize(runs)
    results["deliver"]["sim_threads"] = SIM_THREADS
    results.setdefault("rss_mib", {})["deliver"] = max(r["rss_mib"] or 0 for r in runs)
