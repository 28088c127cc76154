"""Settings that contradict each other stop start-up with exit 2 and a message naming them (SPEC §5, §6)."""


def test_a_lease_shorter_than_the_apns_request_timeout_stops_every_command(relay):
    for command in ["serve", "deliver", "ingest"]:
        result = relay(command, env={"LEASE_TIMEOUT": "20s"})
        assert result.returncode == 2, (command, result.stderr)
        assert "LEASE_TIMEOUT" in result.stderr and "APNS_REQUEST_TIMEOUT" in result.stderr, result.stderr


def _limit_open_files(soft, hard):
    import resource

    def apply():
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    return apply


def test_too_few_open_files_for_http_max_connections_stops_start_up(relay_binary, tmp_path):
    """Issue 13: 10,000 allowed connections under a hard limit of 512 open files would fail with EMFILE under load
    (and starve the database and APNs descriptors); start-up says so instead, naming the setting."""
    import subprocess
    from relayproc import relay_env
    env = relay_env(tmp_path)
    for command in ["ingest", "serve"]:
        result = subprocess.run([str(relay_binary), command], env=env, capture_output=True, text=True, timeout=60,
                                preexec_fn=_limit_open_files(256, 512))
        assert result.returncode == 2, (command, result.stderr)
        assert "HTTP_MAX_CONNECTIONS" in result.stderr and "LimitNOFILE" in result.stderr, result.stderr


def test_a_low_soft_limit_is_raised_to_what_the_settings_need(relay_binary, tmp_path):
    """systemd and shells start with a soft limit of 1,024: the relay raises it (the hard limit allows it)."""
    import resource
    import subprocess
    from relayproc import Relay, relay_env
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    assert hard == resource.RLIM_INFINITY or hard >= 2000 + 128, "this machine's hard limit is too low for the test"
    env = relay_env(tmp_path, HTTP_MAX_CONNECTIONS="2000")
    relay = Relay(relay_binary, "ingest", env, tmp_path / "ingest.log")
    relay.process.kill()
    relay.process.wait()
    relay.process = subprocess.Popen([str(relay_binary), "ingest"], env=env, stdout=relay.log, stderr=relay.log,
                                     preexec_fn=_limit_open_files(1024, hard))
    try:
        relay.wait_healthy()
        soft = [l for l in open(f"/proc/{relay.process.pid}/limits") if l.startswith("Max open files")][0].split()[3]
        assert int(soft) >= 2000 + 128, soft
    finally:
        relay.stop()
