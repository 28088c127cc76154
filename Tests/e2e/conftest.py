"""Shared fixtures for the end-to-end tests: the real kumapush-relay binary, run as a process."""
import os
import pathlib
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _binary() -> pathlib.Path:
    override = os.environ.get("KUMAPUSH_RELAY_BINARY")
    if override:
        return pathlib.Path(override)
    built = subprocess.run(["swift", "build", "--show-bin-path"], cwd=ROOT, capture_output=True, text=True, check=True)
    return pathlib.Path(built.stdout.strip()) / "kumapush-relay"


@pytest.fixture(scope="session")
def relay_binary() -> pathlib.Path:
    path = _binary()
    assert path.exists(), f"{path} is missing: run swift build first"
    return path


@pytest.fixture
def relay(relay_binary, tmp_path):
    """Runs `kumapush-relay ARGS...` with a clean environment and a database in the test's own folder."""

    def run(*args, env=None, timeout=60):
        environment = {"PATH": os.environ.get("PATH", ""), "DATABASE_PATH": str(tmp_path / "relay.db")}
        environment.update(env or {})
        return subprocess.run([str(relay_binary), *args], env=environment, capture_output=True, text=True,
                              timeout=timeout)

    run.tmp_path = tmp_path
    return run
