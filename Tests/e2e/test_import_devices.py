"""Moving from the Go relay: its devices table, exported as CSV or JSON, imported with ids, tokens, auth-token
hashes, levels and dates intact, so webhook URLs and app logins keep working."""
import hashlib
import json
import subprocess

import pytest

from relayproc import Relay, relay_env, request

ROWS = [
    # id, token (upper case: the Go relay stored what it was sent), auth token, last success, added, level
    ("V1StGXR8_Z5jdH", "AB" * 32, "old-login-token-1", "2026-09-21 08:30:00.123456+00", "2026-09-20 12:00:00+00", "normal"),
    ("KfI-VXnua6d58Z", "cd" * 40, "old-login-token-2", "", "2026-09-19 07:15:00+02", "time-sensitive"),
]


def hashed(token):
    return hashlib.sha256(token.encode()).hexdigest()


def write_csv(path):
    lines = ["id,device_token,auth_token_hash,last_successful_notification,date_added,down_notification_level"]
    for device_id, token, auth, last, added, level in ROWS:
        lines.append(f'{device_id},{token},{hashed(auth)},{last},"{added}",{level}')
    lines.append("not-an-id,zz,x,,2026-01-01 00:00:00+00,normal")
    # A level the Go relay never wrote (edited by hand): imported at normal, and the row named.
    lines.append(f"Xq3-unknownLvl,{'ef' * 32},{hashed('x')},,2026-01-01 00:00:00+00,critical")
    path.write_text("\n".join(lines) + "\n")


def write_json(path):
    path.write_text(json.dumps([{"id": d, "device_token": t, "auth_token_hash": hashed(a), "last_successful_notification": l or None,
                                 "date_added": ad.replace(" ", "T") + ":00", "down_notification_level": lv}
                                for d, t, a, l, ad, lv in ROWS]))


@pytest.mark.parametrize("kind", ["csv", "json"])
def test_imported_devices_keep_their_urls_logins_levels_and_dates(relay_binary, tmp_path, kind):
    export = tmp_path / f"devices.{kind}"
    (write_csv if kind == "csv" else write_json)(export)
    env = relay_env(tmp_path)
    result = subprocess.run([str(relay_binary), "import-devices", str(export)], env=env, capture_output=True, text=True, timeout=60)
    expected_invalid, expected_imported = (1, 3) if kind == "csv" else (0, 2)
    assert f"imported {expected_imported} devices, 0 already present, {expected_invalid} invalid" in result.stdout, \
        result.stdout + result.stderr
    assert result.returncode == (1 if expected_invalid else 0)
    if kind == "csv":
        assert 'row 4: unknown down_notification_level "critical", imported as normal' in result.stderr, result.stderr

    again = subprocess.run([str(relay_binary), "import-devices", str(export)], env=env, capture_output=True, text=True, timeout=60)
    assert f"imported 0 devices, {expected_imported} already present" in again.stdout
    assert "unknown down_notification_level" not in again.stderr, "a row not imported is not said to be"

    relay = Relay(relay_binary, "ingest", env, tmp_path / "ingest.log").wait_healthy()
    try:
        status, device, _ = request("GET", f"{relay.base}/devices/V1StGXR8_Z5jdH", headers={"Authorization": "Bearer old-login-token-1"})
        assert status == 200
        assert device["device_token"] == "ab" * 32
        assert device["date_added"] == "2026-09-20T12:00:00Z"
        assert device["last_successful_notification"] == "2026-09-21T08:30:00Z"
        status, device, _ = request("GET", f"{relay.base}/devices/KfI-VXnua6d58Z", headers={"Authorization": "Bearer old-login-token-2"})
        assert status == 200 and device["down_notification_level"] == "time-sensitive"
        assert device["date_added"] == "2026-09-19T05:15:00Z" and device["last_successful_notification"] == ""
        assert request("GET", f"{relay.base}/devices/KfI-VXnua6d58Z", headers={"Authorization": "Bearer wrong"})[0] == 401
        # The imported device's webhook URL takes an alert (a real one: a Test message would wait TEST_WAIT for a
        # deliverer this test does not run, and its answer would depend on that).
        status, body, _ = request("POST", f"{relay.base}/wh/V1StGXR8_Z5jdH",
                                  {"heartbeat": {"status": 0, "msg": "timeout"}, "monitor": {"id": 1, "name": "DB"}, "msg": "x"})
        assert status == 202 and body["status"] == "queued" and body["id"], body
    finally:
        relay.stop()


def test_a_dry_run_counts_what_the_import_then_does(relay_binary, tmp_path):
    """`--dry-run` said "would import" for a row whose token another device already had (here in another case, as
    the Go relay stored it) or that an earlier row of the file took, which the import then skipped: the operator
    planned on devices that were not imported."""
    env = relay_env(tmp_path)
    first = tmp_path / "first.csv"
    write_csv(first)
    subprocess.run([str(relay_binary), "import-devices", str(first)], env=env, capture_output=True, text=True, timeout=60)
    header = "id,device_token,auth_token_hash,last_successful_notification,date_added,down_notification_level"
    added = '"2026-01-01 00:00:00+00"'
    second = tmp_path / "second.csv"
    second.write_text("\n".join([
        header,
        f"Token-Taken-01,{'ab' * 32},{hashed('a')},,{added},normal",      # V1StGXR8_Z5jdH's token, in lower case
        f"Brand-New-0001,{'12' * 32},{hashed('b')},,{added},normal",       # imported
        f"Token-Again-01,{'12' * 32},{hashed('c')},,{added},normal",      # the row above took this token
        f"Brand-New-0001,{'34' * 32},{hashed('d')},,{added},normal",       # and this id
        f"KfI-VXnua6d58Z,{'56' * 32},{hashed('e')},,{added},normal",      # an id already in the store
    ]) + "\n")
    dry = subprocess.run([str(relay_binary), "import-devices", str(second), "--dry-run"], env=env, capture_output=True,
                         text=True, timeout=60)
    real = subprocess.run([str(relay_binary), "import-devices", str(second)], env=env, capture_output=True, text=True, timeout=60)
    assert "would import 1 device, 4 already present, 0 invalid" in dry.stdout, dry.stdout + dry.stderr
    assert "imported 1 device, 4 already present, 0 invalid" in real.stdout, real.stdout + real.stderr


def test_a_dry_run_before_the_relay_ever_started_creates_nothing(relay_binary, tmp_path):
    """`--dry-run` on a host where the relay has not run yet opened the store, which created the SQLite file and its
    folder and migrated them: a dry run that changed the disk. It now counts against an empty relay."""
    export = tmp_path / "devices.csv"
    write_csv(export)
    database = tmp_path / "not-yet" / "kumapush.db"
    env = relay_env(tmp_path)
    dry = subprocess.run([str(relay_binary), "import-devices", str(export), "--dry-run", "--database-path", str(database)],
                         env=env, capture_output=True, text=True, timeout=60)
    assert "would import 3 devices, 0 already present, 1 invalid" in dry.stdout, dry.stdout + dry.stderr
    assert f"no database at {database} yet" in dry.stderr, dry.stderr
    assert not database.parent.exists(), sorted(p.name for p in database.parent.iterdir())
