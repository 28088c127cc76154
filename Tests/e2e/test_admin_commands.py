"""The admin commands support uses (SPEC §5) on both stores, run as an operator would: with the units' env file
(`--env-file`), never the database's address on the command line. `device show` and `dead-letters list` answer
"why didn't my alert arrive?" without a notification's content or a full token; `device delete` is a user's
erasure request; `dead-letters purge` deletes; no admin command creates a database."""
import json
import re


from relayproc import request, wait_until

CONTENT = "db-primary unreachable: secret-hostname.internal"


def token(seed):
    return f"{seed:064x}"


def test_support_finds_a_dead_letter_shows_the_device_purges_and_deletes_it(relays, relay, fake_apns, store, tmp_path):
    serve = relays("serve", DEVICE_BURST="off", **store)
    ids = {}
    for seed in (31, 32):
        status, body, _ = request("POST", serve.base + "/devices", {"device_token": token(seed)})
        assert status == 201, body
        ids[seed] = body["id"]
    fake_apns.by_token[token(32)] = (400, "BadDeviceToken")
    alert = json.dumps({"heartbeat": {"status": 0, "msg": CONTENT}, "monitor": {"id": 4, "name": "DB"}, "msg": CONTENT})
    for seed in (31, 32):
        assert request("POST", f"{serve.base}/wh/{ids[seed]}", alert.encode())[0] == 202

    # The units' env file holds the database; the environment points elsewhere, and the file wins.
    env_file = tmp_path / "kumapush.env"
    env_file.write_text("# as /etc/kumapush/kumapush.env\n" + "".join(f"{key}={value}\n" for key, value in store.items()))
    elsewhere = {"DATABASE_PATH": str(tmp_path / "nowhere" / "x.db")}

    def admin(*args):
        result = relay(*args, "--env-file", str(env_file), env=elsewhere)
        assert result.returncode == 0, result.stderr
        assert CONTENT not in result.stdout and token(32) not in result.stdout and token(31) not in result.stdout
        return result.stdout

    letters = wait_until(lambda: json.loads(admin("dead-letters", "list", "--json")), what="the dead letter")
    assert [(letter["device"], letter["reason"], letter["attempts"]) for letter in letters] == [(ids[32], "BadDeviceToken", 1)]
    assert "BadDeviceToken" in admin("dead-letters", "list", "--reason", "BadDeviceToken")
    assert json.loads(admin("dead-letters", "list", "--json", "--reason", "Expired")) == []

    shown = json.loads(admin("device", "show", ids[32], "--json"))
    assert shown["dead_letters_by_reason"] == {"BadDeviceToken": 1}
    assert shown["last_delivery_error"] == "BadDeviceToken" and shown["token_prefix"] == token(32)[:8] + "…"
    good = json.loads(admin("device", "show", ids[31], "--json"))
    wait_until(lambda: json.loads(admin("device", "show", ids[31], "--json"))["last_successful_notification"],
               what="the delivery on the good device")
    assert good["live_jobs"] in (0, 1) and good["dead_letters_by_reason"] == {}

    # The same dead letter on a scrape, by reason (SPEC §2.3), and no job waiting.
    _, metrics, _ = request("GET", f"http://{serve.env['METRICS_ADDR']}/metrics")
    assert 'kumapush_dead_letters{reason="BadDeviceToken"} 1' in metrics.decode().splitlines()
    assert "kumapush_queue_oldest_job_age_seconds 0" in metrics.decode().splitlines()

    # Listed oldest first: past --limit the newer ones are left out, and the command says how many (on stderr).
    assert request("POST", f"{serve.base}/wh/{ids[32]}", alert.encode())[0] == 202
    wait_until(lambda: len(json.loads(admin("dead-letters", "list", "--json"))) == 2, what="a second dead letter")
    cut = relay("dead-letters", "list", "--json", "--limit", "1", "--env-file", str(env_file), env=elsewhere)
    assert len(json.loads(cut.stdout)) == 1 and "1 more match, newer: raise --limit" in cut.stderr, cut.stderr
    whole = relay("dead-letters", "list", "--limit", "2", "--env-file", str(env_file), env=elsewhere)
    assert whole.returncode == 0 and "more match" not in whole.stderr, whole.stderr

    assert "2 dead letters would be deleted" in admin("dead-letters", "purge", "--device", ids[32], "--dry-run")
    assert "deleted 2 dead letters" in admin("dead-letters", "purge", "--device", ids[32])
    assert json.loads(admin("dead-letters", "list", "--json")) == []

    assert "deleted device" in admin("device", "delete", ids[31])
    assert request("POST", f"{serve.base}/wh/{ids[31]}", alert.encode())[:2] == (410, {"error": "device unregistered"})
    removed = json.loads(admin("device", "show", ids[31], "--json"))
    assert removed["removed"]["reason"] == "DeletedByOperator"


def test_admin_commands_never_create_a_database(relay, tmp_path):
    missing = tmp_path / "data" / "kumapush.db"
    for command in (["stats"], ["replay"], ["device", "show", "AAAAAAAAAAAAAA"], ["dead-letters", "list"]):
        result = relay(*command, env={"DATABASE_PATH": str(missing)})
        assert result.returncode == 2, (command, result.stderr)
        assert "DATABASE_PATH" in result.stderr and "never create" in result.stderr
    assert not missing.exists() and not missing.parent.exists()
    assert relay("migrate", env={"DATABASE_PATH": str(missing)}).returncode == 0
    assert relay("stats", env={"DATABASE_PATH": str(missing)}).returncode == 0


def test_the_oldest_waiting_job_s_age_is_scraped(relays, tmp_path):
    """Ingest alone (nothing delivers): the job waits and the gauge reports its age, which grows."""
    ingest = relays("ingest", DATABASE_PATH=str(tmp_path / "relay.db"))
    status, body, _ = request("POST", ingest.base + "/devices", {"device_token": token(33)})
    assert status == 201, body
    assert request("POST", f"{ingest.base}/wh/{body['id']}", b'{"title":"t","body":"b"}')[0] == 202

    def age():
        _, text, _ = request("GET", f"http://{ingest.env['METRICS_ADDR']}/metrics")
        match = re.search(r"^kumapush_queue_oldest_job_age_seconds (\S+)$", text.decode(), re.M)
        return float(match.group(1))

    first = wait_until(lambda: age() or None, what="a positive age")
    wait_until(lambda: age() > first, what="the age to grow")


def test_a_device_whose_id_begins_with_two_dashes_is_shown_and_erased_after_two_dashes(relay, tmp_path):
    """Device ids are drawn from A-Z, a-z, 0-9, `-` and `_`: about one in 4,096 begins with `--`, which every command
    took for an option, so support could neither show nor erase that device. After `--` it is the id."""
    dashed = "--dashedId0123"
    export = tmp_path / "devices.json"
    export.write_text(json.dumps([{"id": dashed, "device_token": token(41), "auth_token_hash": "0" * 64,
                                   "last_successful_notification": None, "date_added": "2026-09-20T12:00:00+00:00",
                                   "down_notification_level": "normal"}]))
    imported = relay("import-devices", str(export))
    assert imported.returncode == 0, imported.stderr

    refused = relay("device", "show", dashed)
    assert refused.returncode == 2 and "goes after --" in refused.stderr
    shown = relay("device", "show", "--json", "--", dashed)
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["id"] == dashed
    deleted = relay("device", "delete", "--", dashed)
    assert deleted.returncode == 0 and "deleted device" in deleted.stdout, deleted.stderr
    assert json.loads(relay("device", "show", "--json", "--", dashed).stdout)["removed"]["reason"] == "DeletedByOperator"
