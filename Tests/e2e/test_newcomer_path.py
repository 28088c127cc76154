"""The README's first steps as a newcomer takes them: `make run`'s walk-through pastes as printed (its webhook URL
once held `<id>`, which a shell reads as a redirection), and `make run` installs no database server it does not use."""
import json
import os
import re
import select
import signal
import subprocess
import time

from conftest import ROOT
from relayproc import free_port


def read_until(process, marker, timeout=120.0):
    """stdout of `process` up to and including the line holding `marker`, within a deadline."""
    deadline = time.monotonic() + timeout
    text = ""
    while marker not in text:
        remaining = deadline - time.monotonic()
        assert remaining > 0 and process.poll() is None, f"no {marker!r} in time; got:\n{text}"
        # Raw reads: a buffered readline would hold lines select() no longer reports.
        ready, _, _ = select.select([process.stdout], [], [], remaining)
        if ready:
            chunk = os.read(process.stdout.fileno(), 65536)
            assert chunk, f"stdout closed before {marker!r}; got:\n{text}"
            text += chunk.decode()
    return text


def printed_commands(text):
    """Each `curl` command of the walk-through, continuation lines joined, exactly as a reader would paste it."""
    commands, current = [], None
    for line in text.splitlines():
        if current is not None:
            current += "\n" + line
        elif line.strip().startswith("curl "):
            current = line.strip()
        if current is not None and not line.endswith("\\"):
            commands.append(current)
            current = None
    return commands


def test_the_walkthrough_commands_paste_as_printed(relay_binary, tmp_path):
    env = dict(os.environ, KUMAPUSH_RELAY_BINARY=str(relay_binary), DEV_DIR=str(tmp_path / "dev"),
               PORT=str(free_port()), SIM_PORT=str(free_port()), SANDBOX_SIM_PORT=str(free_port()),
               METRICS_ADDR=f"127.0.0.1:{free_port()}")
    for name in ("APNS_AUTH_KEY_PATH", "APNS_URL", "DATABASE_PATH"):
        env.pop(name, None)
    script = subprocess.Popen(["bash", str(ROOT / "scripts" / "run.sh")], env=env, cwd=ROOT, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, start_new_session=True)
    try:
        text = read_until(script, "Ctrl-C stops everything.")
        commands = printed_commands(text)
        assert len(commands) == 4, text
        assert not any("<" in command for command in commands), "a placeholder would be read as a redirection"
        answers = []
        for command in commands:
            result = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=60)
            assert result.returncode == 0 and result.stderr == "", (command, result.stderr)
            answers.append(json.loads(result.stdout))
        device = answers[0]
        assert f"/wh/{device['id']}" in commands[1] and f"/wh/{device['id']}" in commands[2]
        assert "error" not in answers[1], answers[1]
        assert answers[2] == {"status": "delivered"}
        assert "id" in answers[3]
    finally:
        if script.poll() is None:
            script.send_signal(signal.SIGTERM)  # run.sh stops its relay and simulators on TERM
            try:
                script.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(script.pid, signal.SIGKILL)
                script.wait(timeout=10)
        script.stdout.close()


def test_make_run_installs_no_database_server():
    """`make run` asks scripts/install-deps.sh for its `run` list only, and that list has the PostgreSQL client
    library the binary links but no server (`make test` installs one; its tests start throwaway servers)."""
    dry_run = subprocess.run(["make", "-n", "run"], cwd=ROOT, capture_output=True, text=True, timeout=60).stdout
    installs = re.findall(r"install-deps\.sh.*", dry_run)
    assert installs == ["install-deps.sh run"], dry_run
    listed = subprocess.run(["scripts/install-deps.sh", "--list", "run"], cwd=ROOT, capture_output=True, text=True,
                            timeout=60, check=True).stdout.split()
    assert "libpq-dev" in listed and not any(package.startswith("postgresql") for package in listed), listed
    for_tests = subprocess.run(["scripts/install-deps.sh", "--list"], cwd=ROOT, capture_output=True, text=True,
                               timeout=60, check=True).stdout.split()
    assert "postgresql" in for_tests and set(listed) <= set(for_tests)
