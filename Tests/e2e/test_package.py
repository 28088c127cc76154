"""`make deb` and `make dist` (SPEC §6a): the package installs on this machine, its binary runs without the Swift
toolchain as the `kumapush` user it creates and carries an alert to the fake APNs, and `dpkg -r` then `dpkg --purge`
leave nothing behind. The package is built here (scripts/build-deb.sh, lintian included) unless KUMAPUSH_DEB names
one already built."""
import os
import pathlib
import pwd
import re
import shutil
import signal
import stat
import subprocess
import tempfile

import pytest

from conftest import ROOT, TLS, TOPIC
from relayproc import free_port, request, wait_until

PACKAGE = "kumapush-relay"

pytestmark = [
    pytest.mark.skipif(shutil.which("dpkg-deb") is None, reason="not a Debian system"),
    pytest.mark.skipif(os.geteuid() != 0, reason="installs a package: run as root (the test machines do)"),
]


def run(*command, check=True, timeout=600):
    result = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    if check:
        assert result.returncode == 0, f"{command}: {result.stdout}{result.stderr}"
    return result


def purge_if_installed():
    if run("dpkg-query", "-W", "-f=${Status}", PACKAGE, check=False).stdout.strip():
        run("dpkg", "--purge", PACKAGE)


@pytest.fixture(scope="module")
def deb():
    """The .deb: KUMAPUSH_DEB, or built now (static release build, packaging, lintian failing on any warning)."""
    given = os.environ.get("KUMAPUSH_DEB")
    if given:
        return pathlib.Path(given)
    # gzip: the same files as `make deb`'s xz in a fifth of the CPU time.
    result = subprocess.run(["scripts/build-deb.sh", "deb"], cwd=ROOT, capture_output=True, text=True, timeout=1500,
                            env=dict(os.environ, DEB_COMPRESSION="gzip"))
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    return ROOT / re.search(r"==> (\S+\.deb)", result.stdout).group(1)


def deb_files(deb):
    """The regular files and symlinks the package installs, as absolute paths."""
    names = run("dpkg-deb", "-c", str(deb)).stdout.splitlines()
    return sorted("/" + line.split()[-1].removeprefix("./") for line in names if not line.startswith("d"))


@pytest.mark.timeout(1800)
def test_the_package_installs_runs_without_the_toolchain_and_leaves_nothing(deb, fake_apns):
    purge_if_installed()
    assert not any(user.pw_name == "kumapush" for user in pwd.getpwall()), "a kumapush user exists before the install"
    assert not os.path.lexists("/var/lib/kumapush"), "a relay's state is already here: remove /var/lib/kumapush first"
    files = deb_files(deb)
    try:
        run("dpkg", "-i", str(deb))

        # What the package put where the units and the docs say.
        binary = pathlib.Path("/usr/bin/kumapush-relay")
        libraries = run("ldd", str(binary)).stdout
        assert "swift" not in libraries.lower(), libraries
        assert all("not found" not in line for line in libraries.splitlines()), libraries
        user = pwd.getpwnam("kumapush")
        assert user.pw_dir == "/var/lib/kumapush" and user.pw_shell.endswith("nologin")
        state = os.stat("/var/lib/kumapush")
        assert state.st_uid == user.pw_uid and stat.S_IMODE(state.st_mode) == 0o700
        environment = os.stat("/etc/kumapush/kumapush.env")
        assert stat.S_IMODE(environment.st_mode) == 0o600 and environment.st_uid == 0
        assert run("dpkg-query", "-W", "-f=${Conffiles}", PACKAGE).stdout.split()[0] == "/etc/kumapush/kumapush.env"
        units = sorted(path.name for path in (ROOT / "deploy" / "systemd").iterdir() if path.suffix in (".service", ".socket"))
        for unit in units:
            text = pathlib.Path("/lib/systemd/system", unit).read_text()
            assert "/usr/local/bin" not in text, unit
        installed = sorted(path.name for path in pathlib.Path("/lib/systemd/system").glob("kumapush*"))
        assert installed == units

        carries_an_alert_as_the_kumapush_user(binary, fake_apns)

        run("dpkg", "-r", PACKAGE)
        assert run("dpkg-query", "-W", "-f=${Status}", PACKAGE).stdout == "deinstall ok config-files"
        left = [path for path in files if os.path.lexists(path)]
        assert left == ["/etc/kumapush/kumapush.env"], "dpkg -r keeps the settings and nothing else it installed"
        assert os.path.exists("/var/lib/kumapush/kumapush.db"), "dpkg -r keeps the database"
        pwd.getpwnam("kumapush")

        run("dpkg", "--purge", PACKAGE)
        assert run("dpkg-query", "-W", PACKAGE, check=False).returncode != 0
        assert [path for path in files if os.path.lexists(path)] == []
        for path in ("/etc/kumapush", "/var/lib/kumapush"):
            assert not os.path.lexists(path), path
        assert not any(user.pw_name == "kumapush" for user in pwd.getpwall())
        assert run("getent", "group", "kumapush", check=False).returncode != 0
    finally:
        purge_if_installed()


