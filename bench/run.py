#!/usr/bin/env python3
"""`make bench`: SPEC §7's figures and those of issues #13, #14, #15 and #17, each next to a ceiling measured in the
same run on the same machine; each headline figure the median of BENCH_RUNS runs (default 3) with its spread.

BENCH=ingest,deliver,queue,postgres,latency,testwait,outage runs a subset (the default runs all of these);
BENCH=soak runs the 10-minute soak, which is not in the default set (issue #17 caps the default run at 15 minutes).
Phases are isolated: each has its own files, deleted before the next starts, the page cache is dropped (where
permitted) and a short pause follows. Writes bench/results/<stamp>.{json,md,png}, and latest.* for a full default
run. Progress goes to stdout as it runs.
"""
import os
import resource
import shutil
import subprocess
import time

from harness import RELEASE_FLAGS, ROOT, RUNS, TLS, WORK, isolate, kill_all, run, step
from phase_delivery import bench_delivery
from phase_ingest import bench_ingest
from phase_postgres import bench_postgres
from phase_queue import bench_queue
from phase_serve import bench_latency, bench_outage, bench_soak
from phase_testwait import bench_testwait
from report import write_outputs

DEFAULT = ("ingest", "deliver", "queue", "postgres", "latency", "testwait", "outage")
OPTIONAL = ("soak",)


def main():
    chosen = [name for name in os.environ.get("BENCH", "").split(",") if name]
    unknown = [name for name in chosen if name not in DEFAULT + OPTIONAL]
    if unknown:
        raise SystemExit(f"BENCH: unknown phase {', '.join(unknown)} (known: {', '.join(DEFAULT + OPTIONAL)})")
    selected = [name for name in DEFAULT + OPTIONAL if name in chosen] if chosen else list(DEFAULT)
    command = "make bench" + (f" BENCH={os.environ['BENCH']}" if chosen else "") + (
        f" BENCH_RUNS={os.environ['BENCH_RUNS']}" if os.environ.get("BENCH_RUNS") else "")
    # 1,000 waiting Test requests hold 1,000 connections on each side.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(max(soft, 8192), hard), hard))
    step(f"building release binaries; work folder {WORK}")
    # The binary users run: the Swift runtime linked in, as `make release` and `make deb` build it (Makefile
    # RELEASE_FLAGS). Built without it, the benchmark measured another binary: ingest spent 4 % more CPU per webhook
    # and 5 MiB more memory in the twenty-first session's pairs (bench/results/2026-12-04-deliver-ipc.md).
    for product in ("kumapush-relay", "QueueBench"):
        run(["swift", "build", *RELEASE_FLAGS, "--product", product], cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
    run([ROOT / "scripts" / "generate-test-certs.sh", TLS], check=True, stdout=subprocess.DEVNULL)
    results, series, latencies = {"runs": RUNS, "phases": selected, "phase_seconds": {}, "build": " ".join(RELEASE_FLAGS)}, {}, []
    measures = {"ingest": lambda: bench_ingest(results), "deliver": lambda: bench_delivery(results, series),
                "queue": lambda: bench_queue(results), "postgres": lambda: bench_postgres(results),
                "latency": lambda: bench_latency(results, latencies), "testwait": lambda: bench_testwait(results),
                "outage": lambda: bench_outage(results, series),
                "soak": lambda: bench_soak(results, seconds=int(os.environ.get("BENCH_SOAK_SECONDS") or 600))}
    started = time.monotonic()
    try:
        for name in selected:
            isolate()
            phase_started = time.monotonic()
            measures[name]()
            results["phase_seconds"][name] = round(time.monotonic() - phase_started)
            shutil.rmtree(WORK / name, ignore_errors=True)
    finally:
        kill_all()
    results["elapsed_s"] = round(time.monotonic() - started)
    write_outputs(results, series, latencies, command, full=not chosen and RUNS == 3)
    step(f"done in {results['elapsed_s']} s")
    shutil.rmtree(WORK, ignore_errors=True)


if __name__ == "__main__":
    main()
