"""SPEC §2.3: each process's /metrics is what Prometheus tooling expects. `promtool check metrics` (Debian's
`prometheus` package) finds nothing to report; the standard `process_*` families describe the process itself;
`kumapush_build_info` names the version and schema; latency buckets reach an hour."""
import re
import shutil
import subprocess
import time

import pytest

from relayproc import request, wait_until

pytestmark = pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool missing: scripts/install-deps.sh")


def scrape(relay):
    status, body, _ = request("GET", f"http://{relay.env['METRICS_ADDR']}/metrics")
    assert status == 200
    return body.decode()


def samples(text):
    """{(name, labels text): value} of every sample line."""
    found = {}
    for line in text.splitlines():
        match = re.match(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)$", line)
        if match:
            found[(match.group(1), match.group(2) or "")] = float(match.group(3))
    return found


def deliver_one_alert(relay, fake_apns, token):
    status, device, _ = request("POST", f"{relay.base}/devices", {"device_token": token})
    assert status == 201
    status, _, _ = request("POST", f"{relay.base}/wh/{device['id']}",
                           {"heartbeat": {"status": 0, "msg": "timeout"}, "monitor": {"id": 1, "name": "Web"}, "msg": "down"})
    assert status == 202
    wait_until(lambda: fake_apns.pushes(token), what="the push")


@pytest.mark.parametrize("command", ["serve", "ingest", "deliver"])
def test_promtool_finds_nothing_to_report(relays, fake_apns, command):
    relay = relays(command)
    if command == "serve":
        deliver_one_alert(relay, fake_apns, "d1" * 32)  # histograms and labelled counters have series by now
    result = subprocess.run(["promtool", "check", "metrics"], input=scrape(relay), capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and result.stdout + result.stderr == "", result.stdout + result.stderr


def clock_ticks_per_second():
    return int(subprocess.run(["getconf", "CLK_TCK"], capture_output=True, text=True, check=True).stdout)


def test_the_process_families_describe_the_process_serving_them(relays):
    before = time.time()
    relay = relays("ingest")
    pid = relay.process.pid
    values = samples(scrape(relay))
    # CPU: at most what the kernel has counted for the process by now (read after the scrape), and some.
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    cpu_after = (int(fields[11]) + int(fields[12])) / clock_ticks_per_second()
    assert 0 < values[("process_cpu_seconds_total", "")] <= cpu_after + 0.02
    # The descriptor limit is the process's soft RLIMIT_NOFILE.
    limits = open(f"/proc/{pid}/limits").read()
    soft = re.search(r"^Max open files\s+(\d+)", limits, re.M).group(1)
    assert values[("process_max_fds", "")] == float(soft)
    # Open descriptors: the listeners and the database at least, within the limit.
    assert 3 < values[("process_open_fds", "")] < float(soft)
    # Resident memory: within what the kernel reports as the peak so far.
    peak_kb = int(re.search(r"^VmHWM:\s+(\d+) kB", open(f"/proc/{pid}/status").read(), re.M).group(1))
    assert 1 << 20 < values[("process_resident_memory_bytes", "")] <= peak_kb * 1024
    # Started between this test's clock reading and the scrape. The kernel gives the boot time in whole seconds
    # (/proc/stat's btime, truncated), so the figure can read up to a second early, as every exporter's does.
    assert before - 1.0 <= values[("process_start_time_seconds", "")] <= time.time()


def test_build_info_names_the_version_and_schema_the_binary_prints(relays, relay):
    printed = relay("version").stdout.splitlines()[0]
    version, schema = re.match(r"kumapush-relay (\S+) \(database schema (\d+)\)", printed).groups()
    for command in ("ingest", "deliver"):
        values = samples(scrape(relays(command)))
        builds = {key: value for key, value in values.items() if key[0] == "kumapush_build_info"}
        assert builds == {("kumapush_build_info", f'{{version="{version}",schema="{schema}"}}'): 1.0}


def test_latency_buckets_reach_an_hour(relays, fake_apns):
    relay = relays("serve")
    deliver_one_alert(relay, fake_apns, "d2" * 32)
    # The push reaches the fake before the relay has read APNs' answer and timed the request.
    def timed():
        text = scrape(relay)
        return text if "\nkumapush_apns_request_seconds_count " in text else None
    text = wait_until(timed, what="the APNs request timed")
    for family in ("kumapush_webhook_to_apns_seconds", "kumapush_apns_request_seconds", "kumapush_http_request_duration_seconds",
                   "kumapush_enqueue_commit_seconds", "kumapush_claim_wait_seconds", "kumapush_delivery_store_seconds"):
        bounds = [float(bound) for bound in re.findall(rf'^{family}_bucket\{{.*le="([0-9.e+-]+)"\}}', text, re.M)]
        assert bounds and max(bounds) == 3600, (family, bounds)


def test_each_stage_of_a_push_is_timed(relays, fake_apns):
    """The stages of webhook → APNs an operator (and `make bench`'s PostgreSQL latency breakdown) reads: the group
    commit, the wait to be claimed, and the store's time per claim and per completion batch, one observation each
    for one alert."""
    relay = relays("serve")
    deliver_one_alert(relay, fake_apns, "d3" * 32)
    def finished():
        values = samples(scrape(relay))
        return values if values.get(("kumapush_delivery_store_seconds_count", '{operation="finish"}'), 0) >= 1 else None
    values = wait_until(finished, what="the completion batch timed")
    assert values[("kumapush_enqueue_commit_seconds_count", "")] >= 1
    assert values[("kumapush_claim_wait_seconds_count", "")] == 1
    assert values[("kumapush_delivery_store_seconds_count", '{operation="claim"}')] >= 1