def carries_an_alert_as_the_kumapush_user(binary, fake_apns):
    """`serve` from the package as kumapush, on the package's state directory, with no toolchain on PATH or
    LD_LIBRARY_PATH: a device registers and its alert reaches the fake APNs."""
    secrets = pathlib.Path(tempfile.mkdtemp(prefix="kumapush-package-"))
    try:
        for name in ("apns-key.p8", "ca.pem"):
            shutil.copy(TLS / name, secrets / name)
        os.chmod(secrets, 0o755)
        os.chmod(secrets / "apns-key.p8", 0o600)
        os.chown(secrets / "apns-key.p8", pwd.getpwnam("kumapush").pw_uid, -1)
        port = free_port()
        env = {
            "PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/var/lib/kumapush",
            "DATABASE_PATH": "/var/lib/kumapush/kumapush.db", "PORT": str(port), "HOST": "127.0.0.1",
            "METRICS_ADDR": f"127.0.0.1:{free_port()}", "LOG_LEVEL": "warning",
            "APNS_URL": f"https://127.0.0.1:{fake_apns.port}", "APNS_CA_FILE": str(secrets / "ca.pem"),
            "APNS_AUTH_KEY_PATH": str(secrets / "apns-key.p8"), "APNS_KEY_ID": "KEY1234567", "APNS_TEAM_ID": "TEAM123456",
            "APP_BUNDLE_IDENTIFIER": TOPIC, "RATE_LIMIT_REGISTER": "off",
        }
        log = open(secrets / "serve.log", "wb")
        relay = subprocess.Popen([str(binary), "serve"], env=env, user="kumapush", group="kumapush", stdout=log,
                                 stderr=subprocess.STDOUT, cwd="/var/lib/kumapush")
        try:
            base = f"http://127.0.0.1:{port}"

            def healthy():
                assert relay.poll() is None, (secrets / "serve.log").read_text()
                try:
                    return request("GET", base + "/health")[0] == 200
                except OSError:
                    return False
            wait_until(healthy, what="the packaged relay's /health")
            token = "c3" * 32
            status, device, _ = request("POST", base + "/devices", {"device_token": token})
            assert status == 201, device
            status, _, _ = request("POST", f"{base}/wh/{device['id']}", {
                "heartbeat": {"status": 0, "msg": "timeout"}, "monitor": {"id": 1, "name": "Packaged"}, "msg": "down"})
            assert status == 202
            push = wait_until(lambda: fake_apns.pushes(token), what="the push")[0]
            assert push["payload"]["aps"]["alert"]["title"] == "Packaged is down"
            backs_up_as_documented(token)
            runs_an_admin_command_as_the_runbook_says()
            relay.send_signal(signal.SIGTERM)
            assert relay.wait(timeout=60) == 0
        finally:
            if relay.poll() is None:
                relay.kill()
                relay.wait(timeout=10)
            log.close()
        database = os.stat("/var/lib/kumapush/kumapush.db")
        assert database.st_uid == pwd.getpwnam("kumapush").pw_uid
    finally:
        shutil.rmtree(secrets)


def backs_up_as_documented(token):
    """docs/operations.md's backup lines, run as written while the relay runs: the copy opens and holds the
    device, is root's and 0600, and nothing the relay needs becomes root's."""
    guide = (ROOT / "docs" / "operations.md").read_text()
    section = guide[guide.index("## Back up and restore while it runs"):]
    block = re.search(r"```sh\n(.*?)```", section, re.S).group(1)
    before = set(pathlib.Path("/var/backups").glob("kumapush-*.db"))
    result = subprocess.run(["bash", "-euo", "pipefail", "-c", block], capture_output=True, text=True, timeout=120)
    made = set(pathlib.Path("/var/backups").glob("kumapush-*.db")) - before
    assert result.returncode == 0 and len(made) == 1, block + result.stderr
    copy = made.pop()
    try:
        mode = os.stat(copy)
        assert mode.st_uid == 0 and stat.S_IMODE(mode.st_mode) == 0o600
        tokens = run("sqlite3", "-readonly", str(copy), "SELECT device_token FROM devices").stdout.split()
        assert token in tokens
        assert all(path.stat().st_uid == pwd.getpwnam("kumapush").pw_uid for path in pathlib.Path("/var/lib/kumapush").iterdir())
    finally:
        copy.unlink(missing_ok=True)


def runs_an_admin_command_as_the_runbook_says():
    """docs/outage-runbook.md's SQLite line, run as written (as root) while the relay runs: it opens the relay's
    database, sees the device, and leaves nothing beside the database that is not kumapush's."""
    runbook = (ROOT / "docs" / "outage-runbook.md").read_text()
    line = re.search(r"```sh\n(runuser .*)\n```", runbook).group(1)
    result = subprocess.run(["bash", "-euo", "pipefail", "-c", line], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, line + result.stderr
    assert re.search(r"devices\W+1\b", result.stdout), result.stdout
    assert all(path.stat().st_uid == pwd.getpwnam("kumapush").pw_uid for path in pathlib.Path("/var/lib/kumapush").iterdir())


@pytest.mark.timeout(1800)
def test_the_tarball_holds_the_same_tree_as_the_package(deb):
    result = subprocess.run(["scripts/build-deb.sh", "dist"], cwd=ROOT, capture_output=True, text=True, timeout=1500)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    tarball = ROOT / re.search(r"==> (\S+\.tar\.gz)", result.stdout).group(1)
    names = run("tar", "--numeric-owner", "-tvzf", str(tarball)).stdout.splitlines()
    assert names and all(line.split()[1] == "0/0" for line in names), "every file is root's"
    in_tarball = sorted("/" + line.split()[-1] for line in names if not line.startswith("d"))
    assert in_tarball == deb_files(deb)


def test_the_manual_page_lists_every_command(relay_binary):
    """The package's kumapush-relay(1) (lintian wants one for every binary) names every command `--help` lists."""
    help_text = subprocess.run([str(relay_binary), "--help"], capture_output=True, text=True, timeout=60).stdout
    commands = re.findall(r"^  ([a-z][a-z-]+)  ", help_text, re.M)
    assert len(commands) > 5, help_text
    page = (ROOT / "packaging" / "debian" / "kumapush-relay.1").read_text()
    listed = [name.replace("\\-", "-") for name in re.findall(r"^\.TP\n\.B (\S+)$", page, re.M)]
    assert listed == commands
