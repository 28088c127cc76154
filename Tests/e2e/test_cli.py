"""The command line as an operator meets it: help, version, exit codes, stats and replay on a real database."""
import json
import os
import re
import sqlite3
import subprocess

from conftest import linked_libraries


def test_help_lists_every_command(relay):
    result = relay("--help")
    assert result.returncode == 0
    for command in ["serve", "ingest", "deliver", "replay", "stats", "device", "dead-letters", "migrate", "apns-sim",
                    "healthcheck", "version"]:
        assert f"  {command} " in result.stdout


def test_no_arguments_is_a_usage_error(relay):
    assert relay().returncode == 2


def test_unknown_command_is_a_usage_error(relay):
    result = relay("frobnicate")
    assert result.returncode == 2
    assert "unknown command" in result.stderr


def test_version_names_the_linked_libraries(relay):
    result = relay("version")
    assert result.returncode == 0
    for library in ["SQLite", "OpenSSL", "libmicrohttpd", "libnghttp2"]:
        assert library in result.stdout
    # The malloc this process really calls: jemalloc's, with the options in force read back from it (those the
    # binary sets in Sources/CAllocator); jemalloc complains on stderr of an option it does not know.
    assert re.search(r"^  malloc +jemalloc 5\.\S+ \(narenas:1,tcache_max:4096,dirty_decay_ms:1000\)$", result.stdout, re.M), result.stdout
    assert result.stderr == ""


def test_version_shows_the_allocator_options_malloc_conf_overrides(relay):
    result = relay("version", env={"MALLOC_CONF": "narenas:2"})
    assert result.returncode == 0 and result.stderr == "", result.stderr
    assert re.search(r"^  malloc +jemalloc 5\.\S+ \(narenas:2,tcache_max:4096,dirty_decay_ms:1000\)$", result.stdout, re.M), result.stdout


def test_version_names_the_malloc_the_process_really_got(relay, relay_binary):
    """glibc's libc preloaded comes first in the lookup order, so the process's malloc is glibc's although jemalloc
    is linked: the line says so, rather than what the build meant."""
    result = relay("version", env={"LD_PRELOAD": linked_libraries(relay_binary)["libc.so.6"]})
    assert result.returncode == 0, result.stderr
    assert re.search(r"^  malloc +libc\.so\.6$", result.stdout, re.M), result.stdout


def test_invalid_setting_exits_2_naming_the_variable(relay):
    result = relay("stats", env={"JOB_TTL": "forever"})
    assert result.returncode == 2
    assert "JOB_TTL" in result.stderr


def test_invalid_flag_value_exits_2_naming_the_variable(relay):
    result = relay("stats", "--queue-max", "lots")
    assert result.returncode == 2
    assert "QUEUE_MAX" in result.stderr


def test_migrate_creates_the_database_and_stats_reports_an_empty_queue(relay):
    assert not (relay.tmp_path / "relay.db").exists()
    assert relay("stats").returncode == 2, "an admin command never creates a database"
    result = relay("migrate")
    schema = re.search(r"\(database schema (\d+)\)", relay("version").stdout).group(1)
    assert result.returncode == 0 and result.stdout == f"database at schema version {schema}\n", (result.stdout, result.stderr)
    result = relay("stats", "--json")
    assert result.returncode == 0, result.stderr
    stats = json.loads(result.stdout)
    assert stats["devices"] == 0
    assert stats["jobs"] == {"pending": 0, "available": 0, "running": 0, "retryable": 0, "discarded": 0}
    assert stats["oldest_job_age_seconds"] is None


def test_a_foreign_database_stops_startup_with_exit_2(relay):
    path = relay.tmp_path / "foreign.db"
    with sqlite3.connect(path) as connection:
        connection.execute("CREATE TABLE customers (id INTEGER PRIMARY KEY)")
    result = relay("stats", env={"DATABASE_PATH": str(path)})
    assert result.returncode == 2
    assert "DATABASE_PATH" in result.stderr and "not a KumaPush relay database" in result.stderr


def test_a_database_from_a_newer_binary_stops_startup_with_exit_2(relay):
    assert relay("migrate").returncode == 0
    with sqlite3.connect(relay.tmp_path / "relay.db") as connection:
        connection.execute("INSERT INTO schema_migrations (version, name, applied_at) VALUES (9999, 'future', 0)")
    result = relay("stats")
    assert result.returncode == 2
    assert "newer" in result.stderr


def _plant_dead_letters(path, reasons):
    """Dead letters as the deliverer leaves them, written with Python's own sqlite3 (an independent writer)."""
    with sqlite3.connect(path) as connection:
        for index, reason in enumerate(reasons):
            device = f"device{index:08d}"[:14]
            connection.execute("INSERT INTO devices (id, device_token, date_added) VALUES (?, ?, 0)",
                               (device, f"{index:064x}"))
            connection.execute(
                "INSERT INTO jobs (public_id, device_id, device_seq, state, payload, created_at, scheduled_at,"
                " expires_at, finalized_at, last_error) VALUES (?, ?, 0, 'discarded', x'00', 0, 0, 0, 1, ?)",
                (f"job-{index}", device, reason))


def test_replay_requeues_dead_letters_by_reason_and_reports_them(relay):
    assert relay("migrate").returncode == 0
    _plant_dead_letters(relay.tmp_path / "relay.db", ["BadDeviceToken"] * 3 + ["Expired"] * 2)

    dry = relay("replay", "--reason", "BadDeviceToken", "--dry-run")
    assert dry.returncode == 0 and "3 dead letters would be replayed" in dry.stdout

    result = relay("replay", "--reason", "BadDeviceToken")
    assert result.returncode == 0, result.stderr
    assert "replayed 3 dead letters" in result.stdout
    stats = json.loads(relay("stats", "--json").stdout)
    assert stats["jobs"]["available"] == 3
    assert stats["dead_letters_by_reason"] == {"Expired": 2}


