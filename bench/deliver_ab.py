"""Alternated drains of two or more `kumapush-relay` builds, for changes too small for `make bench` to show
(docs/performance.md, twenty-second session). Each round drains 100,000 queued pushes over 1,000 devices once per
binary, in turn, as `make bench`'s delivery phase does (`apns-sim --threads 2`, DEVICE_BURST=off, a copy of one
prefilled database), and prints for each drain:
- its pushes/s (first delivery to last, sampled every 50 ms);
- the `deliver` process's CPU per push, split into user and system time;
- its context switches, minor page faults, write calls and bytes written (`/proc/<pid>/io`: the WAL's frames and the
  sockets') per push, and how many completion batches it committed;
- the simulator's CPU per push (what the deliverer's requests cost the other side);
- the deliverer's peak RSS, and its four busiest threads' CPU per push (the delivery thread, then the event loops).
Then the median CPU per push of each binary. With --h2load, h2load sends the same 100,000 requests to the same
simulator after each drain, its user and system CPU per request printed likewise. With --attach, a command is
started on each deliverer once it runs (PID replaced by its pid) and stopped with SIGINT when the drain ends, e.g.
`--attach "perf record -g -o /tmp/deliver.data -p PID"` or `--attach "strace -f -c -o /tmp/deliver.strace -p PID"`.

Usage: python3 bench/deliver_ab.py [--rounds 3] [--h2load] [--attach CMD] [--env NAME=VALUE] [--sim-latency MS]
       RELAY_BINARY [...]
Run nothing else meanwhile (2 cores). About 15 s a drain."""
import argparse
import os
import resource
import shlex
import shutil
import signal
import statistics
import subprocess
import time

from harness import (ROOT, TLS, WORK, apns_env, cpu_seconds, free_port, kill_all, metric, peak_rss_mib, phase_folder,
                     relay_env, run, sqlite_store, start, start_sim, stop)
import phase_delivery

DELIVERED = 'kumapush_deliveries_total{outcome="delivered"'


def process_counters(pid):
    """(user s, system s, minor faults) from /proc/<pid>/stat, and context switches summed over its threads."""
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    switches = 0
    for thread in os.listdir(f"/proc/{pid}/task"):
        for line in open(f"/proc/{pid}/task/{thread}/status"):
            if line.startswith(("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches")):
                switches += int(line.split()[1])
    return int(fields[11]) / ticks, int(fields[12]) / ticks, int(fields[7]), switches


def thread_cpu(pid):
    """Each thread's CPU seconds (user + system), the busiest first: the delivery thread, then the event loops."""
    # /proc/<pid>/task/<tid>/stat, not /proc/<tid>/stat (harness.cpu_seconds): that one adds up the whole process.
    ticks = os.sysconf("SC_CLK_TCK")
    seconds = []
    for thread in os.listdir(f"/proc/{pid}/task"):
        fields = open(f"/proc/{pid}/task/{thread}/stat").read().rsplit(")", 1)[1].split()
        seconds.append((int(fields[11]) + int(fields[12])) / ticks)
    return sorted(seconds, reverse=True)


