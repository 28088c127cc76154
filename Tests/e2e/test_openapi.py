"""docs/openapi.yaml against the live ingest server, with schemathesis: no 5xx, and every response has a documented
status, the JSON content type and a body matching the schema.

Random ids only ever reach the 404 of an unknown device, so the run is given real ones: the webhook operations use
a registered device (their 202s and 200s are then checked against the schema too), and /devices/{id} another one
with its bearer token (so GET, PATCH and DELETE reach 200 and 204, not only 401)."""
import json
import pathlib
import sqlite3
import subprocess
import sys

from conftest import ROOT
from relayproc import Relay, relay_env, request


def register(relay, seed):
    status, body, _ = request("POST", relay.base + "/devices", {"device_token": f"{seed:064x}"})
    assert status == 201, body
    return body["id"], body["auth_token"]


def config(webhook_device, app_device, app_auth):
    """schemathesis.toml: fixed path parameters per operation, the bearer token only where the API takes one."""
    return "\n".join([
        "[[operations]]",
        'include-path = "/wh/{deviceId}"',
        f"parameters = {{ deviceId = {json.dumps(webhook_device)} }}",
        "[[operations]]",
        'include-path = "/devices/{id}"',
        f"parameters = {{ id = {json.dumps(app_device)} }}",
        f"headers = {{ Authorization = {json.dumps('Bearer ' + app_auth)} }}",
        "",
    ])


def test_the_live_api_matches_its_openapi_description(relay_binary, tmp_path):
    env = relay_env(tmp_path, TEST_WAIT="0", RATE_LIMIT_REGISTER="off", RATE_LIMIT_WEBHOOK_IP="off", RATE_LIMIT_WEBHOOK_FAILED="off")
    relay = Relay(relay_binary, "ingest", env, tmp_path / "ingest.log").wait_healthy()
    try:
        webhook_device, _ = register(relay, 1)
        app_device, app_auth = register(relay, 2)
        settings = tmp_path / "schemathesis.toml"
        settings.write_text(config(webhook_device, app_device, app_auth))
        schemathesis = pathlib.Path(sys.executable).with_name("schemathesis")
        result = subprocess.run(
            [str(schemathesis), "--config-file", str(settings), "run", str(ROOT / "docs" / "openapi.yaml"),
             "--url", relay.base,
             "--checks", "not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance",
             "--max-examples", "50", "--seed", "1", "--request-timeout", "30"],
            capture_output=True, text=True, timeout=600, cwd=tmp_path)
        assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
        assert " passed" in result.stdout
        assert relay.process.poll() is None, "the server survived"

        # The webhook's success path was exercised (and its answers validated above): jobs exist for that device.
        with sqlite3.connect(tmp_path / "relay.db") as connection:
            queued = connection.execute("SELECT count(*) FROM jobs WHERE device_id = ?", (webhook_device,)).fetchone()[0]
        assert queued > 0, "no webhook schemathesis sent was accepted"
    finally:
        relay.stop()
