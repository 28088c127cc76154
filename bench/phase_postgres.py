"""PostgreSQL beside SQLite (issue #15), on a durable throwaway server (fsync on, PostgreSQL's defaults): QueueBench's
enqueue and claim figures, durable webhooks/s through `ingest` over HTTP, claim + complete with 1, 2 and 4 deliver
processes (the scaling curve, with each process's CPU use to say what limits it), and webhook → APNs latency at
1,000/s with ingest and deliver on PostgreSQL. Each part uses a database of its own, dropped after it."""
import collections
import json
import os
import subprocess
import sys
import threading

from harness import (QUEUE_BENCH, RELAY, ROOT, RUNS, SIM_THREADS, apns_env, children_of, cpu_seconds, devices_file,
                     disk_busy_seconds, free_port, healthy, machine_busy_seconds, percentile, phase_folder, postgres_store,
                     queue_empty, relay_env, run, start, start_sim, step, stop, summarize, wait_until)
from phase_delivery import drain
from phase_ingest import ingest_once
from phase_queue import queue_runs
from phase_serve import LATENCY_RATE, LATENCY_SECONDS, latencies_ms, loadgen, read_record
from stages import stage_figures

SCALING_JOBS = 50_000
SCALING_PROCESSES = (1, 2, 4)


class Databases:
    """Fresh databases on one server, each dropped when its part is done (no part measures another's leftovers)."""

    def __init__(self, server):
        self.server = server

    def create(self):
        name = self.server.create_database()
        return name, self.server.url(name)

    def drop(self, name):
        self.server.query("postgres", f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


class WaitSampler:
    """What the active backends of one database are doing, sampled every `interval` seconds from pg_stat_activity over
    one psql session: each backend's wait event (`IO:WALSync`, `Lock:transactionid`, …) or `running` when it waits on
    nothing (on a core, or queued for one). `counts()` gives the running totals, so a drain's window takes their
    difference as it does with CPU seconds. The session costs its own backend about a query every 20 ms."""

    QUERY = ("SELECT coalesce(wait_event_type || ':' || wait_event, 'running') FROM pg_stat_activity "
             "WHERE datname = current_database() AND state = 'active' AND pid <> pg_backend_pid();")

    def __init__(self, server, database, interval=0.02):
        self.psql = subprocess.Popen([f"{server.bin}/psql", server.conninfo(database), "-XAtq"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True, bufsize=1)
        self.interval, self.totals, self.lock = interval, collections.Counter(), threading.Lock()
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    def _loop(self):
        while not self.done.wait(self.interval):
            self.psql.stdin.write(self.QUERY + "\n\\echo .\n")
            self.psql.stdin.flush()
            events = []
            for line in iter(self.psql.stdout.readline, ""):
                if line == ".\n":
                    break
                events.append(line.strip())
            with self.lock:
                self.totals.update(events)

    def counts(self):
        with self.lock:
            return {f"backend:{event}": float(count) for event, count in self.totals.items()}

    def stop(self):
        self.done.set()
        self.thread.join()
        self.psql.stdin.close()
        self.psql.wait()


def backend_waits(window):
    """The window's share of active-backend samples by wait event, largest first: [(event, percent)]."""
    counts = {name.split(":", 1)[1]: count for name, count in window.items() if name.startswith("backend:")}
    total = sum(counts.values())
    return [(event, round(100 * count / total)) for event, count in sorted(counts.items(), key=lambda kv: -kv[1])] if total else []


def server_cpu(server):
    """{pid: CPU seconds} of the PostgreSQL server: the postmaster and every backend."""
    postmaster = int(open(f"{server.directory}/data/postmaster.pid").readline())
    return {pid: cpu_seconds(pid) for pid in [postmaster, *children_of(postmaster)]}


def flatten(readings):
    """{"simulator": s, "machine": s, "disk": s, "postgres": {pid: s}} → the same with "postgres:<pid>": s for each
    backend: a backend that starts during the window counts from zero, one that ends keeps its last reading."""
    flat = {"simulator": readings["simulator"], "machine": readings["machine"], "disk": readings["disk"]}
    flat.update({f"postgres:{pid}": seconds for pid, seconds in readings["postgres"].items()})
    return flat


def queue_figures(databases, results):
    step(f"  QueueBench on PostgreSQL: enqueue; claim + complete at 10,000 vs 1,000,000 queued × {RUNS} (a few minutes)")
    names = [databases.create() for _ in range(3)]
    output = json.loads(run([QUEUE_BENCH, "postgres", *(url for _, url in names), "--runs", RUNS],
                            capture_output=True, text=True, check=True).stdout)
    for name, _ in names:
        databases.drop(name)
    runs = queue_runs(output)
    sqlite = results.get("queue", {}).get("enqueue_rps", {}).get("runs", [])
    for n, figures in enumerate(runs):
        if n < len(sqlite):
            figures["enqueue_vs_sqlite"] = figures["enqueue_rps"] / sqlite[n]
    queue = summarize(runs)
    queue["prefill_rps"] = output["prefill_rps"]
    step(f"    enqueue {output['enqueue_rps']}/s; claim {output['claim_rate_10k']}/s at 10k, {output['claim_rate_1m']}/s at 1M")
    return queue


def ingest_figures(databases, folder, results):
    step(f"  ingest over HTTP on PostgreSQL: durable webhooks/s to 1,000 devices (wrk, 10 s) × {RUNS}")
    sqlite = results.get("ingest", {}).get("relay_rps", {}).get("runs", [])
    runs = []
    for number in range(1, RUNS + 1):
        run_folder = folder / f"ingest{number}"
        run_folder.mkdir()
        name, url = databases.create()
        figures = ingest_once(postgres_store(url), run_folder, DEVICE_QUEUE_MAX=1_000_000)
        databases.drop(name)
        if number <= len(sqlite):
            figures["ratio_sqlite"] = figures["relay_rps"] / sqlite[number - 1]
        runs.append(figures)
        step(f"    run {number}: {figures['relay_rps']:.0f}/s ({figures['jobs_stored']} jobs stored, {figures['errors']} non-2xx)"
             + (f", {figures['ratio_sqlite']:.2f} of SQLite's run {number}" if "ratio_sqlite" in figures else ""))
    return summarize(runs)


def scaling_drain(databases, server, folder, count, number):
    """One drain of SCALING_JOBS by `count` deliver processes: its rate and where the CPU went over its window."""
    cores = os.cpu_count()
    name, url = databases.create()
    run([QUEUE_BENCH, "prefill", url, SCALING_JOBS, 1000], check=True)
    sim, sim_port = start_sim()
    waits = WaitSampler(server, name)
    watch = lambda: {"simulator": cpu_seconds(sim.pid), "machine": machine_busy_seconds(), "postgres": server_cpu(server),
                     "disk": disk_busy_seconds(server.directory)}
    drained = drain(postgres_store(url), SCALING_JOBS, sim_port, folder, f"scale{count}-{number}", deliverers=count,
                    watch=lambda: {**flatten(watch()), **waits.counts()})
    waits.stop()
    stop(sim)
    databases.drop(name)
    cpu, window = drained["window_cpu_s"], drained["window_s"]
    pct = lambda seconds: round(100 * seconds / window)
    point = {"processes": count, "pps": round(drained["pps"]), "delivered": int(drained["delivered"]),
             "deliver_cpu_pct": pct(cpu["deliver"]), "sim_cpu_pct": pct(cpu["simulator"]),
             "postgres_cpu_pct": pct(sum(v for k, v in cpu.items() if k.startswith("postgres:"))),
             "busiest_backend_cpu_pct": pct(max((v for k, v in cpu.items() if k.startswith("postgres:")), default=0)),
             "backend_waits": backend_waits(cpu)}
    busy = point["deliver_cpu_pct"] + point["sim_cpu_pct"] + point["postgres_cpu_pct"]
    # The machine as a whole as well: the processes' sum leaves out what else takes the same cores (this benchmark's
    # own polling, the kernel's threads). On the twenty-first session's host the two agreed within 3 points.
    point["machine_cpu_pct"] = pct(cpu["machine"])
    # The disk holding the server's WAL: the share of the window it had a request in flight (iostat's %util).
    point["disk_busy_pct"] = pct(cpu["disk"])
    point["limit"] = ("cores" if max(busy, point["machine_cpu_pct"]) >= 90 * cores else
                      "simulator" if point["sim_cpu_pct"] >= 90 * SIM_THREADS else
                      "one PostgreSQL backend" if point["busiest_backend_cpu_pct"] >= 90 else "neither saturated")
    step(f"    run {number}, {count} deliver process{'es' if count > 1 else ''}: {point['pps']}/s; CPU: deliver "
         f"{point['deliver_cpu_pct']} %, simulator {point['sim_cpu_pct']} %, PostgreSQL {point['postgres_cpu_pct']} % "
         f"(busiest backend {point['busiest_backend_cpu_pct']} %) of one core: {busy} % of {cores * 100} % "
         f"(the machine: {point['machine_cpu_pct']} %), disk busy {point['disk_busy_pct']} %; active backends: "
         f"{', '.join(f'{event} {share} %' for event, share in point['backend_waits'][:3]) or 'not sampled'}; "
         f"limit: {point['limit']}")
    return point


def scaling_figures(databases, server, folder):
    step(f"  claim + complete on PostgreSQL: {SCALING_JOBS:,} queued pushes drained by 1, 2 and 4 deliver processes "
         f"× {RUNS}")
    curve = []
    for count in SCALING_PROCESSES:
        drains = [scaling_drain(databases, server, folder, count, number) for number in range(1, RUNS + 1)]
        ranked = sorted(drains, key=lambda point: point["pps"])
        # The median drain stands for the point (its CPU readings and its limit); its rate keeps the others' spread.
        point = dict(ranked[len(ranked) // 2])
        point.update(pps_min=ranked[0]["pps"], pps_max=ranked[-1]["pps"], runs=[d["pps"] for d in drains])
        curve.append(point)
    # Throughput must grow with processes until something saturates: judged at each step that does not grow by 10 %.
    grows = all(b["pps"] >= 1.1 * a["pps"] or a["limit"] != "neither saturated" or b["limit"] != "neither saturated"
                for a, b in zip(curve, curve[1:]))
    return {"curve": curve, "grows_until_limit": grows,
            "limit": next((p["limit"] for p in curve if p["limit"] != "neither saturated"), "neither saturated")}


def latency_figures(databases, folder):
    step(f"  latency on PostgreSQL: {LATENCY_RATE:,} webhooks/s for {LATENCY_SECONDS} s into ingest + deliver × {RUNS}")
    runs = []
    stage_runs = []
    for number in range(1, RUNS + 1):
        run_folder = folder / f"latency{number}"
        run_folder.mkdir()
        name, url = databases.create()
        store = postgres_store(url)
        record = run_folder / "latency.record"
        sim, sim_port = start_sim(record=record)
        port = free_port()
        # Metrics listeners, scraped once after the load (the stage breakdown), never during it.
        metrics_ports = {"ingest": free_port(), "deliver": free_port()}
        ingest = start([RELAY, "ingest"], relay_env(store, PORT=port, METRICS_ADDR=f"127.0.0.1:{metrics_ports['ingest']}"),
                       run_folder / "ingest.log")
        wait_until(lambda: healthy(port), what="ingest")
        deliver = start([RELAY, "deliver"], relay_env(store, METRICS_ADDR=f"127.0.0.1:{metrics_ports['deliver']}",
                                                      DEVICE_BURST="off", RETRY_BASE="200ms", **apns_env(sim_port)),
                        run_folder / "deliver.log")
        devices = devices_file(port, 200, run_folder)
        out = run_folder / "latency.out"
        offered = loadgen(port, LATENCY_RATE, LATENCY_SECONDS, devices, out)
        wait_until(lambda: queue_empty(store), what="the last pushes")
        stages = stage_figures(metrics_ports)
        for process in (deliver, ingest, sim):
            stop(process)
        databases.drop(name)
        values = latencies_ms(out, read_record(record))
        runs.append({"p50": percentile(values, 0.5), "p99": percentile(values, 0.99), "samples": len(values), "offered_rps": offered})
        stage_runs.append(stages)
        step(f"    run {number}: p50 {runs[-1]['p50']} ms, p99 {runs[-1]['p99']} ms over {len(values)} pushes")
        for stage, figures in stages.items():
            step(f"      {stage}: p50 {figures['p50_ms']} ms, p99 {figures['p99_ms']} ms ({figures['count']})")
    latency = summarize(runs)
    # Each stage's p99 per run, median over the runs (from histogram buckets: a bucket's resolution, not a sample's).
    latency["stages_p99_ms"] = {stage: sorted(run[stage]["p99_ms"] for run in stage_runs if stage in run)[len(stage_runs) // 2]
                                for stage in stage_runs[0]}
    return latency


def bench_postgres(results):
    folder = phase_folder("postgres")
    step("PostgreSQL beside SQLite: queue, ingest over HTTP, deliver scaling, latency")
    sys.path.insert(0, str(ROOT / "Tests" / "e2e"))
    from postgres_server import PostgresServer
    server = PostgresServer(durable=True).start()  # fsync on, as in production: durable commits
    try:
        databases = Databases(server)
        postgres = {"queue": queue_figures(databases, results)}
        postgres["ingest"] = ingest_figures(databases, folder, results)
        postgres["scaling"] = scaling_figures(databases, server, folder)
        postgres["latency_ms"] = latency_figures(databases, folder)
    finally:
        server.stop()
    results["postgres"] = postgres
