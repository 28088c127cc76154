"""The relay on PostgreSQL (DATABASE_URL): several processes sharing one database with SQLite's guarantees."""
import concurrent.futures
import pathlib
import subprocess
import signal
import threading

import pytest

from postgres_server import PostgresServer
from relayproc import request, wait_until
from test_delivery import alert, assert_accepted_in_order, devices_sent_two_at_once, register, token


@pytest.fixture(scope="module")
def postgres():
    server = PostgresServer().start()
    yield server
    server.stop()


def test_stats_and_a_wrong_url_name_the_variable_never_the_password(relay, database):
    _, url = database
    assert relay("migrate", env={"DATABASE_URL": url}).returncode == 0
    result = relay("stats", "--json", env={"DATABASE_URL": url})
    assert result.returncode == 0, result.stderr
    assert '"devices":0' in result.stdout.replace(" ", "")

    unreachable = "postgresql://relay:hunter2@127.0.0.1:1/kumapush?connect_timeout=2"
    result = relay("stats", env={"DATABASE_URL": unreachable})
    assert result.returncode == 1
    assert "DATABASE_URL" in result.stderr and "hunter2" not in result.stderr


def test_admin_commands_never_create_the_relays_schema(relay, database, postgres):
    """As on SQLite (test_admin_commands.py): an admin command pointed at a database that holds no relay (a mistyped
    DATABASE_URL) is exit 2 naming it. Before, it created the relay's tables there and reported an empty relay."""
    name, url = database
    for command in (["stats"], ["replay"], ["device", "show", "AAAAAAAAAAAAAA"], ["dead-letters", "list"]):
        result = relay(*command, env={"DATABASE_URL": url})
        assert result.returncode == 2, (command, result.stderr)
        assert "DATABASE_URL" in result.stderr and "never create" in result.stderr, result.stderr
    assert postgres.query(name, "SELECT count(*) FROM pg_tables WHERE schemaname = 'public'") == [["0"]]
    assert relay("migrate", env={"DATABASE_URL": url}).returncode == 0
    assert relay("stats", env={"DATABASE_URL": url}).returncode == 0


def test_serve_on_postgres_delivers_and_replay_and_stats_work(relays, relay, fake_apns, database):
    """The single-process setup on PostgreSQL, and the operator commands against the same database."""
    _, url = database
    serve = relays("serve", DATABASE_URL=url, DEVICE_BURST="off")
    good, _ = register(serve, 9100)
    bad, _ = register(serve, 9101)
    fake_apns.by_token[token(9101)] = (400, "BadDeviceToken")
    for device in (good, bad):
        status, body, _ = request("POST", f"{serve.base}/wh/{device}", alert(1, "M", 0, "down"))
        assert status == 202, body
    wait_until(lambda: fake_apns.bodies(token(9100)) == ["down"], what="the push on serve")
    wait_until(lambda: fake_apns.count(400) == 1, what="the rejection")
    wait_until(lambda: '"BadDeviceToken":1' in relay("stats", "--json", env={"DATABASE_URL": url}).stdout.replace(" ", ""),
               what="the dead letter in stats")
    del fake_apns.by_token[token(9101)]
    result = relay("replay", "--reason", "BadDeviceToken", env={"DATABASE_URL": url})
    assert result.returncode == 0, result.stderr
    wait_until(lambda: fake_apns.bodies(token(9101)) == ["down"], what="the replayed push")

