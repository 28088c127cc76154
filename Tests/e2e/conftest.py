"""Shared fixtures for the end-to-end tests: the real kumapush-relay binary, run as a process."""
import os
import pathlib
import re
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _binary() -> pathlib.Path:
    override = os.environ.get("KUMAPUSH_RELAY_BINARY")
    if override:
        return pathlib.Path(override)
    built = subprocess.run(["swift", "build", "--show-bin-path"], cwd=ROOT, capture_output=True, text=True, check=True,
                           timeout=600)
    return pathlib.Path(built.stdout.strip()) / "kumapush-relay"


def linked_libraries(binary: pathlib.Path) -> dict:
    """{soname: path} of every shared library `binary` loads, as the dynamic linker resolves them (ldd, C locale).
    Skips the test when `binary` is a wrapper script (the ASan run's), not an ELF file."""
    with open(binary, "rb") as file:
        if file.read(4) != b"\x7fELF":
            pytest.skip(f"{binary} is a wrapper, not the binary")
    listed = subprocess.run(["ldd", str(binary)], capture_output=True, text=True, check=True, timeout=60,
                            env={"LC_ALL": "C", "PATH": "/usr/bin:/bin"}).stdout
    return dict(re.findall(r"^\s*(\S+) => (/\S+)", listed, re.M))


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


TLS = ROOT / "Tests" / "Fixtures" / "tls"
TOPIC = "com.example.kumapush"


@pytest.fixture
def fake_apns():
    from fake_apns import FakeAPNs
    fake = FakeAPNs(str(TLS / "server.pem"), str(TLS / "server.key"), str(TLS / "apns-key.pub.pem"), TOPIC).start()
    yield fake
    fake.stop()


@pytest.fixture
def relays(relay_binary, tmp_path, fake_apns):
    """Starts relay processes (serve, ingest, deliver) wired to the fake APNs and one database; stops them after."""
    from relayproc import Relay, relay_env, free_port
    started = []

    def start(command, prefix=(), **overrides):
        settings = dict(APNS_URL=f"https://127.0.0.1:{fake_apns.port}", APNS_CA_FILE=TLS / "ca.pem",
                        APNS_AUTH_KEY_PATH=TLS / "apns-key.p8", APNS_KEY_ID="KEY1234567", APNS_TEAM_ID="TEAM123456",
                        APP_BUNDLE_IDENTIFIER=TOPIC, RETRY_BASE="50ms", RETRY_MAX="500ms", RATE_LIMIT_REGISTER="off")
        settings.update(overrides)
        env = relay_env(tmp_path, **settings)
        if command == "deliver":
            env["PORT"] = str(free_port())  # unused by deliver, but keeps processes from sharing anything
        relay = Relay(relay_binary, command, env, tmp_path / f"{command}-{len(started)}.log", prefix=prefix)
        # A deliverer has no /health; its metrics listener answering shows it started (one that exits at start-up,
        # e.g. on a setting it refuses, fails here with its exit code instead of as a later timeout).
        if command == "deliver":
            relay.wait_metrics()
        else:
            relay.wait_healthy()
        started.append(relay)
        return relay

    yield start
    for relay in started:
        relay.stop()


@pytest.fixture(scope="session")
def shared_postgres():
    """One throwaway PostgreSQL server for the tests that run on both stores (a fresh database each)."""
    from postgres_server import PostgresServer
    server = PostgresServer().start()
    yield server
    server.stop()


@pytest.fixture(params=["sqlite", "postgres"], name="store")
def store_settings(request, tmp_path):
    """The relay's database setting on each store, as the units' env file would hold it: its own SQLite file, or a
    fresh database on the shared PostgreSQL server."""
    if request.param == "sqlite":
        return {"DATABASE_PATH": str(tmp_path / "relay.db")}
    server = request.getfixturevalue("shared_postgres")
    return {"DATABASE_URL": server.url(server.create_database())}


@pytest.fixture
def postgres(shared_postgres):
    """The session's PostgreSQL server. A module whose tests stop or restart their server (test_postgres.py)
    defines a `postgres` of its own, which takes precedence there."""
    return shared_postgres


@pytest.fixture
def database(postgres):
    """A fresh database on the `postgres` server: (its name, its DATABASE_URL)."""
    name = postgres.create_database()
    return name, postgres.url(name)
