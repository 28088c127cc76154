"""Phases that run `serve` (or ingest + deliver) against the simulator under open-loop load: latency with and
without /metrics scrapes, the outage, and the soak."""
import http.client
import math
import subprocess
import threading
import time

from harness import (PY, RELAY, ROOT, RUNS, apns_env, free_port, healthy, least_squares_slope, peak_rss_mib,
                     percentile, phase_folder, queue_empty, relay_env, rss_mib, sim_faults, sqlite_store, start, start_sim,
                     step, stop, summarize, devices_file, wait_until)

LATENCY_RATE = 1000
LATENCY_SECONDS = 10
LATENCY_WARMUP_SECONDS = 3
LATENCY_SLICE_SECONDS = 0.2


def serve_with_sim(store, folder, record=None, latency=0, **extra):
    sim, sim_port = start_sim(latency=latency, record=record)
    port, metrics_port = free_port(), free_port()
    # DEVICE_BURST off: these runs send several alerts a second to each device, which the default (10 a minute)
    # would merge into digests — they measure per-alert latency and loss, where every job must reach APNs itself.
    serve = start([RELAY, "serve"], relay_env(store, PORT=port, METRICS_ADDR=f"127.0.0.1:{metrics_port}", RETRY_BASE="200ms",
                                              RETRY_MAX="5s", DEVICE_BURST="off", **apns_env(sim_port), **extra),
                  folder / "serve.log")
    wait_until(lambda: healthy(port), what="serve")
    return sim, sim_port, serve, port, metrics_port


def loadgen(port, rate, seconds, devices, out):
    result = subprocess.run([str(a) for a in (PY, ROOT / "bench" / "loadgen.py", port, rate, seconds, devices, out)],
                            capture_output=True, text=True)
    return float(result.stdout.strip() or 0)


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


def latencies_ms(out, arrivals):
    """Webhook sent → APNs request received, for every accepted webhook of a loadgen run."""
    return sorted((arrivals[job][-1][1] - sent) / 1000 for job, _, _, sent, status in read_loadgen(out)
                  if status == 202 and job in arrivals)


def latencies_by_slice_ms(out, arrivals, slice_seconds):
    """`latencies_ms`, split by the slice each webhook was sent in (its send time is µs since 1970): (unscraped,
    scraped)."""
    slices = ([], [])
    for job, _, _, sent, status in read_loadgen(out):
        if status == 202 and job in arrivals:
            slices[scraped_at(sent / 1e6, slice_seconds)].append((arrivals[job][-1][1] - sent) / 1000)
    return tuple(sorted(values) for values in slices)


class Scraper:
    """GET /metrics every `interval` seconds on a thread of its own, as a Prometheus server would: over one kept-alive
    connection (Prometheus reuses its connections), opened again only if the relay closed it. A new connection per
    scrape through urllib cost this process about 2 ms of CPU a scrape, on the same two cores as the load it measures
    (twenty-first session).

    With `slice_seconds`, it scrapes only in the even slices of the wall clock (`scraped_at`), the latency run's
    scraped ones, and in their middle: at (n + ½) × `interval`, so that no scrape starts within a millisecond of a
    slice's edge and a webhook sent at the end of an unscraped slice does not meet one."""

    def __init__(self, port, interval=0.1, slice_seconds=None):
        self.port, self.interval, self.slice_seconds, self.count = port, interval, slice_seconds, 0
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)

    def _scrape(self, connection):
        connection.request("GET", "/metrics")
        connection.getresponse().read()

    def _next_scrape(self, now):
        """The first time at or after `now` (seconds since 1970) to scrape at."""
        n = math.ceil(now / self.interval - 0.5)
        while self.slice_seconds and not scraped_at((n + 0.5) * self.interval, self.slice_seconds):
            n += 1
        return (n + 0.5) * self.interval

    def _loop(self):
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        while True:
            now = time.time()
            if self.done.wait(max(0.0, self._next_scrape(now) - now)):
                break
            try:
                self._scrape(connection)
            except (OSError, http.client.HTTPException):
                connection.close()
                connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
                self._scrape(connection)
            self.count += 1
        connection.close()

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.done.set()
        self.thread.join()


