"""deploy/prometheus/: the alert rules pass their `promtool test rules` unit tests, the scrape configuration and the
rules check, every metric the rules and the Grafana dashboard name is one the relay serves (the metrics
catalogue of docs/operations.md, itself checked against each process's /metrics by test_metrics_catalogue.py), every
alert names its section of docs/outage-runbook.md, and no cluster-wide gauge is summed over processes. Only the
tests marked `needs_promtool` need promtool."""
import json
import re
import shutil
import subprocess

import pytest
import yaml

from conftest import ROOT
from test_metrics_catalogue import documented

PROMETHEUS = ROOT / "deploy" / "prometheus"
RULES = PROMETHEUS / "kumapush-rules.yml"
RUNBOOK = ROOT / "docs" / "outage-runbook.md"
DASHBOARD = PROMETHEUS / "kumapush-dashboard.json"
# Series Prometheus makes itself, not the relay.
PROMETHEUS_OWN = {"up"}

needs_promtool = pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool missing: scripts/install-deps.sh")


def promtool(*args):
    return subprocess.run(["promtool", *args], cwd=PROMETHEUS, capture_output=True, text=True, timeout=120)


@needs_promtool
def test_the_alert_rules_pass_their_unit_tests():
    result = promtool("test", "rules", "kumapush-rules.test.yml")
    assert result.returncode == 0 and "SUCCESS" in result.stdout, result.stdout + result.stderr


def alert_rules():
    return [rule for group in yaml.safe_load(RULES.read_text())["groups"] for rule in group["rules"] if "alert" in rule]


def test_every_alert_has_a_unit_test():
    alerts = {rule["alert"] for rule in alert_rules()}
    tests = yaml.safe_load((PROMETHEUS / "kumapush-rules.test.yml").read_text())["tests"]
    tested = {case["alertname"] for test in tests for case in test.get("alert_rule_test", []) if case.get("exp_alerts")}
    assert alerts == tested, "every alert has a test in which it fires"


def github_anchor(heading):
    """The anchor GitHub gives a Markdown heading: lower case, punctuation but `-` and `_` dropped, spaces `-`."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def runbook_headings():
    """(level, text) of each heading of the runbook, fenced code left out."""
    text = re.sub(r"^```.*?^```", "", RUNBOOK.read_text(), flags=re.M | re.S)
    return [(len(match.group(1)), match.group(2)) for match in re.finditer(r"^(#{1,6})\s+(.+?)\s*#*$", text, re.M)]


def test_every_alert_names_its_runbook_section():
    """Each alert's `runbook` annotation is `outage-runbook.md#<its name, lower case>`, a heading of the runbook; and
    "When an alert fires" has a subsection for each alert and for nothing else."""
    headings = runbook_headings()
    anchors = {github_anchor(text) for _, text in headings}
    alerts = alert_rules()
    assert len(alerts) > 5
    for rule in alerts:
        runbook = rule.get("annotations", {}).get("runbook")
        assert runbook == f"outage-runbook.md#{rule['alert'].lower()}", f"{rule['alert']}: runbook annotation {runbook!r}"
        assert runbook.split("#", 1)[1] in anchors, f"{rule['alert']}: no heading {rule['alert']} in {RUNBOOK.name}"
    start = next(index for index, (level, text) in enumerate(headings) if text.endswith("When an alert fires"))
    level = headings[start][0]
    section = []
    for sublevel, text in headings[start + 1 :]:
        if sublevel <= level:
            break
        if sublevel == level + 1:
            section.append(text)
    assert sorted(section) == sorted(rule["alert"] for rule in alerts), "one subsection per alert, named after it"


# The gauges every ingest (and serve) reports for the whole cluster's queue (Sources/Ingest/QueueMetrics.swift): N
# ingests report N copies of one figure, so a sum over them is N times too much; `max` is the figure.
CLUSTER_WIDE = ROOT / "Sources" / "Ingest" / "QueueMetrics.swift"


@pytest.mark.parametrize("source", ["rules", "dashboard"])
def test_no_cluster_wide_gauge_is_summed(source):
    gauges = set(re.findall(r'describe\(\s*"(kumapush_\w+)",\s*\.gauge', CLUSTER_WIDE.read_text()))
    assert {"kumapush_queue_jobs", "kumapush_dead_letters"} <= gauges, "QueueMetrics.swift was not read"
    expressions = rule_expressions() if source == "rules" else dashboard_expressions()
    summed = re.compile(
        r"\bsum\s*(?:(?:by|without)\s*\([^)]*\)\s*)?\(\s*(" + "|".join(sorted(gauges)) + r")\b")
    offending = [expression for expression in expressions if summed.search(expression)]
    assert offending == [], f"{source} sum a cluster-wide gauge over processes (use max): {offending}"


@needs_promtool
def test_the_scrape_configuration_and_rules_check():
    result = promtool("check", "config", "prometheus.yml")
    assert result.returncode == 0, result.stdout + result.stderr


def rule_expressions():
    return [rule["expr"] for group in yaml.safe_load(RULES.read_text())["groups"] for rule in group["rules"]]


def dashboard_expressions():
    return [target["expr"] for panel in json.loads(DASHBOARD.read_text())["panels"] for target in panel["targets"]]


def metric_names(expression):
    """The series names an expression selects: every identifier left once strings, label matchers, ranges and
    grouping clauses are taken out, except functions (followed by `(`) and operators."""
    without_strings = re.sub(r'"[^"]*"', '""', expression)
    without_selectors = re.sub(r"\{[^}]*\}|\[[^\]]*\]", "", without_strings)
    without_grouping = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", without_selectors)
    names = set()
    for match in re.finditer(r"\b([a-zA-Z_:][a-zA-Z0-9_:]*)\b(?!\s*\()", without_grouping):
        name = match.group(1)
        if name in {"and", "or", "unless", "bool", "offset", "le", "Inf"} or re.fullmatch(r"\d+[smhdwy]?", name):
            continue
        names.add(name)
    return names


def family(name):
    """A histogram's series (`_bucket`, `_sum`, `_count`) belong to its family."""
    catalogue = documented()
    for suffix in ("_bucket", "_sum", "_count"):
        if name.endswith(suffix) and catalogue.get(name[: -len(suffix)], ("",))[0] == "histogram":
            return name[: -len(suffix)]
    return name


@pytest.mark.parametrize("source", ["rules", "dashboard"])
def test_every_metric_named_exists(source):
    expressions = rule_expressions() if source == "rules" else dashboard_expressions()
    assert len(expressions) > 5
    catalogue = documented()
    named = {family(name) for expression in expressions for name in metric_names(expression)}
    unknown = sorted(name for name in named - PROMETHEUS_OWN if name not in catalogue)
    assert unknown == [], f"{source} name metrics the relay does not serve: {unknown}"
    assert named & set(catalogue), "the expressions were not read"


@needs_promtool
def test_the_dashboard_expressions_parse(tmp_path):
    """Each panel query, with Grafana's variables given values, as a recording rule promtool parses."""
    rules = [{"record": f"kumapush:dashboard:{index}",
              "expr": expression.replace("$__rate_interval", "5m").replace("$job", "kumapush.*")}
             for index, expression in enumerate(dashboard_expressions())]
    path = tmp_path / "dashboard-rules.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    result = promtool("check", "rules", str(path))
    assert result.returncode == 0, result.stdout + result.stderr
