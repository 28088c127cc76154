"""deploy/compose*.yaml would build and run as documented: no Docker engine on the build machines, so this reads
the files the way Compose and Docker do. (Compose once pointed at a Dockerfile that was not where it looked, sent
.build/, .venv/ and the APNs key as build context, pinned an older Swift than the project's, and trusted every
Docker network's addresses for X-Forwarded-For.)"""
import fnmatch
import ipaddress
import pathlib
import re
import subprocess

import pytest
import yaml

from conftest import ROOT, linked_libraries

DEPLOY = ROOT / "deploy"
COMPOSE_FILES = ("compose.yaml", "compose.postgres.yaml")


def relay_services(file):
    services = yaml.safe_load((DEPLOY / file).read_text())["services"]
    return {name: service for name, service in services.items() if "build" in service}


def build_paths(service):
    """(context, Dockerfile) as Compose resolves them: the context relative to the compose file's folder, the
    Dockerfile relative to the context, `Dockerfile` when not given."""
    build = service["build"]
    if isinstance(build, str):
        build = {"context": build}
    context = (DEPLOY / build.get("context", ".")).resolve()
    return context, context / build.get("dockerfile", "Dockerfile")


@pytest.mark.parametrize("file", COMPOSE_FILES)
def test_compose_finds_the_dockerfile_in_a_context_holding_the_sources(file):
    services = relay_services(file)
    assert services, f"{file} builds nothing"
    for name, service in services.items():
        context, dockerfile = build_paths(service)
        assert dockerfile.is_file(), (file, name, str(dockerfile))
        assert (context / "Package.swift").is_file(), (file, name, "the context must hold the package the Dockerfile builds")


def dockerignore_excludes(patterns, path):
    """Whether Docker leaves `path` out of the build context: the last matching pattern wins, `!` re-includes, and
    a pattern matching a folder matches everything under it."""
    excluded = False
    for pattern in patterns:
        negated = pattern.startswith("!")
        pattern = pattern.lstrip("!").strip("/")
        parts = path.split("/")
        prefixes = ["/".join(parts[:index]) for index in range(1, len(parts) + 1)]
        if any(fnmatch.fnmatchcase(prefix, pattern) or
               (pattern.startswith("**/") and fnmatch.fnmatchcase(prefix.split("/")[-1], pattern[3:])) for prefix in prefixes):
            excluded = not negated
    return excluded


def test_the_build_context_leaves_out_build_output_history_and_secrets():
    context, _ = build_paths(relay_services("compose.yaml")["relay"])
    ignore = context / ".dockerignore"
    assert ignore.is_file(), "without .dockerignore the context carries .build/, .venv/ and deploy/authkey.p8"
    patterns = [line.strip() for line in ignore.read_text().splitlines() if line.strip() and not line.startswith("#")]
    for path in (".build/release/kumapush-relay", ".venv/bin/python", ".git/HEAD", "deploy/authkey.p8",
                 "deploy/AuthKey_ABC123DEFG.p8", "deploy/.env", "Tests/e2e/__pycache__/x.pyc"):
        assert dockerignore_excludes(patterns, path), path
    for path in ("Package.swift", "Sources/KumaPushRelay/main.swift", "deploy/Dockerfile", "deploy/kumapush.env.example"):
        assert not dockerignore_excludes(patterns, path), path


def test_git_ignores_the_secrets_compose_reads_from_deploy():
    for path in ("deploy/.env", "deploy/authkey.p8", "deploy/AuthKey_ABC123DEFG.p8"):
        result = subprocess.run(["git", "check-ignore", "-q", path], cwd=ROOT, timeout=30)
        assert result.returncode == 0, f"git would commit {path}"


def test_the_image_builds_with_the_swift_version_the_project_uses():
    dockerfile = (DEPLOY / "Dockerfile").read_text()
    image = re.search(r"^FROM swift:(\d+\.\d+)(?:\.\d+)?-bookworm\b", dockerfile, re.M)
    assert image, "the build stage is not an official Swift image on Debian 12"
    readme = re.search(r"Swift (\d+\.\d+)", (ROOT / "README.md").read_text())
    assert readme and readme.group(1) == image.group(1), "README and Dockerfile name different Swift versions"
    installed = subprocess.run(["swift", "--version"], capture_output=True, text=True, timeout=60).stdout
    assert re.search(r"Swift version (\d+\.\d+)", installed).group(1) == image.group(1)


