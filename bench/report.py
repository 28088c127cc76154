"""The results table (one row per figure: median of the runs, its spread, the target and whether it passes), the
JSON and the plot."""
import datetime
import json
import os
import re
import shutil

from harness import ROOT

RESULTS = ROOT / "bench" / "results"


def at(r, path):
    """The value at a dotted path, as stored: a figure measured several times is its summary."""
    value = r
    for key in path.split("."):
        value = value[key]
    return value


def get(r, path):
    """The value at a dotted path; a figure measured several times gives its median."""
    value = at(r, path)
    return value["median"] if isinstance(value, dict) and "median" in value else value


def cell(r, path, unit=""):
    """A figure's median with its spread over the runs: `0.21 (0.19–0.23)`."""
    value = at(r, path)
    if not isinstance(value, dict):
        return f"{number(value)}{unit}"
    text = f"{number(value['median'])}{unit}"
    return text + (f" ({number(value['min'])}–{number(value['max'])})" if len(value["runs"]) > 1 else "")


def worst(r, path):
    """The highest of a figure's runs (a count that must be zero in every run: lost jobs, order violations)."""
    value = at(r, path)
    return value["max"] if isinstance(value, dict) else value


def number(value):
    if isinstance(value, float):
        return f"{value:.2f}" if abs(value) < 100 else f"{value:,.0f}"
    return f"{value:,}" if isinstance(value, int) else str(value)


def tiered(ratio, final, step):
    """SPEC's target, with issue #17's intermediate step: `yes`, `#17 step only` or `no`."""
    return "yes" if ratio >= final else "#17 step only" if ratio >= step else "**no**"


def above_floor(r):
    """The deliverer's CPU per push above what the durable queue alone costs per job (SPEC §7 "Honest ceilings")."""
    return get(r, "deliver.relay_cpu_us_per_push") - get(r, "queue.claim_cpu_us_10k")


def curve(r):
    return " / ".join(f"{p['pps']:,}" + (f" ({p['pps_min']:,}–{p['pps_max']:,})" if len(p.get("runs", [])) > 1 else "")
                      for p in r["postgres"]["scaling"]["curve"])