def test_ingest_and_two_deliverers_on_postgres_deliver_every_acknowledged_webhook_in_order(relays, fake_apns, postgres, database):
    """1 ingest + 2 deliver processes on one PostgreSQL database; 4,000 webhooks over 200 devices; one deliverer is
    killed with SIGKILL midway. Every acknowledged webhook reaches APNs and each device's pushes arrive in order."""
    name, url = database
    ingest = relays("ingest", DATABASE_URL=url, RATE_LIMIT_WEBHOOK="off", RATE_LIMIT_REGISTER="off")
    # Digests would merge each device's alerts; this test is about order across processes, so each alert is a push.
    first = relays("deliver", DATABASE_URL=url, LEASE_TIMEOUT="4s", APNS_REQUEST_TIMEOUT="1500ms", DEVICE_BURST="off")
    relays("deliver", DATABASE_URL=url, LEASE_TIMEOUT="4s", APNS_REQUEST_TIMEOUT="1500ms", DEVICE_BURST="off")
    devices = [register(ingest, 5000 + n)[0] for n in range(200)]
    accepted = {}
    killed = threading.Event()

    def post_all(worker):
        for n in range(20):
            for index in range(worker, 200, 8):
                status, body, _ = request("POST", f"{ingest.base}/wh/{devices[index]}", alert(index, "M", n % 2, f"{n}"))
                assert status == 202, body
                accepted[body["id"]] = (index, n)
                if len(accepted) >= 2000 and not killed.is_set():
                    killed.set()
                    first.signal(signal.SIGKILL)

    with concurrent.futures.ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(post_all, range(8)))
    assert len(accepted) == 4000 and killed.is_set()

    # At least once: the killed process's in-flight pushes may arrive twice, so wait for every id, not a count.
    def delivered_ids():
        return {p["headers"]["apns-id"] for p in fake_apns.pushes(status=200)}
    wait_until(lambda: set(accepted) <= delivered_ids(), timeout=120, what="every acknowledged webhook to be delivered")
    for index in range(200):
        assert_accepted_in_order(fake_apns, 5000 + index, [str(n) for n in range(20)], f"device {index}")
    assert postgres.query(name, "SELECT count(*) FROM jobs WHERE state <> 'discarded'") == [["0"]]


DEVICES, ALERTS = 2000, 10  # issue #15: 20,000 webhooks over 2,000 devices


def test_two_ingests_and_three_deliverers_with_an_ingest_and_a_deliverer_killed_keep_every_acknowledged_webhook_in_order(
        relays, fake_apns, postgres, database):
    """Several hosts on one machine: 2 ingest and 3 deliver processes on one database; 20,000 webhooks over 2,000
    devices, each device's alerts alternating between the two ingests; midway one deliverer is SIGKILLed and one
    ingest is SIGKILLed and started again on its port. Every acknowledged webhook is delivered, each device's
    pushes arrive in the order they were acknowledged (a webhook whose ingest died before answering is sent again
    to the other, and may arrive twice: at least once), and APNs never holds two requests for one device at once."""
    name, url = database
    settings = dict(DATABASE_URL=url, RATE_LIMIT_WEBHOOK="off", RATE_LIMIT_REGISTER="off", RATE_LIMIT_WEBHOOK_IP="off")
    ingests = [relays("ingest", **settings), relays("ingest", **settings)]
    deliverers = [relays("deliver", DATABASE_URL=url, LEASE_TIMEOUT="4s", APNS_REQUEST_TIMEOUT="1500ms", DEVICE_BURST="off")
                  for _ in range(3)]
    with concurrent.futures.ThreadPoolExecutor(max_workers=8) as pool:
        devices = [ids[0] for ids in pool.map(lambda n: register(ingests[n % 2], 20_000 + n), range(DEVICES))]
    accepted = {}
    lock = threading.Lock()
    killed = threading.Event()

    def post_all(worker):
        for n in range(ALERTS):
            for index in range(worker, DEVICES, 8):
                target = (n + index) % 2
                while True:
                    try:
                        status, body, _ = request("POST", f"{ingests[target].base}/wh/{devices[index]}",
                                                  alert(index, "M", n % 2, f"{n}"), timeout=5)
                    except OSError:
                        target = 1 - target  # that ingest is gone: the other one takes the webhook
                        continue
                    if status == 202:
                        break
                    assert status == 503, body
                with lock:
                    accepted[body["id"]] = (index, n)
                    if len(accepted) >= DEVICES * ALERTS // 2 and not killed.is_set():
                        killed.set()
                        deliverers[0].signal(signal.SIGKILL)
                        ingests[1].signal(signal.SIGKILL)
                        ingests[1] = relays("ingest", PORT=ingests[1].port, **settings)

    with concurrent.futures.ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(post_all, range(8)))
    assert len(accepted) == DEVICES * ALERTS and killed.is_set()

    def delivered_ids():
        return {p["headers"]["apns-id"] for p in fake_apns.pushes(status=200)}
    wait_until(lambda: set(accepted) <= delivered_ids(), timeout=300, what="every acknowledged webhook to be delivered")
    for index in range(DEVICES):
        assert_accepted_in_order(fake_apns, 20_000 + index, [str(n) for n in range(ALERTS)], f"device {index}")
    assert len({r["token"] for r in fake_apns.requests if r["status"] == 200}) == DEVICES  # the check below sees them all
    overlapping = devices_sent_two_at_once(fake_apns.requests)
    assert not overlapping, "a device had two requests open at APNs at once: " + repr(
        [r for r in fake_apns.requests if r["token"] in overlapping])
    assert postgres.query(name, "SELECT count(*) FROM jobs WHERE state <> 'discarded'") == [["0"]]


