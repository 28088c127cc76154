"""Delivered notification text leaves the disk: not only the row (secure_delete) but every copy SQLite kept of it in
the write-ahead log, which the relay truncates when writes pause and at least every WAL_TRUNCATE_INTERVAL."""
import uuid

from relayproc import request, wait_until
from test_delivery import alert, register, token


def files_holding(tmp_path, needle):
    found = []
    for suffix in ("", "-wal", "-shm"):
        path = tmp_path / f"relay.db{suffix}"
        if path.exists() and needle in path.read_bytes():
            found.append(path.name)
    return found


def test_a_delivered_push_text_is_in_no_database_file_after_the_truncation_interval(relays, fake_apns, tmp_path):
    relay = relays("serve", WAL_TRUNCATE_INTERVAL="2s")
    device_id, _ = register(relay, 900)
    secret = f"secret-{uuid.uuid4().hex}"
    assert request("POST", f"{relay.base}/wh/{device_id}", alert(1, "DB", 0, secret))[0] == 202
    wait_until(lambda: fake_apns.bodies(token(900)) == [secret], what="the push")
    wait_until(lambda: not files_holding(tmp_path, secret.encode()), timeout=10,
               what="the delivered text to leave relay.db, -wal and -shm")
