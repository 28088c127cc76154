"""docs/operations.md lists every metric each process serves: the table is checked against what the real binaries
expose on /metrics, family by family, with its type."""
import pathlib
import re

import pytest

from relayproc import request

OPERATIONS = pathlib.Path(__file__).resolve().parents[2] / "docs" / "operations.md"


def documented():
    """{name: (type, {processes})} from the metrics table."""
    rows = {}
    for line in OPERATIONS.read_text().splitlines():
        match = re.match(r"\| `((?:kumapush|relay|process)_[a-z_]+)(\{[a-z_,]+\})?` \| (counter|gauge|histogram) \| ([a-z, ]+) \|", line)
        if match:
            rows[match.group(1)] = (match.group(3), {p.strip() for p in match.group(4).split(",")})
    return rows


def served(relay):
    _, text, _ = request("GET", f"http://{relay.env['METRICS_ADDR']}/metrics")
    return {m.group(1): m.group(2) for m in re.finditer(r"^# TYPE (\S+) (\S+)$", text.decode(), re.M)}


@pytest.mark.parametrize("command", ["serve", "ingest", "deliver"])
def test_the_operations_guide_names_every_metric_each_process_serves(relays, command):
    table = documented()
    assert len(table) > 20, "the metrics table was not found in docs/operations.md"
    expected = {name: kind for name, (kind, processes) in table.items() if command in processes}
    assert served(relays(command)) == expected


# The series the shipped alert rules watch for a first event, each exported at zero from the start: a series that
# first appears at 1 is a rise Prometheus's increase() and rate() cannot see, so the first stall or the first burst
# of 503s after a start would never fire its alert.
WATCHED_FROM_ZERO = {
    "deliver": ["kumapush_delivery_stalls_total", "relay_delivery_stalls_total", "kumapush_dead_lettered_total"],
    "ingest": [
        f'kumapush_http_requests_total{{route="/wh/:deviceId",method="{method}",status="{status}"}}'
        for method in ("POST", "GET")
        for status in ("503", "429")
    ],
}
WATCHED_FROM_ZERO["serve"] = WATCHED_FROM_ZERO["deliver"] + WATCHED_FROM_ZERO["ingest"]


@pytest.mark.parametrize("command", ["serve", "ingest", "deliver"])
def test_the_series_alerts_watch_are_exported_at_zero_from_the_start(relays, command):
    _, text, _ = request("GET", f"http://{relays(command).env['METRICS_ADDR']}/metrics")
    samples = dict(line.rsplit(" ", 1) for line in text.decode().splitlines() if line and not line.startswith("#"))
    for series in WATCHED_FROM_ZERO[command]:
        assert samples.get(series) == "0", f"{series}: {samples.get(series, 'absent')}"