def test_while_postgres_is_down_ingest_answers_503_and_recovers_without_a_restart(relays, fake_apns, postgres, database):
    """PostgreSQL restarted under the relay: every webhook answered 202 while it was up is delivered, those sent
    while it was down get 503 (never a false 202), and both processes carry on once it is back."""
    name, url = database
    ingest = relays("ingest", DATABASE_URL=url, RATE_LIMIT_WEBHOOK="off", RATE_LIMIT_REGISTER="off")
    relays("deliver", DATABASE_URL=url, DEVICE_BURST="off")
    device, _ = register(ingest, 7000)
    accepted, refused = [], 0

    def post(n):
        status, body, _ = request("POST", f"{ingest.base}/wh/{device}", alert(1, "M", n % 2, f"{n}"))
        assert status in (202, 503), (status, body)
        if status == 202:
            accepted.append(body["id"])
        return status

    for n in range(20):
        assert post(n) == 202
    postgres.stop_server()
    try:
        statuses = [post(n) for n in range(20, 40)]
        assert statuses.count(503) == 20, statuses
        status, _, _ = request("GET", f"{ingest.base}/health")
        assert status == 503
    finally:
        postgres.start_server()
    wait_until(lambda: post(40) == 202, timeout=30, what="ingest to accept webhooks again")

    def delivered_ids():
        return {p["headers"]["apns-id"] for p in fake_apns.pushes(status=200)}
    wait_until(lambda: set(accepted) <= delivered_ids(), timeout=60, what="every acknowledged webhook to be delivered")
    assert len(accepted) == 21


def test_after_a_failover_ingest_leaves_the_old_primary_that_turned_read_only(relays, postgres, database):
    """A failover that fences the old primary read-only instead of stopping it: ingest's connection to it stays
    up, and every write on it is refused (SQLSTATE 25006). With DATABASE_URL naming both servers and
    `target_session_attrs=read-write`, ingest must replace that connection and reach the new primary, not answer 503
    until someone restarts it — and its reads must follow, or the app's calls would read the old server's frozen data."""
    name, _ = database
    promoted = PostgresServer().start()
    try:
        url = (f"postgresql:///{name}?host={postgres.directory},{promoted.directory}&user=postgres"
               "&target_session_attrs=read-write")
        ingest = relays("ingest", DATABASE_URL=url, RATE_LIMIT_WEBHOOK="off", RATE_LIMIT_REGISTER="off")
        device, _ = register(ingest, 9500)
        status, body, _ = request("POST", f"{ingest.base}/wh/{device}", alert(1, "M", 0, "before"))
        assert status == 202, body
        # The new primary holds what the old one had (replication's part, done here by a copy).
        promoted.query("postgres", f"CREATE DATABASE {name}")
        dump = subprocess.run([f"{postgres.bin}/pg_dump", postgres.conninfo(name)], check=True, capture_output=True)
        subprocess.run([f"{promoted.bin}/psql", promoted.conninfo(name), "-Xq", "-v", "ON_ERROR_STOP=1"], input=dump.stdout,
                       check=True, capture_output=True)
        assert promoted.query(name, "SELECT count(*) FROM jobs") == [["1"]]
        postgres.query("postgres", "ALTER SYSTEM SET default_transaction_read_only = on")
        postgres.query("postgres", "SELECT pg_reload_conf()")
        wait_until(lambda: postgres.query("postgres", "SHOW default_transaction_read_only") == [["on"]],
                   what="the old primary to refuse writes")
        accepted = []

        def posted_to_the_new_primary():
            status, body, _ = request("POST", f"{ingest.base}/wh/{device}", alert(1, "M", 0, "after"))
            assert status in (202, 503), (status, body)
            if status == 202:
                accepted.append(body["id"])
            return [[accepted[-1]]] == promoted.query(name, f"SELECT public_id FROM jobs WHERE public_id = '{accepted[-1]}'") \
                if status == 202 else False
        wait_until(posted_to_the_new_primary, timeout=15, what="a webhook to be stored on the new primary")
        # Reads follow: the old primary still answers them, with frozen data (a device registered now is not there).
        registered, auth = register(ingest, 9501)
        status, body, _ = request("GET", f"{ingest.base}/devices/{registered}", headers={"Authorization": f"Bearer {auth}"})
        assert status == 200, (status, body)
    finally:
        writable = postgres.conninfo("postgres") + " options='-c default_transaction_read_only=off'"
        subprocess.run([f"{postgres.bin}/psql", writable, "-Xq", "-c", "ALTER SYSTEM RESET default_transaction_read_only"],
                       check=True, capture_output=True)
        postgres.query("postgres", "SELECT pg_reload_conf()")
        promoted.stop()


