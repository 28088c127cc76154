"""The chaos suite from the command line (issue #19): `make chaos SEEDS=N` runs N random seeds, `make chaos SEED=S`
replays one; STORE=postgres runs them on PostgreSQL. Each run prints its summary; a failing run prints its violations, its schedule and the command that
replays it. Exit status 1 when any seed failed."""
import argparse
import os
import pathlib
import random
import shutil
import sys
import tempfile

from chaos_run import ChaosFailure, ChaosRun

ROOT = pathlib.Path(__file__).resolve().parents[2]


def binary():
    return os.environ.get("KUMAPUSH_RELAY_BINARY") or str(ROOT / ".build" / "debug" / "kumapush-relay")


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seed", type=int, action="append", help="run this seed (repeatable)")
    parser.add_argument("--seeds", type=int, default=0, help="run this many random seeds")
    parser.add_argument("--duration", type=float, default=20.0, help="seconds of chaos per run (default 20)")
    parser.add_argument("--store", choices=["sqlite", "postgres"], default="sqlite",
                        help="the relay's store (postgres: a throwaway server, started for each seed)")
    arguments = parser.parse_args()
    seeds = list(arguments.seed or []) + [random.SystemRandom().randrange(1, 10**9) for _ in range(arguments.seeds)]
    if not seeds:
        parser.error("give --seed S or --seeds N")
    failed = []
    for seed in seeds:
        workdir = pathlib.Path(tempfile.mkdtemp(prefix=f"chaos-{seed}-"))
        try:
            print(ChaosRun(seed, binary(), workdir, arguments.duration, arguments.store).run(), flush=True)
            shutil.rmtree(workdir)
        except ChaosFailure as failure:
            print(failure, flush=True)
            (workdir / "report.txt").write_text(str(failure) + "\n")  # kept with the logs it points to
            failed.append(seed)
    print(f"{len(seeds) - len(failed)} of {len(seeds)} seeds passed" + (f"; failed: {failed}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