def scraped_at(seconds, slice_seconds):
    """Whether the wall-clock time `seconds` (since 1970) falls in a scraped slice: the even ones."""
    return int(seconds // slice_seconds) % 2 == 0


def latency_once(folder):
    """One `serve`, 1,000 webhooks/s: 3 s unmeasured, then 20 s in slices of 0.2 s taken in turn, /metrics scraped
    every 100 ms in one slice and not in the next. Webhooks sent in scraped slices make the scraped figures, the
    others the plain ones. Returns the figures and the plain latencies.

    Why interleaved: the p99 of one 10 s window moved by a third from one window to the next in the same process
    (0.80–1.36 ms unscraped, thirty-third session), and the figure compared a 10 s window with scrapes against
    another without, so it read 0.88–1.38 from run to run; a fresh process's first seconds also counted against
    whichever window came first. Slices taken in turn see the same host, WAL and caches, and leave the scrape's own
    cost (docs/performance.md, "Latency with scrapes")."""
    record = folder / "latency.record"
    store = sqlite_store(folder / "latency.db")
    sim, _, serve, port, metrics_port = serve_with_sim(store, folder, record)
    devices = devices_file(port, 200, folder)
    loadgen(port, LATENCY_RATE, LATENCY_WARMUP_SECONDS, devices, folder / "warmup.out")
    figures = {}
    out = folder / "latency.out"
    with Scraper(metrics_port, slice_seconds=LATENCY_SLICE_SECONDS) as scraper:
        figures["offered_rps"] = loadgen(port, LATENCY_RATE, 2 * LATENCY_SECONDS, devices, out)
    figures["scrapes"] = scraper.count
    wait_until(lambda: queue_empty(store), what="the last pushes")
    figures["rss_mib"] = peak_rss_mib(serve)
    stop(serve)
    stop(sim)  # flushes the record
    plain, scraped = latencies_by_slice_ms(out, read_record(record), LATENCY_SLICE_SECONDS)
    for suffix, values in (("", plain), ("_scraped", scraped)):
        figures["p50" + suffix], figures["p99" + suffix] = percentile(values, 0.5), percentile(values, 0.99)
        figures["samples" + suffix] = len(values)
    figures["p90"], figures["max"] = percentile(plain, 0.9), round(plain[-1], 2) if plain else None
    figures["ratio_scraped"] = figures["p99_scraped"] / figures["p99"] if figures["p99"] else None
    return figures, plain


def bench_latency(results, latencies_out):
    folder = phase_folder("latency")
    step(f"latency: open-loop {LATENCY_RATE:,} webhooks/s into `serve`, {LATENCY_WARMUP_SECONDS} s unmeasured, then "
         f"{2 * LATENCY_SECONDS} s in {LATENCY_SLICE_SECONDS} s slices, /metrics scraped every 100 ms in every other one; "
         f"webhook sent → APNs request received × {RUNS}")
    runs = []
    for number in range(1, RUNS + 1):
        run_folder = folder / f"run{number}"
        run_folder.mkdir()
        figures, plain = latency_once(run_folder)
        runs.append(figures)
        if not latencies_out:
            latencies_out.extend(plain)
        step(f"  run {number}: p50 {figures['p50']} ms, p99 {figures['p99']} ms; with scrapes p99 {figures['p99_scraped']} ms "
             f"({figures['scrapes']} scrapes)")
    results["latency_ms"] = summarize(runs)
    results.setdefault("rss_mib", {})["serve"] = max(r["rss_mib"] or 0 for r in runs)


def outage_once(folder, number):
    """`serve` at 200 webhooks/s for 80 s, APNs answering 503 from second 10 to second 70: what was lost, delivered
    out of per-device order, and how long the backlog took after APNs came back."""
    record = folder / f"outage{number}.record"
    store = sqlite_store(folder / f"outage{number}.db")
    sim, sim_port, serve, port, _ = serve_with_sim(store, folder, record)
    devices = devices_file(port, 100, folder)
    out = folder / f"outage{number}.out"
    load = subprocess.Popen([str(a) for a in (PY, ROOT / "bench" / "loadgen.py", port, 200, 80, devices, out)],
                            stdout=subprocess.PIPE, text=True)
    time.sleep(10)
    outage_end = time.time() + 60
    sim_faults(sim_port, {"unavailableUntil": int(outage_end * 1000)})
    load.wait()
    rows = read_loadgen(out)
    accepted = {job: (device, seq) for job, device, seq, _, status in rows if status == 202}
    # The simulator writes its record in 64 KiB chunks; stop it to flush once the relay's queue is empty.
    wait_until(lambda: queue_empty(store), timeout=120, what="the backlog to drain")
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
    figures = {"accepted": len(accepted), "backlog": len(backlog), "lost": lost, "order_violations": violations,
               "drain_s": round(max(0.0, last_delivery - outage_end), 2), "attempts_503": failed_attempts}
    step(f"  run {number}: accepted {len(accepted)}, lost {lost}, order violations {violations}, drained "
         f"{figures['drain_s']} s after recovery, {failed_attempts} attempts answered 503")
    return figures


def bench_outage(results, series_out):
    folder = phase_folder("outage")
    step(f"outage: 200 webhooks/s into `serve` for 80 s; APNs answers 503 from second 10 to second 70 × {RUNS}")
    # Lost jobs and order violations are judged on the worst run (their summary's max), the drain on the median.
    results["outage"] = summarize([outage_once(folder, number) for number in range(1, RUNS + 1)])


def bench_soak(results, seconds=600, rate=1000, interval=10):
    """`serve` at `rate` webhooks/s for `seconds`, RSS sampled every `interval` s; the slope by least squares."""
    folder = phase_folder("soak")
    step(f"soak: {rate:,} webhooks/s into `serve` for {seconds} s, RSS sampled every {interval} s")
    store = sqlite_store(folder / "soak.db")
    sim, _, serve, port, _ = serve_with_sim(store, folder)
    devices = devices_file(port, 200, folder)
    out = folder / "soak.out"
    load = subprocess.Popen([str(a) for a in (PY, ROOT / "bench" / "loadgen.py", port, rate, seconds, devices, out)],
                            stdout=subprocess.PIPE, text=True)
    samples, started = [], time.monotonic()
    while load.poll() is None:
        samples.append((round(time.monotonic() - started, 1), rss_mib(serve)))
        step(f"  {samples[-1][0]:.0f} s: RSS {samples[-1][1]:.1f} MiB")
        load_done = wait_for_exit(load, started + len(samples) * interval)
        if load_done:
            break
    achieved = float(load.stdout.read().strip() or 0)
    wait_until(lambda: queue_empty(store), timeout=120, what="the last pushes")
    peak = peak_rss_mib(serve)
    stop(serve)
    stop(sim)
    accepted = sum(1 for row in read_loadgen(out) if row[4] == 202)
    per_hour = lambda points: round(least_squares_slope(points) * 3600, 2) if least_squares_slope(points) is not None else None
    results["soak"] = {"seconds": seconds, "offered_rps": achieved, "accepted": accepted, "samples": samples,
                       "rss_first_mib": samples[0][1], "rss_last_mib": samples[-1][1], "rss_peak_mib": peak,
                       "slope_mib_per_hour": per_hour(samples),
                       "slope_after_first_minute_mib_per_hour": per_hour([p for p in samples if p[0] >= 60])}
    step(f"  accepted {accepted}; RSS {samples[0][1]:.1f} → {samples[-1][1]:.1f} MiB, slope "
         f"{results['soak']['slope_mib_per_hour']} MiB/h ({results['soak']['slope_after_first_minute_mib_per_hour']} MiB/h "
         f"after the first minute)")


def wait_for_exit(process, until):
    """Waits for `process` to exit until the monotonic time `until`; True if it did."""
    try:
        process.wait(timeout=max(0.0, until - time.monotonic()))
        return True
    except subprocess.TimeoutExpired:
        return False
