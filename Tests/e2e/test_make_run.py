"""`make run`'s script, driven through its printed walk-through (--check), on free ports and a temp folder."""
import os
import subprocess

from conftest import ROOT
from relayproc import free_port


def test_make_run_walkthrough_works_as_printed(relay_binary, tmp_path):
    env = dict(os.environ, KUMAPUSH_RELAY_BINARY=str(relay_binary), DEV_DIR=str(tmp_path / "dev"),
               PORT=str(free_port()), SIM_PORT=str(free_port()), SANDBOX_SIM_PORT=str(free_port()),
               METRICS_ADDR=f"127.0.0.1:{free_port()}")
    for name in ("APNS_AUTH_KEY_PATH", "APNS_URL", "DATABASE_PATH"):
        env.pop(name, None)
    result = subprocess.run(["bash", str(ROOT / "scripts" / "run.sh"), "--check"], env=env, capture_output=True, text=True,
                            timeout=120, cwd=ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "check passed" in result.stdout
    assert "curl -s -X POST http://127.0.0.1:" in result.stdout, "the walk-through is printed"