ROWS = [
    # (figure, relay, ceiling, ratio, target, pass)
    ("Ingest: durable webhooks/s to 1,000 devices vs nginx fixed 202", lambda r: cell(r, "ingest.relay_rps"),
     lambda r: cell(r, "ingest.nginx_rps"), lambda r: cell(r, "ingest.ratio_nginx"), "≥ 0.50 (#17 step: 0.35)",
     lambda r: tiered(get(r, "ingest.ratio_nginx"), 0.50, 0.35)),
    ("Ingest vs raw SQLite inserts of the same rows (rows/s)", lambda r: cell(r, "ingest.relay_rps"),
     lambda r: cell(r, "ingest.raw_insert_rps"), lambda r: cell(r, "ingest.ratio_raw"), "—", lambda r: "—"),
    ("Ingest, one device in a storm (alerts fold into its digest) vs nginx", lambda r: cell(r, "ingest.fold.relay_rps"),
     lambda r: cell(r, "ingest.nginx_rps"), lambda r: cell(r, "ingest.fold.ratio_nginx"), "—", lambda r: "—"),
    ("Delivery: pushes/s vs h2load on the same simulator", lambda r: cell(r, "deliver.relay_pps"),
     lambda r: cell(r, "deliver.h2load_pps"), lambda r: cell(r, "deliver.ratio_h2load"), "≥ 0.50",
     lambda r: "yes" if get(r, "deliver.ratio_h2load") >= 0.5 else "**no**"),
    ("Delivery: CPU µs per push (deliver) vs per request (h2load)", lambda r: cell(r, "deliver.relay_cpu_us_per_push"),
     lambda r: cell(r, "deliver.h2load_cpu_us_per_request"), lambda r: cell(r, "deliver.ratio_cpu"), "— (SPEC §7: above the floor)",
     lambda r: "—"),
    ("Delivery floor: the queue's claim + complete alone, CPU µs per job (QueueBench, 10k queued) vs h2load per request",
     lambda r: cell(r, "queue.claim_cpu_us_10k"), lambda r: cell(r, "deliver.h2load_cpu_us_per_request"),
     lambda r: f'{get(r, "queue.claim_cpu_us_10k") / get(r, "deliver.h2load_cpu_us_per_request"):.2f}', "—", lambda r: "—"),
    ("Delivery above the floor: deliver's CPU µs per push minus the floor's per job vs h2load per request",
     lambda r: f'{above_floor(r):.2f}', lambda r: cell(r, "deliver.h2load_cpu_us_per_request"),
     lambda r: f'{above_floor(r) / get(r, "deliver.h2load_cpu_us_per_request"):.2f}', "≤ 3.0",
     lambda r: "yes" if above_floor(r) / get(r, "deliver.h2load_cpu_us_per_request") <= 3 else "**no**"),
    ("Delivery floor vs the same row changes as bare SQLite statements (CPU µs per job, QueueBench BareFloor)",
     lambda r: cell(r, "queue.claim_cpu_us_10k"), lambda r: cell(r, "queue.floor_bare_cpu_us"),
     lambda r: f'{get(r, "queue.claim_cpu_us_10k") / get(r, "queue.floor_bare_cpu_us"):.2f}', "≤ 2.0",
     lambda r: "yes" if get(r, "queue.claim_cpu_us_10k") / get(r, "queue.floor_bare_cpu_us") <= 2 else "**no**"),
    ("Bare floor with secure_delete off vs on (CPU µs per job): what zeroing deleted rows costs",
     lambda r: cell(r, "queue.floor_bare_cpu_us_no_secure_delete"), lambda r: cell(r, "queue.floor_bare_cpu_us"),
     lambda r: f'{get(r, "queue.floor_bare_cpu_us_no_secure_delete") / get(r, "queue.floor_bare_cpu_us"):.2f}', "—",
     lambda r: "—"),
    ("Delivery: pushes/s vs Python aioapns", lambda r: cell(r, "deliver.relay_pps"), lambda r: cell(r, "deliver.aioapns_pps"),
     lambda r: cell(r, "deliver.ratio_aioapns", "×"), "≥ 10×", lambda r: "yes" if get(r, "deliver.ratio_aioapns") >= 10 else "**no**"),
    ("Delivery at 30 ms APNs latency (pushes/s)", lambda r: cell(r, "deliver.relay_pps_30ms"), lambda r: "—", lambda r: "—",
     "≥ 10,000/s", lambda r: "yes" if get(r, "deliver.relay_pps_30ms") >= 10000 else "**no**"),
    ("Latency p99 at 1,000 webhooks/s, webhook sent → APNs (ms)", lambda r: cell(r, "latency_ms.p99"), lambda r: "—",
     lambda r: "—", "≤ 10 ms", lambda r: "yes" if get(r, "latency_ms.p99") <= 10 else "**no**"),
    ("Latency p99 with /metrics scraped every 100 ms vs without (ms)", lambda r: cell(r, "latency_ms.p99_scraped"),
     lambda r: cell(r, "latency_ms.p99"), lambda r: cell(r, "latency_ms.ratio_scraped"), "≤ 1.10",
     lambda r: "yes" if get(r, "latency_ms.ratio_scraped") <= 1.10 else "**no**"),
    ("GET /devices/:id p99 with 1,000 Test requests waiting vs none (ms)", lambda r: cell(r, "testwait.get_p99_ms"),
     lambda r: cell(r, "testwait.get_p99_idle_ms"), lambda r: "—", "< 50 ms",
     lambda r: "yes" if get(r, "testwait.get_p99_ms") < 50 else "**no**"),
    ("Queue: claim rate at 1M vs 10k queued (jobs/s)", lambda r: cell(r, "queue.claim_rate_1m"),
     lambda r: cell(r, "queue.claim_rate_10k"), lambda r: cell(r, "queue.claim_ratio"), "≥ 0.80",
     lambda r: "yes" if get(r, "queue.claim_ratio") >= 0.8 else "**no**"),
    ("Queue: enqueue vs raw SQLite inserts (rows/s)", lambda r: cell(r, "queue.enqueue_rps"),
     lambda r: cell(r, "queue.raw_insert_rps"), lambda r: cell(r, "queue.enqueue_ratio"), "—", lambda r: "—"),
    ("PostgreSQL: ingest over HTTP vs SQLite ingest (webhooks/s)", lambda r: cell(r, "postgres.ingest.relay_rps"),
     lambda r: cell(r, "ingest.relay_rps"), lambda r: cell(r, "postgres.ingest.ratio_sqlite"), "≥ 0.50",
     lambda r: "yes" if get(r, "postgres.ingest.ratio_sqlite") >= 0.5 else "**no**"),
    ("PostgreSQL: claim + complete, 1 / 2 / 4 deliver processes (pushes/s)", curve,
     lambda r: f"limit: {r['postgres']['scaling']['limit']}", lambda r: "—", "grows until a limit",
     lambda r: "yes" if r["postgres"]["scaling"]["grows_until_limit"] else "**no**"),
    ("PostgreSQL: claim rate at 1M vs 10k queued (jobs/s)", lambda r: cell(r, "postgres.queue.claim_rate_1m"),
     lambda r: cell(r, "postgres.queue.claim_rate_10k"), lambda r: cell(r, "postgres.queue.claim_ratio"), "≥ 0.80",
     lambda r: "yes" if get(r, "postgres.queue.claim_ratio") >= 0.8 else "**no**"),
    ("PostgreSQL: enqueue vs SQLite enqueue, QueueBench (jobs/s)", lambda r: cell(r, "postgres.queue.enqueue_rps"),
     lambda r: cell(r, "queue.enqueue_rps"), lambda r: cell(r, "postgres.queue.enqueue_vs_sqlite"), "—", lambda r: "—"),
    ("PostgreSQL: latency p99 at 1,000 webhooks/s, ingest + deliver (ms)", lambda r: cell(r, "postgres.latency_ms.p99"),
     lambda r: "—", lambda r: "—", "≤ 10 ms", lambda r: "yes" if get(r, "postgres.latency_ms.p99") <= 10 else "**no**"),
    ("PostgreSQL: p99 of each stage at 1,000 webhooks/s (ms; the relay's stage histograms, median of the runs)",
     lambda r: "; ".join(f"{stage} {p99}" for stage, p99 in r["postgres"]["latency_ms"]["stages_p99_ms"].items()),
     lambda r: "—", lambda r: "—", "— (where the row above goes)", lambda r: "—"),
    ("Outage: lost jobs / order violations (the worst run)", lambda r: f'{worst(r, "outage.lost")} / {worst(r, "outage.order_violations")}',
     lambda r: "—", lambda r: "—", "0 / 0",
     lambda r: "yes" if worst(r, "outage.lost") == 0 and worst(r, "outage.order_violations") == 0 else "**no**"),
    ("Outage: backlog drained after recovery (s)", lambda r: cell(r, "outage.drain_s"), lambda r: "—", lambda r: "—", "seconds",
     lambda r: "yes" if get(r, "outage.drain_s") < 30 else "**no**"),
    ("Memory: peak RSS, MiB (ingest / deliver / serve)",
     lambda r: " / ".join(f"{r['rss_mib'][k]:.0f}" if k in r['rss_mib'] else "—" for k in ("ingest", "deliver", "serve")), lambda r: "—",
     lambda r: "—", "< 64 each", lambda r: "yes" if all((v or 0) < 64 for v in r["rss_mib"].values()) else "**no**"),
    ("Soak: RSS slope over 10 min at 1,000 pushes/s (MiB/hour, after the first minute)",
     lambda r: r["soak"]["slope_after_first_minute_mib_per_hour"],
     lambda r: f'{r["soak"]["rss_first_mib"]:.1f} → {r["soak"]["rss_last_mib"]:.1f} MiB', lambda r: "—", "flat: < 1 MiB/h",
     lambda r: "yes" if abs(r["soak"]["slope_after_first_minute_mib_per_hour"]) < 1 else "**no**"),
]


