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