@pytest.mark.parametrize("file", COMPOSE_FILES)
def test_only_the_proxy_address_is_trusted_for_forwarded_addresses(file):
    """The host's proxy reaches a published port through the network's gateway: that one address, fixed by the
    compose file's own network, is the only one trusted."""
    document = yaml.safe_load((DEPLOY / file).read_text())
    networks = document.get("networks", {})
    for name, service in relay_services(file).items():
        environment = service.get("environment", {})
        if environment.get("BEHIND_PROXY") != "true":
            continue
        trusted = [ipaddress.ip_network(cidr.strip()) for cidr in environment["TRUSTED_PROXIES"].split(",")]
        assert all(network.num_addresses == 1 for network in trusted), (file, name, trusted)
        attached = service.get("networks", [])
        gateways = {ipaddress.ip_network(config["gateway"]) for net in attached
                    for config in networks[net]["ipam"]["config"]}
        assert set(trusted) <= gateways, (file, name, trusted, gateways)


@pytest.mark.parametrize("file", COMPOSE_FILES)
def test_every_relay_service_has_a_health_check_that_fits_its_process(file):
    """The image's HEALTHCHECK asks ingest's readiness (serve, ingest); a deliverer serves none there, so its
    service asks delivery's readiness (`healthcheck --delivery`) instead of going without a health check."""
    for name, service in relay_services(file).items():
        command = service.get("command", ["serve"])
        check = service.get("healthcheck", {})
        assert not check.get("disable"), f"{file}: {name} has its health check disabled"
        if command[0] == "deliver":
            assert check.get("test") == ["CMD", "kumapush-relay", "healthcheck", "--delivery"], (file, name, check)
        else:
            assert command[0] in ("serve", "ingest") and "test" not in check, (file, name, "uses the image's")
    assert 'CMD ["kumapush-relay", "healthcheck"]' in (DEPLOY / "Dockerfile").read_text()


# The Swift runtime's libraries: a debug build links them from the toolchain, the image's build links them in
# (--static-swift-stdlib).
SWIFT_RUNTIME = re.compile(r"^lib(swift|Foundation|dispatch|BlocksRuntime|_)")
TOOLS_ENV = {"LC_ALL": "C", "PATH": "/usr/bin:/bin"}


def debian_package_of(library):
    """The Debian package that installed `library` (a path ldd printed), without its architecture. Debian 12 merged
    /lib into /usr/lib, and dpkg knows each file under one of the two names."""
    resolved = str(pathlib.Path(library).resolve())
    candidates = [library, resolved]
    for path in (library, resolved):
        if path.startswith("/lib/"):
            candidates.append("/usr" + path)
        elif path.startswith("/usr/lib/"):
            candidates.append(path[len("/usr"):])
    for candidate in candidates:
        found = subprocess.run(["dpkg", "-S", candidate], capture_output=True, text=True, timeout=30, env=TOOLS_ENV)
        if found.returncode == 0:
            return found.stdout.split(":")[0]
    raise AssertionError(f"no Debian package owns {library}")


def test_the_image_installs_every_library_the_binary_loads(relay_binary):
    """The runtime stage installs the package of each shared library the binary links directly. The Swift runtime
    is linked into the image's build (--static-swift-stdlib); libc6, libgcc-s1 and libstdc++6 are in every Debian
    image (apt itself needs them). (jemalloc, linked as the binary's malloc, was the first library an image would
    have lacked: the relay would not start.) Package names are Debian 12's, the image's."""
    paths = linked_libraries(relay_binary)
    if not pathlib.Path("/etc/debian_version").read_text().startswith("12"):
        pytest.skip("the image is Debian 12's, and so are the package names compared")
    dynamic = subprocess.run(["readelf", "-d", str(relay_binary)], capture_output=True, text=True, check=True,
                             timeout=60, env=TOOLS_ENV)
    direct = set(re.findall(r"\(NEEDED\)\s+Shared library: \[(\S+)\]", dynamic.stdout))
    assert direct, dynamic.stdout
    needed = {debian_package_of(paths[name]) for name in direct if name in paths and not SWIFT_RUNTIME.match(name)}
    runtime_stage = (DEPLOY / "Dockerfile").read_text().split("\nFROM ")[2]
    listed = re.search(r"apt-get install -y --no-install-recommends \\\n(.*?)&&", runtime_stage, re.S)
    installed = set(listed.group(1).split()) | {"libc6", "libgcc-s1", "libstdc++6"}
    assert {"libjemalloc2", "libsqlite3-0", "libnghttp2-14"} <= needed, needed
    assert needed <= installed, sorted(needed - installed)