# The picture's third panel: each figure with a numeric target, as how far it is from that target. A "≥" target
# plots figure / target, a "≤" one target / figure, so 1.0 is the target met exactly and every bar right of it passes;
# the whiskers are the spread over the runs where the figure has one.
TARGETS = [
    ("ingest / nginx ≥ 0.50", "ingest.ratio_nginx", 0.50, "≥"),
    ("pushes/s / h2load ≥ 0.50", "deliver.ratio_h2load", 0.50, "≥"),
    ("above floor / h2load CPU ≤ 3", lambda r: above_floor(r) / get(r, "deliver.h2load_cpu_us_per_request"), 3.0, "≤"),
    ("floor / bare SQLite ≤ 2", lambda r: get(r, "queue.claim_cpu_us_10k") / get(r, "queue.floor_bare_cpu_us"), 2.0, "≤"),
    ("pushes/s / aioapns ≥ 10", "deliver.ratio_aioapns", 10.0, "≥"),
    ("pushes/s at 30 ms ≥ 10,000", "deliver.relay_pps_30ms", 10000.0, "≥"),
    ("latency p99 ≤ 10 ms", "latency_ms.p99", 10.0, "≤"),
    ("p99 scraped / not ≤ 1.10", "latency_ms.ratio_scraped", 1.10, "≤"),
    ("claim 1M / 10k ≥ 0.80", "queue.claim_ratio", 0.80, "≥"),
    ("PostgreSQL ingest / SQLite ≥ 0.50", "postgres.ingest.ratio_sqlite", 0.50, "≥"),
    ("PostgreSQL claim 1M / 10k ≥ 0.80", "postgres.queue.claim_ratio", 0.80, "≥"),
    ("PostgreSQL latency p99 ≤ 10 ms", "postgres.latency_ms.p99", 10.0, "≤"),
]