def test_migrate_store_moves_a_sqlite_relay_to_postgres_and_its_webhook_urls_keep_working(relays, relay_binary, fake_apns,
                                                                                          postgres, database, tmp_path):
    """A single-host relay's queue (accepted while no deliverer ran) moves to PostgreSQL with `migrate-store`; a
    second run moves nothing more; on PostgreSQL the old webhook URLs still work and every push goes out in order."""
    name, url = database
    sqlite_ingest = relays("ingest", RATE_LIMIT_WEBHOOK="off")
    devices = [register(sqlite_ingest, 8000 + n)[0] for n in range(3)]
    for n in range(5):
        for index, device in enumerate(devices):
            status, body, _ = request("POST", f"{sqlite_ingest.base}/wh/{device}", alert(index, "M", n % 2, f"{n}"))
            assert status == 202, body
    sqlite_ingest.stop()

    def migrate():
        return subprocess.run([str(relay_binary), "migrate-store", "--from", str(tmp_path / "relay.db"), "--to", url],
                              capture_output=True, text=True, timeout=60)
    first = migrate()
    assert first.returncode == 0, first.stderr
    assert first.stdout.startswith("moved 3 devices (0 already there), 0 tombstones, 15 jobs"), first.stdout
    # The moved tables have statistics at once, taken with every job in: by ANALYZE (autovacuum's would set
    # last_autoanalyze), after the last job went in (15 rows).
    assert postgres.query(name, "SELECT relname FROM pg_stat_user_tables WHERE last_analyze IS NOT NULL "
                                "AND relname IN ('devices', 'jobs', 'monitor_states', 'tombstones') ORDER BY relname") \
        == [["devices"], ["jobs"], ["monitor_states"], ["tombstones"]]
    assert postgres.query(name, "SELECT reltuples::integer FROM pg_class WHERE relname = 'jobs'") == [["15"]]
    again = migrate()
    assert again.returncode == 0 and again.stdout.startswith("moved 0 devices (3 already there), 0 tombstones, 0 jobs"), again.stdout
    assert postgres.query(name, "SELECT count(*) FROM jobs") == [["15"]]
    # Each device's live jobs, which DEVICE_QUEUE_MAX reads, are counted for the moved jobs too.
    assert postgres.query(name, "SELECT sum(live_jobs), count(*) FILTER (WHERE live_jobs <> (SELECT count(*) FROM jobs j "
                                "WHERE j.device_id = devices.id AND j.state <> 'discarded')) FROM devices") == [["15", "0"]]

    ingest = relays("ingest", DATABASE_URL=url, RATE_LIMIT_WEBHOOK="off")
    relays("deliver", DATABASE_URL=url, DEVICE_BURST="off")
    for index, device in enumerate(devices):
        status, body, _ = request("POST", f"{ingest.base}/wh/{device}", alert(index, "M", 1, "5"))
        assert status == 202, body
    for index in range(3):
        wait_until(lambda: fake_apns.bodies(token(8000 + index)) == [str(n) for n in range(6)], timeout=30,
                   what=f"device {index}'s pushes in order")


