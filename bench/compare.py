"""Two `make bench` results side by side (issue 38: before and after, back to back on the same machine).

    python3 bench/compare.py bench/results/BEFORE.json bench/results/AFTER.json > bench/results/compare-….md

Every figure measured several times in both runs (a dict with median, min, max), with both spreads; "apart" marks
the figures whose ranges do not overlap, the only ones a change can be said to have moved (which way is better
depends on the figure: read its row in the runs' own tables)."""
import json
import sys


def figures(results, prefix=""):
    """{dotted path: {median, min, max}} for every figure measured more than once."""
    found = {}
    for key, value in results.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict) and {"median", "min", "max"} <= value.keys():
            found[path] = value
        elif isinstance(value, dict):
            found.update(figures(value, path + "."))
    return found


def spread(value):
    return f"{value['median']:,} ({value['min']:,}–{value['max']:,})"


def main(before_path, after_path):
    before, after = json.load(open(before_path)), json.load(open(after_path))
    old, new = figures(before), figures(after)
    print(f"# `make bench` before and after\n\nBefore: `{before_path}` ({before.get('date')}); "
          f"after: `{after_path}` ({after.get('date')}). Median (min–max) of each run's repetitions.\n")
    print("| Figure | Before | After | Ranges |\n|---|---|---|---|")
    for path in sorted(old.keys() & new.keys()):
        a, b = old[path], new[path]
        apart = "apart: after higher" if b["min"] > a["max"] else "apart: after lower" if b["max"] < a["min"] else "overlap"
        print(f"| `{path}` | {spread(a)} | {spread(b)} | {apart} |")
    only = sorted(new.keys() - old.keys())
    if only:
        print(f"\nMeasured only after: {', '.join(f'`{p}`' for p in only)}.")


if __name__ == "__main__":
    main(*sys.argv[1:3])