def test_replay_rejects_a_bad_since(relay):
    result = relay("replay", "--since", "yesterday")
    assert result.returncode == 2
    assert "--since" in result.stderr


def test_healthcheck_exits_0_only_while_readiness_answers_200(relay, relay_binary, tmp_path):
    """Docker's HEALTHCHECK and systemd run `kumapush-relay healthcheck`: 0 while /readyz answers 200, non-zero when
    it answers anything else or nothing listens (before, no test ran the command at all)."""
    import http.server
    import threading

    from relayproc import Relay, free_port, relay_env

    env = relay_env(tmp_path)
    ingest = Relay(relay_binary, "ingest", env, tmp_path / "ingest.log").wait_healthy()
    try:
        healthy = relay("healthcheck", env={"PORT": env["PORT"], "HOST": "127.0.0.1"})
        assert healthy.returncode == 0, healthy.stderr
    finally:
        ingest.stop()
    gone = relay("healthcheck", env={"PORT": env["PORT"], "HOST": "127.0.0.1"})
    assert gone.returncode == 1 and "healthcheck failed: cannot connect" in gone.stderr, gone.stderr

    class Unhealthy(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - the name http.server calls
            self.send_response(503 if self.path in ("/readyz", "/health") else 404)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args):
            pass

    port = free_port()
    server = http.server.ThreadingHTTPServer(("127.0.0.1", port), Unhealthy)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        sick = relay("healthcheck", env={"PORT": str(port), "HOST": "127.0.0.1"})
        assert sick.returncode == 1 and "/readyz answered 503" in sick.stderr, sick.stderr
    finally:
        server.shutdown()
        thread.join(10)


def test_healthcheck_asks_the_port_and_base_path_it_is_given(relay, relay_binary, tmp_path):
    """Under socket activation the relay listens where its .socket unit says, and HOST/PORT are ignored: a unit's
    health check must be able to ask that address (`--port`, `--base-path`: the setting flags every command takes)
    whatever the environment's PORT and BASE_PATH say."""
    from relayproc import Relay, free_port, relay_env

    env = relay_env(tmp_path, BASE_PATH="/relay")
    ingest = Relay(relay_binary, "ingest", env, tmp_path / "ingest.log").wait_healthy()
    elsewhere = {"PORT": str(free_port()), "HOST": "127.0.0.1", "BASE_PATH": ""}
    try:
        asked = relay("healthcheck", "--port", env["PORT"], "--base-path", "/relay/", env=elsewhere)
        assert asked.returncode == 0, asked.stderr
        default = relay("healthcheck", env=elsewhere)
        assert default.returncode == 1 and "cannot connect" in default.stderr, default.stderr
        wrong_path = relay("healthcheck", f"--port={env['PORT']}", env=elsewhere)
        assert wrong_path.returncode == 1 and "/readyz answered 404" in wrong_path.stderr, wrong_path.stderr
    finally:
        ingest.stop()
    for bad in (["--port", "0"], ["--port", "http"], ["--base-path", "relay"]):
        result = relay("healthcheck", *bad, env=elsewhere)
        assert result.returncode == 2, (bad, result.returncode, result.stderr)


def test_metrics_on_the_api_port_stops_startup_with_exit_2(relay):
    """Both listeners bind with SO_REUSEPORT, so METRICS_ADDR on PORT's port was accepted and the kernel split the
    API's connections between them: part of the device calls were answered 404 by the metrics listener."""
    from relayproc import free_port
    port = free_port()
    for command, host in (("serve", "127.0.0.1"), ("ingest", "0.0.0.0")):
        result = relay(command, env={"PORT": str(port), "HOST": host, "METRICS_ADDR": f"127.0.0.1:{port}",
                                     "APNS_AUTH_KEY_PATH": "/nonexistent", "APNS_KEY_ID": "K", "APNS_TEAM_ID": "T",
                                     "APP_BUNDLE_IDENTIFIER": "b"})
        assert result.returncode == 2, (command, result.stderr)
        assert "METRICS_ADDR" in result.stderr and f"PORT {port}" in result.stderr, result.stderr


def test_the_env_file_can_come_on_standard_input(relay_binary, tmp_path):
    """The packaged env file is root's alone, and on SQLite an admin command runs as the relay's user: root's shell
    opens the file and hands it over (`--env-file - < /etc/kumapush/kumapush.env`, the runbook's line). Its settings
    then apply as a named file's would: here the database, which the environment names wrongly."""
    database = tmp_path / "from-stdin.db"
    environment = {"PATH": os.environ.get("PATH", ""), "DATABASE_PATH": str(tmp_path / "missing.db")}
    assert subprocess.run([str(relay_binary), "migrate", "--database-path", str(database)], env=environment,
                          capture_output=True, timeout=60).returncode == 0
    env_file = tmp_path / "kumapush.env"
    env_file.write_text(f"# as /etc/kumapush/kumapush.env\nDATABASE_PATH={database}\n")
    with env_file.open() as stdin:
        result = subprocess.run([str(relay_binary), "stats", "--json", "--env-file", "-"], env=environment, stdin=stdin,
                                capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["devices"] == 0
    result = subprocess.run([str(relay_binary), "stats", "--env-file", "-"], env=environment, input="JOB_TTL\n",
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and "standard input line 1: expected KEY=VALUE" in result.stderr, result.stderr