def drain(binary, template, folder, label, attach, settings, latency=0):
    jobs = phase_delivery.JOBS
    db = phase_delivery.copy_database(template, folder / f"{label}.db")
    sim, sim_port = start_sim(latency=latency)
    metrics_port = free_port()
    deliver = start([binary, "deliver"], relay_env(sqlite_store(db), METRICS_ADDR=f"127.0.0.1:{metrics_port}",
                                                   DEVICE_BURST="off", **apns_env(sim_port), **settings),
                    folder / f"{label}.log")
    tracer = subprocess.Popen(shlex.split(attach.replace("PID", str(deliver.pid)))) if attach else None
    sim_cpu = cpu_seconds(sim.pid)
    started = time.monotonic()
    first = None
    while (delivered := metric(metrics_port, DELIVERED)) < jobs:
        if time.monotonic() - started > 300:
            raise TimeoutError(f"{label}: the drain did not finish in 300 s")
        if first is None and delivered > 0:
            first = time.monotonic()
        time.sleep(phase_delivery.FAST_SAMPLES)
    # Pushes/s from the first sample with a delivery to the one with all, as `make bench` reads its drains.
    rate = jobs / max(time.monotonic() - (first or started), phase_delivery.FAST_SAMPLES)
    if tracer:
        tracer.send_signal(signal.SIGINT)
        tracer.wait()
    sim_cpu = cpu_seconds(sim.pid) - sim_cpu
    user, system, faults, switches = process_counters(deliver.pid)
    threads = thread_cpu(deliver.pid)
    peak = peak_rss_mib(deliver)
    io = dict(line.split(": ") for line in open(f"/proc/{deliver.pid}/io").read().splitlines())
    batches = metric(metrics_port, "kumapush_delivery_batch_size_count")
    stop(deliver)
    phase_delivery.remove_database(db)
    figures = {"user": user / jobs * 1e6, "system": system / jobs * 1e6, "switches": switches / jobs,
               "faults": faults / jobs, "batches": batches, "writes": int(io["syscw"]) / jobs,
               "written": int(io["wchar"]) / jobs / 1024, "sim": sim_cpu / jobs * 1e6,
               "rss": peak, "rate": rate}
    print(f"{label}: {rate:,.0f} pushes/s, {figures['user'] + figures['system']:.1f} µs CPU/push (user {figures['user']:.1f}, system "
          f"{figures['system']:.1f}); {figures['switches']:.2f} context switches, {figures['faults']:.2f} minor faults "
          f"a push; {figures['writes']:.2f} write calls and {figures['written']:.2f} KiB written a push; "
          f"{batches:.0f} completion batches; the simulator {figures['sim']:.1f} µs CPU/push; peak RSS {peak:.1f} MiB; "
          f"its busiest threads {' / '.join(f'{t / jobs * 1e6:.1f}' for t in threads[:4])} µs a push", flush=True)
    return figures, sim, sim_port


def h2load_split(sim_port, folder):
    # Signed before the measurement: the Python child that signs it would count among the children measured here.
    token = phase_delivery.provider_token()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    _, answered, _ = phase_delivery.h2load(sim_port, folder, token=token)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    user = (after.ru_utime - before.ru_utime) / max(answered, 1) * 1e6
    system = (after.ru_stime - before.ru_stime) / max(answered, 1) * 1e6
    print(f"  h2load: {user + system:.2f} µs CPU/request (user {user:.2f}, system {system:.2f})", flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("binaries", nargs="+")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--h2load", action="store_true")
    parser.add_argument("--attach", help="a command to run on each deliverer (PID: its pid), stopped with SIGINT")
    parser.add_argument("--sim-latency", type=int, default=0, metavar="MS",
                        help="the simulator answers each push after this many milliseconds (make bench's 30 ms row)")
    parser.add_argument("--env", action="append", default=[], metavar="NAME=VALUE",
                        help="a setting for every deliverer, e.g. SYNC=full (repeatable)")
    arguments = parser.parse_args()
    try:
        compare(arguments)
    finally:
        kill_all()
        shutil.rmtree(WORK, ignore_errors=True)


def compare(arguments):
    run([ROOT / "scripts" / "generate-test-certs.sh", TLS], check=True, stdout=subprocess.DEVNULL)
    folder = phase_folder("deliver-ab")
    template = phase_delivery.prefill(folder)
    cpu = {binary: [] for binary in arguments.binaries}
    for round_number in range(1, arguments.rounds + 1):
        for index, binary in enumerate(arguments.binaries):
            figures, sim, sim_port = drain(binary, template, folder, f"round {round_number}, binary {index + 1}",
                                           arguments.attach, dict(item.split("=", 1) for item in arguments.env),
                                           arguments.sim_latency)
            cpu[binary].append(figures["user"] + figures["system"])
            if arguments.h2load:
                h2load_split(sim_port, folder)
            stop(sim)
    for index, binary in enumerate(arguments.binaries):
        print(f"binary {index + 1} ({binary}): median {statistics.median(cpu[binary]):.1f} µs CPU/push "
              f"({', '.join(f'{value:.1f}' for value in cpu[binary])})")


if __name__ == "__main__":
    main()
