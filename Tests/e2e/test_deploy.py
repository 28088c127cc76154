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
             ("kumapush-relay.service", "kumapush-ingest.service", "kumapush-deliver@.service",
              "kumapush-relay.socket", "kumapush-ingest.socket")]
    instance = tmp_path / "kumapush-deliver@9465.service"
    shutil.copy(units[2], instance)
    result = subprocess.run(["systemd-analyze", "verify", "--man=no", str(units[0]), str(units[1]), str(instance),
                             str(units[3]), str(units[4])],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr


def exec_start(name, instance="1"):
    """The unit's ExecStart command line and its Environment= settings (with %i replaced)."""
    text = (UNITS / name).read_text().replace("%i", instance)
    command = re.search(r"^ExecStart=(.+)$", text, re.M).group(1).split()
    environment = dict(line.split("=", 1) for line in re.findall(r"^Environment=(.+)$", text, re.M))
    return command, environment


def flags(command):
    """`--name=value` flags of a command line, by name."""
    return dict(argument[2:].split("=", 1) for argument in command if argument.startswith("--") and "=" in argument)


def test_each_deliverer_listens_for_metrics_on_the_port_it_is_named_after():
    """Several deliverers on one host need a metrics port each, none of them ingest's (9464, the default): the
    instance name is the port. (It was `946%i`: instance 4 took ingest's port, 10 and up were no port at all.)"""
    ports = [flags(exec_start("kumapush-deliver@.service", instance=str(port))[0])["metrics-addr"] for port in (9465, 9466, 9470)]
    assert ports == ["127.0.0.1:9465", "127.0.0.1:9466", "127.0.0.1:9470"]
    assert "metrics-addr" not in flags(exec_start("kumapush-ingest.service")[0]), "ingest keeps the default 9464"


@pytest.mark.parametrize("name", ("kumapush-relay.service", "kumapush-ingest.service", "kumapush-deliver@.service"))
def test_the_env_file_cannot_move_what_a_unit_fixes_per_instance(relay_binary, tmp_path, name):
    """systemd's EnvironmentFile= wins over Environment=, so what a unit fixes per instance is a flag: with the env
    file saying otherwise, the process still uses the unit's database path and metrics port."""
    command, environment = exec_start(name, instance="9471")
    assert "DATABASE_PATH" not in environment and "METRICS_ADDR" not in environment
    assert flags(command)["database-path"] == "/var/lib/kumapush/kumapush.db"
    env_file = tmp_path / "kumapush.env"
    env_file.write_text(f"DATABASE_PATH={tmp_path / 'elsewhere.db'}\nMETRICS_ADDR=127.0.0.1:1\n")
    moved = {key: str(tmp_path / "unit.db") if key == "database-path" else value for key, value in flags(command).items()
             if key in ("database-path", "metrics-addr")}
    args = [f"--{key}={value}" for key, value in moved.items()]
    result = subprocess.run([str(relay_binary), "migrate", "--env-file", str(env_file), *args],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "unit.db").exists() and not (tmp_path / "elsewhere.db").exists()


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
                env["METRICS_ADDR"] = f"127.0.0.1:{free_port()}"  # the unit's port may be taken on a shared machine
            args = [f"--{key}={value}" for key, value in flags(command).items() if key not in ("database-path", "apns-auth-key-path")]
            if unit.startswith("kumapush-deliver"):
                args = [arg for arg in args if not arg.startswith("--metrics-addr")]
            relay = Relay(relay_binary, command[1], env, tmp_path / f"{unit}.log", args=args)
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


DEPLOY = ROOT / "deploy"
ALL_UNITS = ("kumapush-relay.service", "kumapush-ingest.service", "kumapush-deliver@.service")
# What `systemd-analyze security` scores the units at (docs/operations.md); a change that weakens them fails here.
EXPOSURE_CEILING = 1.5


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze not installed")
@pytest.mark.parametrize("name", ALL_UNITS)
def test_systemd_security_scores_each_unit_low(relay_binary, tmp_path, name):
    path = unit_with_binary(name, relay_binary, tmp_path)
    if name.endswith("@.service"):
        path = tmp_path / name.replace("@.", "@1.")
        shutil.copy(tmp_path / name, path)
    result = subprocess.run(["systemd-analyze", "security", "--offline=true", "--no-pager", str(path)],
                            capture_output=True, text=True, timeout=60)
    score = re.search(r"Overall exposure level for \S+: ([0-9.]+)", result.stdout)
    assert score, result.stdout + result.stderr
    assert float(score.group(1)) <= EXPOSURE_CEILING, result.stdout


def unit_settings(name):
    text = (UNITS / name).read_text()
    return re.findall(r"^(\w+)=(.*)$", text, re.M)


@pytest.mark.parametrize("name", ALL_UNITS)
def test_every_unit_creates_private_files(name):
    assert ("UMask", "0077") in unit_settings(name)


def test_only_the_delivering_units_get_the_apns_key():
    for name in ("kumapush-relay.service", "kumapush-deliver@.service"):
        settings = dict(unit_settings(name))
        assert settings["LoadCredential"] == "authkey.p8:/etc/kumapush/authkey.p8"
        assert "--apns-auth-key-path=%d/authkey.p8" in settings["ExecStart"].split()
    ingest = (UNITS / "kumapush-ingest.service").read_text()
    assert "LoadCredential" not in ingest and "authkey" not in ingest and "APNS_AUTH_KEY_PATH" not in ingest
    # The environment file every unit reads must not hand the key's path to ingest either.
    example = (DEPLOY / "kumapush.env.example").read_text()
    assert not re.search(r"^APNS_AUTH_KEY_PATH=", example, re.M)


def test_only_ingests_unit_lets_a_thread_lower_its_priority():
    # ingest's WAL checkpoint thread lowers its own priority (setpriority, in @resources); the deny-list line would
    # refuse it with EPERM, and the thread would keep taking turns with the request threads. The other units' threads
    # never change priority, so they keep the whole group denied.
    for name in ALL_UNITS:
        filters = [value for key, value in unit_settings(name) if key == "SystemCallFilter"]
        assert filters[:2] == ["@system-service", "~@privileged @resources"], (name, filters)
        assert filters[2:] == (["setpriority"] if name == "kumapush-ingest.service" else []), (name, filters)


def test_the_compose_files_publish_what_listens_and_give_the_key_to_deliverers_only():
    """A published port reaches a process only if it listens on all of the container's addresses: .env's
    HOST=127.0.0.1 is the container's own loopback, so every service with ports sets HOST itself. And the key goes
    only where pushes are sent (compose.postgres.yaml's shared anchor once gave it to ingest too)."""
    import yaml
    for file in ("compose.yaml", "compose.postgres.yaml"):
        services = yaml.safe_load((DEPLOY / file).read_text())["services"]
        for name, service in services.items():
            if name == "postgres":
                continue
            environment = service.get("environment", {})
            if service.get("ports"):
                assert environment.get("HOST") == "0.0.0.0", (file, name)
            sends = service.get("command", ["serve"])[0] in ("serve", "deliver")
            assert ("apns_auth_key" in service.get("secrets", [])) == sends, (file, name)
            assert ("APNS_AUTH_KEY_PATH" in environment) == sends, (file, name)


def test_the_compose_files_let_the_relay_finish_its_shutdown():
    """Docker kills a container 10 s after SIGTERM unless told otherwise: exactly SHUTDOWN_GRACE's default, so the
    relay was killed before giving its leases back (each push then waits out LEASE_TIMEOUT and may go out twice).
    Every relay service allows what the systemd units allow."""
    import yaml
    unit_timeout = int(dict(unit_settings("kumapush-relay.service"))["TimeoutStopSec"])
    for file in ("compose.yaml", "compose.postgres.yaml"):
        services = yaml.safe_load((DEPLOY / file).read_text())["services"]
        for name, service in services.items():
            if name == "postgres":
                continue
            grace = re.fullmatch(r"(\d+)s", str(service.get("stop_grace_period", "10s")))
            assert grace and int(grace.group(1)) >= unit_timeout, (file, name, service.get("stop_grace_period"))


@pytest.mark.parametrize("name", ["kumapush-relay.service", "kumapush-ingest.service", "kumapush-deliver@.service"])
def test_the_start_waits_out_a_schema_upgrade(name):
    """A unit is started once the relay says READY=1 (Type=notify), which comes after its schema upgrade (migration
    12: about 18 s a million queued jobs; Migrations.upgradeWaitMillis lets the others wait 15 minutes). The start
    timeout was about 10 s once: a large queue's upgrade failed the start, systemd stopped the process, and the
    upgrade began again."""
    settings = dict(unit_settings(name))
    assert settings["Type"] == "notify" and "WatchdogSec" in settings
    assert settings["TimeoutStartSec"] == "16min"


@pytest.mark.parametrize("name", ["kumapush-relay", "kumapush-ingest"])
def test_the_api_units_take_their_socket_from_a_socket_unit(name):
    """A restart refuses nothing only when systemd holds the listening socket (SPEC §4)."""
    assert dict(unit_settings(f"{name}.service"))["Requires"] == f"{name}.socket"
    assert "ListenStream" in dict(unit_settings(f"{name}.socket"))


def test_the_two_api_sockets_conflict_as_they_share_an_address():
    """serve's and the split setup's ingest socket listen where the proxy sends webhooks: enabling one stops the other."""
    serve, ingest = (dict(unit_settings(f"{name}.socket")) for name in ("kumapush-relay", "kumapush-ingest"))
    assert serve["ListenStream"] == ingest["ListenStream"]
    assert serve["Conflicts"] == "kumapush-ingest.socket" and ingest["Conflicts"] == "kumapush-relay.socket"
    # An order between them, or the start of one runs beside the stop of the other, which still holds the address.
    assert ingest.get("After") == "kumapush-relay.socket" or serve.get("After") == "kumapush-ingest.socket"


def test_the_environment_example_listens_on_loopback_behind_the_proxy():
    example = (DEPLOY / "kumapush.env.example").read_text()
    assert re.search(r"^HOST=127\.0\.0\.1$", example, re.M)
    assert re.search(r"^BEHIND_PROXY=true$", example, re.M)


def test_the_proxy_examples_log_no_webhook_path_or_query_string():
    caddy = (DEPLOY / "Caddyfile").read_text()
    # Caddy writes an access log only where a site's `log` directive asks for one (the global options' `log` blocks
    # configure Caddy's own logs: test_caddy_logs.py runs them).
    assert not re.search(r"^\s*log\b", caddy[caddy.index("\nrelay.example.com {"):], re.M)
    nginx = (DEPLOY / "nginx" / "kumapush.conf").read_text()
    formats = re.findall(r"^\s*log_format\s+(\S+)\s+(.*?);", nginx, re.M | re.S)
    assert formats, "nginx's default log format records the request line"
    for _, fields in formats:
        assert not re.search(r"\$(request|request_uri|uri|document_uri|args|query_string|arg_\w+)\b", fields), fields
    names = {name for name, _ in formats}
    access_logs = re.findall(r"^\s*access_log\s+(\S+)(?:\s+(\S+))?\s*;", nginx, re.M)
    assert access_logs and all(path == "off" or name in names for path, name in access_logs)
    assert re.search(r"^\s*error_log\s+\S+\s+crit\s*;", nginx, re.M)


def test_host_wildcard_ipv6_listens_on_ipv4_too(relays):
    """HOST=:: is the IPv6 wildcard, and operators expect it to take IPv4 as well (dual stack): a reverse proxy on
    127.0.0.1 must reach it. Before, it listened on IPv6 only and the proxy got "connection refused"."""
    relay = relays("ingest", HOST="::")  # waits for /health on 127.0.0.1
    assert request("GET", f"http://127.0.0.1:{relay.port}/health")[0] == 200
    assert request("GET", f"http://[::1]:{relay.port}/health")[0] == 200
