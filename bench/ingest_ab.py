"""Alternated ingest runs of two or more `kumapush-relay` builds, for changes too small for `make bench` to show
(docs/performance.md, twenty-ninth session). Each round runs `make bench`'s ingest setup once per binary, in turn: an
`ingest` process on a fresh SQLite database, 1,000 devices registered, `wrk` (1 thread, 64 keep-alive connections)
posting Example A for 8 s, DEVICE_QUEUE_MAX out of reach; it prints the durable webhooks/s, the `ingest` process's CPU
time a webhook while `wrk` ran (every thread; steadier than the rate) and the peak RSS.

Usage: python3 bench/ingest_ab.py [--rounds 3] RELAY_BINARY [...]
Run nothing else meanwhile (2 cores). About 12 s a run."""
import argparse
import shutil

from harness import WORK, kill_all, phase_folder, sqlite_store
import phase_ingest


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("binaries", nargs="+")
    parser.add_argument("--rounds", type=int, default=3)
    arguments = parser.parse_args()
    folder = phase_folder("ingest-ab")
    try:
        for round_number in range(1, arguments.rounds + 1):
            for index, binary in enumerate(arguments.binaries):
                run_folder = folder / f"round{round_number}-binary{index + 1}"
                run_folder.mkdir()
                figures = phase_ingest.ingest_once(sqlite_store(run_folder / "ingest.db"), run_folder, seconds=8,
                                                   binary=binary, DEVICE_QUEUE_MAX=1_000_000)
                print(f"round {round_number}, binary {index + 1}: {figures['relay_rps']:,.0f} webhooks/s, "
                      f"{figures['cpu_us']:.1f} µs of ingest CPU a webhook, peak RSS {figures['rss_mib']:.1f} MiB", flush=True)
                shutil.rmtree(run_folder)
    finally:
        kill_all()
        shutil.rmtree(WORK, ignore_errors=True)


if __name__ == "__main__":
    main()
