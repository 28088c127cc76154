"""docs/openapi.yaml against the live ingest server, with schemathesis: no 5xx, and every response has a documented
status, the JSON content type and a body matching the schema."""
import pathlib
import subprocess
import sys

from conftest import ROOT
from relayproc import Relay, relay_env


def test_the_live_api_matches_its_openapi_description(relay_binary, tmp_path):
    env = relay_env(tmp_path, TEST_WAIT="0", RATE_LIMIT_REGISTER="off", RATE_LIMIT_WEBHOOK_IP="off", RATE_LIMIT_WEBHOOK_FAILED="off")
    relay = Relay(relay_binary, "ingest", env, tmp_path / "ingest.log").wait_healthy()
    try:
        schemathesis = pathlib.Path(sys.executable).with_name("schemathesis")
        result = subprocess.run(
            [str(schemathesis), "run", str(ROOT / "docs" / "openapi.yaml"), "--url", relay.base,
             "--checks", "not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance",
             "--max-examples", "50", "--seed", "1"],
            capture_output=True, text=True, timeout=600)
        assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
        assert " passed" in result.stdout
        assert relay.process.poll() is None, "the server survived"
    finally:
        relay.stop()
