"""Settings that contradict each other stop start-up with exit 2 and a message naming them (SPEC §5, §6)."""


def test_a_lease_shorter_than_the_apns_request_timeout_stops_every_command(relay):
    for command in ["serve", "deliver", "ingest"]:
        result = relay(command, env={"LEASE_TIMEOUT": "20s"})
        assert result.returncode == 2, (command, result.stderr)
        assert "LEASE_TIMEOUT" in result.stderr and "APNS_REQUEST_TIMEOUT" in result.stderr, result.stderr
