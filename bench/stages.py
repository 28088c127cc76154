"""Where webhook → APNs time goes, from the relay's own stage histograms (docs/operations.md "Metrics"), read once
after a run: Prometheus' histogram_quantile over one scrape of each process."""
import re

from harness import http

# (stage, process, family, label filter): in the order a push passes them.
STAGES = [
    ("ingest: request received → answered", "ingest", "kumapush_http_request_duration_seconds", 'route="/wh/:deviceId"'),
    ("ingest: group commit", "ingest", "kumapush_enqueue_commit_seconds", ""),
    ("deliver: accepted → claimed", "deliver", "kumapush_claim_wait_seconds", ""),
    ("deliver: claim statement", "deliver", "kumapush_delivery_store_seconds", 'operation="claim"'),
    ("deliver: accepted → APNs request sent", "deliver", "kumapush_webhook_to_apns_seconds", ""),
    ("deliver: completion batch", "deliver", "kumapush_delivery_store_seconds", 'operation="finish"'),
    ("deliver: APNs round trip", "deliver", "kumapush_apns_request_seconds", ""),
]


def buckets(text, family, labels):
    """[(upper bound, cumulative count)] of one histogram series in a scrape."""
    found = []
    for match in re.finditer(rf'^{family}_bucket\{{(.*?)le="([^"]+)"\}} (\S+)$', text, re.M):
        if labels in match.group(1):
            found.append((float("inf") if match.group(2) == "+Inf" else float(match.group(2)), float(match.group(3))))
    return sorted(found)


def quantile(series, q):
    """histogram_quantile: linear within the bucket the q-th observation falls in; None without observations."""
    if not series or series[-1][1] == 0:
        return None
    rank = q * series[-1][1]
    lower, below = 0.0, 0.0
    for bound, count in series:
        if count >= rank:
            if bound == float("inf"):
                return lower
            return lower + (bound - lower) * ((rank - below) / max(count - below, 1e-9))
        lower, below = bound, count
    return lower


def stage_figures(metrics_ports):
    """{stage: {"p50_ms", "p99_ms", "count"}} from one scrape of each process ({"ingest": port, "deliver": port})."""
    texts = {name: http("GET", f"http://127.0.0.1:{port}/metrics")[1].decode(errors="replace")
             for name, port in metrics_ports.items()}
    figures = {}
    for stage, process, family, labels in STAGES:
        series = buckets(texts[process], family, labels)
        p50, p99 = quantile(series, 0.5), quantile(series, 0.99)
        if p50 is not None:
            figures[stage] = {"p50_ms": round(p50 * 1000, 2), "p99_ms": round(p99 * 1000, 2), "count": int(series[-1][1])}
    return figures
