"""deploy/: the systemd units verify, and the split setup started from their ExecStart lines carries an alert."""
import os
import re
import shutil
import subprocess

import pytest

from conftest import ROOT, TLS, TOPIC
from relayproc import Relay, free_port, relay_env, request, wait_until

UNITS = ROOT / "deploy" / "systemd"


def unit_with_binary(name, binary, directory):
    text = (UNITS / name).read_text().replace("/usr/local/bin/kumapush-relay", str(binary))
    path = directory / name
    path.write_text(text)
    return path


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze not installed")
def test_systemd_units_verify(relay_binary, tmp_path):
    units = [unit_with_binary(name, relay_binary, tmp_path) for name in
             ("kumapush-relay.service", "kumapush-ingest.service", "kumapush-deliver@.service")]
    instance = tmp_path / "kumapush-deliver@1.service"
    shutil.copy(units[2], instance)
    result = subprocess.run(["systemd-analyze", "verify", "--man=no", str(units[0]), str(units[1]), str(instance)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr


def exec_start(name, instance="1"):
    """The unit's ExecStart command line and its Environment= settings (with %i replaced)."""
    text = (UNITS / name).read_text().replace("%i", instance)
    command = re.search(r"^ExecStart=(.+)$", text, re.M).group(1).split()
    environment = dict(line.split("=", 1) for line in re.findall(r"^Environment=(.+)$", text, re.M))
    return command, environment


def test_the_split_setup_from_the_unit_files_carries_an_alert(relay_binary, tmp_path, fake_apns):
    shared = dict(APNS_URL=f"https://127.0.0.1:{fake_apns.port}", APNS_CA_FILE=TLS / "ca.pem", APNS_AUTH_KEY_PATH=TLS / "apns-key.p8",
                  APNS_KEY_ID="KEY1234567", APNS_TEAM_ID="TEAM123456", APP_BUNDLE_IDENTIFIER=TOPIC, RATE_LIMIT_REGISTER="off")
    processes = []
    try:
        for unit in ("kumapush-ingest.service", "kumapush-deliver@.service"):
            command, unit_env = exec_start(unit, instance=str(free_port() % 9))
            assert command[0] == "/usr/local/bin/kumapush-relay"
            env = relay_env(tmp_path, **shared)
            env.update({k: v for k, v in unit_env.items() if k != "DATABASE_PATH"})
            if unit.startswith("kumapush-deliver"):
                env["METRICS_ADDR"] = f"127.0.0.1:{free_port()}"  # the unit's 946N may be taken on a shared machine
            relay = Relay(relay_binary, command[1], env, tmp_path / f"{unit}.log")
            processes.append(relay)
        ingest = processes[0].wait_healthy()
        status, device, _ = request("POST", f"{ingest.base}/devices", {"device_token": "ef" * 32})
        assert status == 201
        status, _, _ = request("POST", f"{ingest.base}/wh/{device['id']}",
                               {"heartbeat": {"status": 0, "msg": "timeout"}, "monitor": {"id": 1, "name": "Web"}, "msg": "down"})
        assert status == 202
        push = wait_until(lambda: fake_apns.pushes("ef" * 32), what="the push")[0]
        assert push["payload"]["aps"]["alert"]["title"] == "Web is down"
    finally:
        for relay in processes:
            relay.stop()
