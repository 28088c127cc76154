"""deploy/Caddyfile, run by a real Caddy (Debian's `caddy`) in front of a relay that is down: the proxy error is
logged, without the webhook's path or query string. (Caddy's default error log recorded the request URI with every
proxy error, so each relay restart wrote webhook secrets to the journal.)"""
import os
import pathlib
import re
import shutil
import subprocess

import pytest

from conftest import ROOT
from relayproc import free_port, request, wait_until

pytestmark = pytest.mark.skipif(shutil.which("caddy") is None, reason="caddy missing: scripts/install-deps.sh")


def caddyfile_on(port, upstream_port, directory):
    """deploy/Caddyfile with the site on plain HTTP on a free port, the upstream moved to `upstream_port`, and no
    admin listener (several tests may run Caddy at once); its logging options untouched."""
    text = (ROOT / "deploy" / "Caddyfile").read_text()
    assert text.count("relay.example.com {") == 1 and text.count("127.0.0.1:4321") == 1
    text = text.replace("relay.example.com {", f"http://127.0.0.1:{port} {{")
    text = text.replace("127.0.0.1:4321", f"127.0.0.1:{upstream_port}")
    text = re.sub(r"^\{\n", "{\n\tadmin off\n", text, count=1, flags=re.M)
    path = directory / "Caddyfile"
    path.write_text(text)
    return path


def test_a_proxy_error_is_logged_without_the_webhook_url(tmp_path):
    port, relay_port = free_port(), free_port()  # nothing listens on relay_port: the relay is down
    config = caddyfile_on(port, relay_port, tmp_path)
    env = dict(os.environ, HOME=str(tmp_path), XDG_DATA_HOME=str(tmp_path), XDG_CONFIG_HOME=str(tmp_path))
    log_path = tmp_path / "caddy.log"
    with open(log_path, "wb") as log:
        caddy = subprocess.Popen(["caddy", "run", "--config", str(config), "--adapter", "caddyfile"], env=env,
                                 stdout=log, stderr=subprocess.STDOUT)
    try:
        def answering():
            assert caddy.poll() is None, log_path.read_text()
            try:
                return request("GET", f"http://127.0.0.1:{port}/health")[0]
            except OSError:
                return None
        wait_until(answering, what="Caddy listening")
        secret, text = "wWhSecretDeviceId42", "NotificationTextInQuery"
        status, _, _ = request("GET", f"http://127.0.0.1:{port}/wh/{secret}?msg={text}")
        assert status == 502
        # Two proxy errors: the /health that showed Caddy up, then the webhook.
        def proxy_errors():
            lines = [line for line in log_path.read_text().splitlines() if "http.log.error" in line and '"status":502' in line]
            return lines if len(lines) >= 2 else None
        errors = wait_until(proxy_errors, what="the webhook's proxy error logged")
        assert "connect" in errors[1], errors  # the error itself is kept: what failed
        everything = log_path.read_text()
        assert secret not in everything and text not in everything and "/wh/" not in everything, everything
    finally:
        caddy.terminate()
        caddy.wait(timeout=30)