def against_targets(results):
    """[(label, median, low, high)] with each figure as a share of its target (≥ 1 passes); figures this run did not
    measure are left out."""
    bars = []
    for label, figure, target, direction in TARGETS:
        try:
            if callable(figure):
                low = mid = high = figure(results)
            else:
                value = results
                for key in figure.split("."):
                    value = value[key]
                low, mid, high = (value["min"], value["median"], value["max"]) if isinstance(value, dict) else (value,) * 3
        except (KeyError, TypeError, ZeroDivisionError):
            continue
        share = (lambda v: v / target) if direction == "≥" else (lambda v: target / v if v else float("inf"))
        shares = sorted(share(v) for v in (low, mid, high))
        bars.append((label, share(mid), shares[0], shares[-1]))
    return bars

def table(results):
    rows = ["| Figure | Relay | Ceiling | Ratio | Target | Pass |", "|---|---|---|---|---|---|"]
    for name, value, ceiling, ratio, target, passed in ROWS:
        try:
            rows.append(f"| {name} | {value(results)} | {ceiling(results)} | {ratio(results)} | {target} | {passed(results)} |")
        except (KeyError, TypeError, ZeroDivisionError):
            continue  # not measured in this run (a BENCH= subset)
    return "\n".join(rows)


def write_outputs(results, series, latencies, command, full):
    """The full default run writes latest.*; every run writes a dated copy (a subset only the dated copy, so latest.*
    always holds one complete run)."""
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H%M%SZ")
    results["command"] = command
    results["date"] = stamp
    results["machine"] = f"{os.cpu_count()} cores, {platform_memory()}"
    runs = results.get("runs", 1)
    markdown = (f"# Benchmark results\n\n`{command}` on {results['machine']}, {stamp}, {results['elapsed_s']} s. "
                f"Figures: median of {runs} run{'s' if runs > 1 else ''} (min–max in brackets).\n\n" + table(results) + "\n")
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"{stamp}.json").write_text(json.dumps(results, indent=2) + "\n")
    (RESULTS / f"{stamp}.md").write_text(markdown)
    if series or latencies:
        plot(series, latencies, against_targets(results), RESULTS / f"{stamp}.png")
    if full:
        for suffix in ("json", "md", "png"):
            if (RESULTS / f"{stamp}.{suffix}").exists():
                shutil.copy(RESULTS / f"{stamp}.{suffix}", RESULTS / f"latest.{suffix}")
    print("\n" + markdown)
    print(f"written: bench/results/{stamp}.*" + (" and latest.*" if full else ""))


def platform_memory():
    try:
        kb = int(re.search(r"MemTotal:\s+(\d+)", open("/proc/meminfo").read()).group(1))
        return f"{kb / 1048576:.0f} GiB"
    except (OSError, AttributeError):
        return "unknown memory"


def plot(series, latencies, targets, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    figure, (left, right, third) = plt.subplots(1, 3, figsize=(19, 5), gridspec_kw={"width_ratios": [1, 1, 1.2]})
    for label, points in series.items():
        if len(points) > 1:
            rates = [(t1, (d1 - d0) / (t1 - t0)) for (t0, d0), (t1, d1) in zip(points, points[1:]) if t1 > t0]
            left.plot([t for t, _ in rates], [r for _, r in rates], label=label)
    left.set_title("Delivery throughput while draining 100,000 queued pushes")
    left.set_xlabel("seconds")
    left.set_ylabel("pushes/s")
    if series:
        left.legend()
    if latencies:
        right.hist(latencies, bins=100, range=(0, max(20, 3 * latencies[int(len(latencies) * 0.99)])))
        for q, style in ((0.5, "--"), (0.99, ":")):
            right.axvline(latencies[int(q * len(latencies))], linestyle=style, color="black", label=f"p{int(q * 100)}")
        right.legend()
    right.set_title("Webhook sent → APNs request received, 1,000 webhooks/s")
    right.set_xlabel("milliseconds")
    right.set_ylabel("pushes")
    plot_targets(third, targets)
    figure.tight_layout()
    figure.savefig(path, dpi=100)


def plot_targets(axes, targets):
    """Each figure as a share of its target on a log scale: right of the line at 1 passes."""
    labels = [label for label, *_ in targets]
    shares = [share for _, share, _, _ in targets]
    spread = [[share - low for _, share, low, _ in targets], [high - share for _, share, _, high in targets]]
    colours = ["tab:green" if share >= 1 else "tab:red" for share in shares]
    axes.barh(labels, shares, xerr=spread, color=colours, capsize=3)
    axes.axvline(1, color="black", linestyle="--")
    axes.set_xscale("log")
    ticks = [0.125, 0.25, 0.5, 1, 2, 4, 8]
    axes.set_xticks(ticks, [f"{t:g}" for t in ticks])
    axes.minorticks_off()
    axes.invert_yaxis()
    axes.tick_params(axis="y", labelsize=8)
    axes.set_title("Each figure against its target (1 = met; right passes)")
    axes.set_xlabel("figure ÷ target (≥ targets) or target ÷ figure (≤ targets)")