def test_a_deliverer_keeps_apns_answers_while_postgres_is_down_and_records_them_when_it_returns(
        relays, fake_apns, postgres, database):
    """PostgreSQL goes away while a push is in flight: the deliverer keeps APNs' answer and records it once the
    database is back, so the push is not sent a second time when its lease would have expired."""
    name, url = database
    # The fake parks the push unanswered until PostgreSQL is down (before: the relay's simulator answered after 1.5 s
    # and the test had to stop PostgreSQL inside that window by spawning pg_ctl). The request timeout is far above
    # how long that stop takes, and the lease above the timeout, as the relay requires.
    fake_apns.hold = True
    ingest = relays("ingest", DATABASE_URL=url)
    deliver = relays("deliver", DATABASE_URL=url, LEASE_TIMEOUT="90s", APNS_REQUEST_TIMEOUT="60s", DEVICE_BURST="off")
    device, _ = register(ingest, 9000)
    status, body, _ = request("POST", f"{ingest.base}/wh/{device}", alert(1, "M", 0, "down"))
    assert status == 202, body
    wait_until(lambda: fake_apns.held(), what="the push to be in flight")
    assert postgres.query(name, "SELECT state FROM jobs") == [["running"]]
    postgres.stop_server()
    try:
        fake_apns.release()
        log = pathlib.Path(deliver.log.name)
        wait_until(lambda: b"kept until the database answers" in log.read_bytes(), timeout=20,
                   what="the deliverer to keep APNs' answer")
    finally:
        postgres.start_server()
    wait_until(lambda: postgres.query(name, "SELECT count(*) FROM jobs") == [["0"]], timeout=30,
               what="the kept answer to be recorded")
    assert [r["status"] for r in fake_apns.requests if r["token"] == token(9000)] == [200], "the push went out once"


def test_healthcheck_fails_while_the_database_is_down(relays, relay, postgres, database):
    """The unhealthy relay itself, not a stand-in: PostgreSQL stopped under a running ingest makes /health and /readyz 503 and
    `healthcheck` exit 1, so a container orchestrator sees it; back to 0 once PostgreSQL returns. A deliverer's
    /readyz on METRICS_ADDR says `database unavailable` too (it can send nothing), while its /livez stays 200: its
    loop still turns, so restarting it would not help."""
    _, url = database
    ingest = relays("ingest", DATABASE_URL=url)
    deliver = relays("deliver", DATABASE_URL=url)
    deliver_probe = f"http://{deliver.env['METRICS_ADDR']}"
    check = {"PORT": ingest.env["PORT"], "HOST": "127.0.0.1", "DATABASE_URL": url}
    assert relay("healthcheck", env=check).returncode == 0
    assert request("GET", deliver_probe + "/readyz")[:2] == (200, {"status": "ok"})
    postgres.stop_server()
    try:
        wait_until(lambda: request("GET", f"{ingest.base}/health")[0] == 503, what="/health to answer 503")
        result = relay("healthcheck", env=check)
        assert result.returncode == 1 and "/readyz answered 503" in result.stderr, result.stderr
        wait_until(lambda: request("GET", deliver_probe + "/readyz")[:2] == (503, {"error": "database unavailable"}),
                   timeout=30, what="the deliverer's /readyz to say the database is unavailable")
        assert request("GET", deliver_probe + "/livez")[:2] == (200, {"status": "ok"})
    finally:
        postgres.start_server()
    wait_until(lambda: relay("healthcheck", env=check).returncode == 0, timeout=30, what="healthy again")
    wait_until(lambda: request("GET", deliver_probe + "/readyz")[0] == 200, timeout=30, what="the deliverer ready again")
