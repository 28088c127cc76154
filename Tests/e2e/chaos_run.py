"""Runs one chaos schedule against the real binary and the independent APNs fake, then checks the invariants.

The driver is one thread: it performs the schedule's steps in order at their times (the schedule's pace), so the
webhooks of one device are posted one after another and their acceptance order is known. At the end APNs is healed,
and the run waits (conditions with deadlines) for the queue to drain, checks the invariants, replays every dead
letter and checks that they arrive.
"""
import dataclasses
import json
import pathlib
import sqlite3
import subprocess
import time
import urllib.error

import chaos_invariants as invariants
from chaos_schedule import SLOTS, generate
from fake_apns import FakeAPNs
from postgres_server import PostgresServer
from relayproc import Relay, free_port, relay_env, request, wait_until

ROOT = pathlib.Path(__file__).resolve().parents[2]
TLS = ROOT / "Tests" / "Fixtures" / "tls"
TOPIC = "com.example.kumapush"
# "Within seconds", generously, on a shared machine; below STALL_TIMEOUT (30 s), so only the breaker's own ways
# out pass, not the stall detector's reset.
RECOVERY_DEADLINE = 20.0


class ChaosFailure(AssertionError):
    pass


def replay_command(seed, duration=20.0, store="sqlite"):
    make = [f"SEED={seed}"] + ([f"DURATION={duration:g}"] if duration != 20.0 else []) + ([f"STORE={store}"] if store != "sqlite" else [])
    script = [f"--seed {seed}"] + ([f"--duration {duration:g}"] if duration != 20.0 else []) + ([f"--store {store}"] if store != "sqlite" else [])
    return f"make chaos {' '.join(make)}   # or: .venv/bin/python Tests/e2e/chaos.py {' '.join(script)}"


def token(slot):
    """A slot's APNs token: the same for every registration of the slot, as a real phone re-registers."""
    return f"c0ffee{slot:02x}".ljust(64, "0")


@dataclasses.dataclass
class Incarnation:
    """One registration of a slot's device token: a device id, until it is deleted or removed by a 410."""
    slot: int
    number: int
    device_id: str
    auth: str
    deleted: bool = False

    @property
    def key(self):
        return f"{self.slot}.{self.number}"


@dataclasses.dataclass
class Job:
    marker: str
    incarnation: str
    public_id: str = None   # the 202's id; None when the webhook was not acknowledged


class ChaosRun:
    """One seed's run. `store` is "sqlite" (a file in `workdir`) or "postgres" (a fresh database on `postgres`, a
    PostgresServer, or on one the run starts and stops itself)."""

    def __init__(self, seed, binary, workdir, duration=20.0, store="sqlite", postgres=None):
        self.schedule = generate(seed, duration)
        self.duration = duration
        self.store = store
        self.postgres = postgres
        self.own_postgres = False
        self.database = None
        self.binary = pathlib.Path(binary)
        self.workdir = pathlib.Path(workdir)
        self.fake = None
        self.processes = {}
        self.envs = {}
        self.slots = [None] * SLOTS         # the slot's current Incarnation, or None while deleted
        self.incarnations = []
        self.registrations = [0] * SLOTS
        self.jobs = []
        self.posted_at = {}                 # marker -> time.time() just before its webhook was posted
        self.answers = {}                   # webhook status (or "refused") -> count
        self.sequence = 0
        self.canaries = 0
        self.stalls = 0                     # kumapush_delivery_stalls_total, summed over every deliverer's life
        self.violations = []
        self.notes = []                     # what happened, for the failure report

    # -- the run -----------------------------------------------------------------------------------------------

    def run(self):
        try:
            self.start()
            self.drive()
            self.finish()
        except Exception as error:  # noqa: BLE001 - any failure is reported with the seed that replays it
            self.violations.append(f"the run itself failed: {type(error).__name__}: {error}")
        finally:
            self.stop()
        if self.violations:
            raise ChaosFailure(self.report())
        return self.summary()

    def start(self):
        self.fake = FakeAPNs(str(TLS / "server.pem"), str(TLS / "server.key"), str(TLS / "apns-key.pub.pem"), TOPIC).start()
        store = {}
        if self.store == "postgres":
            if self.postgres is None:
                self.postgres, self.own_postgres = PostgresServer().start(), True
            self.database = self.postgres.create_database()
            store["DATABASE_URL"] = self.postgres.url(self.database)
        public_port = free_port()
        for name in self.schedule.processes:
            command = name.split("-")[0]
            env = relay_env(self.workdir, APNS_URL=f"https://127.0.0.1:{self.fake.port}", APNS_CA_FILE=TLS / "ca.pem",
                            APNS_AUTH_KEY_PATH=TLS / "apns-key.p8", APNS_KEY_ID="KEY1234567", APNS_TEAM_ID="TEAM123456",
                            APP_BUNDLE_IDENTIFIER=TOPIC, DEVICE_BURST="off", RATE_LIMIT_REGISTER="off",
                            RATE_LIMIT_WEBHOOK="off", RATE_LIMIT_WEBHOOK_FAILED="off", LOG_LEVEL="info",
                            **store, **self.schedule.settings)
            env["PORT"] = str(public_port if command != "deliver" else free_port())
            self.envs[name] = env
            self.start_process(name)
        self.base = f"http://127.0.0.1:{public_port}"
        for slot in range(SLOTS):
            self.register(slot)

    def drive(self):
        began = time.monotonic()
        for step in self.schedule.steps:
            delay = began + step.at - time.monotonic()
            if delay > 0:
                time.sleep(delay)  # the schedule's pace, not a wait for the relay
            getattr(self, f"do_{step.action}")(*step.args)

    def finish(self):
        """Heals everything, then checks the invariants; replays every dead letter and checks they arrive."""
        self.do_apns("ok")
        self.fake.by_token.clear()
        for name in self.schedule.processes:
            if self.processes.get(name) is None:
                self.start_process(name)
        for slot in range(SLOTS):
            if self.slots[slot] is None:
                self.register(slot)
        self.do_canary()
        try:
            wait_until(lambda: not invariants.nothing_queued(self.stats()), timeout=RECOVERY_DEADLINE, interval=0.2,
                       what="the queue to drain")
        except TimeoutError:
            pass  # reported by the check below, with what is left
        for name in self.schedule.processes:
            self.count_stalls(name)
        if self.stalls:
            self.violations.append(f"{invariants.NAMES[6]}: the stall detector had to reset a deliverer "
                                   f"{self.stalls} time(s) (kumapush_delivery_stalls_total)")
        self.check()
        if self.violations:
            return
        replayed = self.cli("replay")
        self.notes.append(f"final {replayed.strip()}")
        surviving = self.surviving()
        waiting = [job for job in self.jobs if job.public_id and job.incarnation in surviving]

        def missing():
            delivered = {invariants.marker_of(r) for r in self.snapshot_requests() if r["status"] == 200}
            return [job.marker for job in waiting if job.marker not in delivered]
        try:
            wait_until(lambda: not missing(), timeout=RECOVERY_DEADLINE, interval=0.2, what="the replayed dead letters")
        except TimeoutError:
            self.violations.append(f"{invariants.NAMES[7]}: not delivered after the final replay: {missing()[:10]}")
        stats = self.stats()
        if stats["jobs"].get("discarded") or invariants.nothing_queued(stats):
            self.violations.append(f"{invariants.NAMES[7]}: after the final replay, stats says {stats['jobs']}")
        self.check(final=True)

    def check(self, final=False):
        requests = self.snapshot_requests()
        stats = self.stats()
        dead = self.dead_letters()
        surviving = self.surviving()
        found = [
            (0, invariants.none_vanishes(self.jobs, surviving, requests, dead)),
            (1, invariants.nothing_queued(stats)),
            (2, invariants.dead_letter_reasons_are_true(dead, requests, stats)),
            (3, invariants.devices_vanish_only_for_a_cause(self.incarnations, surviving, requests)),
            (4, invariants.per_device_order(requests, self.posted_at, self.seconds("JOB_TTL"), self.seconds("RETRY_MAX"))),
            (5, invariants.one_push_in_flight_per_device(requests)),
            (8, invariants.apns_rules_kept(requests, list(self.fake.violations))),
        ]
        if final:
            found = found[3:]  # after the final replay only order and flight can still change
        for index, violations in found:
            self.violations += [f"{invariants.NAMES[index]}: {v}" for v in violations]

    def stop(self):
        for relay in self.processes.values():
            if relay is not None:
                relay.stop()
        if self.fake is not None:
            try:
                self.fake.stop()
            except AssertionError:
                pass  # its breaches of APNs' rules are checked as an invariant
        if self.own_postgres:
            self.postgres.stop()

    # -- steps -------------------------------------------------------------------------------------------------

    def do_post(self, slot):
        incarnation = self.slots[slot]
        if incarnation is None:
            return
        self.sequence += 1
        marker = f"chaos {incarnation.key}.{self.sequence}"
        job = Job(marker, incarnation.key)
        self.posted_at[marker] = time.time()
        body = {"heartbeat": {"monitorID": slot, "status": self.sequence % 2, "msg": marker, "important": True},
                "monitor": {"id": slot, "name": f"M{slot}"}, "msg": marker}
        try:
            status, answer, _ = request("POST", f"{self.base}/wh/{incarnation.device_id}", body, timeout=10)
        except (OSError, urllib.error.URLError):
            status = "refused"
        self.answers[status] = self.answers.get(status, 0) + 1
        if status == 202:
            job.public_id = answer["id"]
        elif status == 410:
            self.notes.append(f"{marker}: webhook answered 410 (APNs said the token is gone); registering again")
            self.slots[slot] = None
            self.register(slot)
        elif status == 404:
            self.violations.append(f"{invariants.NAMES[3]}: webhook for live device {incarnation.key} answered 404")
        self.jobs.append(job)

    def do_apns(self, mode, argument=None):
        fake = self.fake
        fake.unavailable, fake.drop_requests, fake.latency, fake.goaway_after = False, False, 0.0, None
        fake.accept_connections()
        if mode == "503":
            fake.unavailable = True
        elif mode == "drop":
            fake.drop_requests = True
        elif mode == "goaway":
            fake.goaway_after = argument
        elif mode == "latency":
            fake.latency = argument
        elif mode == "refuse":
            fake.refuse_connections()
        self.notes.append(f"APNs {mode}{'' if argument is None else f' {argument}'}")

    def do_token(self, slot, status, reason):
        if status == 200:
            self.fake.by_token.pop(token(slot), None)
        else:
            self.fake.by_token[token(slot)] = (status, reason)
        self.notes.append(f"token of slot {slot}: {status} {reason}".rstrip())

    def do_kill(self, name):
        relay = self.processes.get(name)
        if relay is not None:
            self.count_stalls(name)
            relay.stop()  # SIGKILL
            self.processes[name] = None
            self.notes.append(f"SIGKILL {name}")

    def do_start(self, name):
        if self.processes.get(name) is None:
            self.start_process(name)

    def do_replay(self, which):
        arguments = ["replay"] if which == "all" else ["replay", "--reason", which]
        self.notes.append(f"{' '.join(arguments)}: {self.cli(*arguments).strip()}")

    def do_delete(self, slot):
        incarnation = self.slots[slot]
        if incarnation is None or not self.ingest_up():
            return
        status = request("DELETE", f"{self.base}/devices/{incarnation.device_id}",
                         headers={"Authorization": f"Bearer {incarnation.auth}"})[0]
        if status == 204:
            incarnation.deleted = True
            self.slots[slot] = None
            self.notes.append(f"deleted device {incarnation.key}")
        elif status == 401:
            self.notes.append(f"device {incarnation.key} was already gone when deleted")
            self.slots[slot] = None

    def do_register(self, slot):
        if not self.ingest_up():
            return
        if self.slots[slot] is None:
            self.register(slot)
        else:
            self.do_reregister(slot)

    def do_reregister(self, slot):
        """The app registers its token again while the device exists: same id, new auth token."""
        incarnation = self.slots[slot]
        if incarnation is None or not self.ingest_up():
            return
        status, body, _ = request("POST", f"{self.base}/devices", {"device_token": token(slot)})
        if status == 200 and body["id"] == incarnation.device_id:
            incarnation.auth = body["auth_token"]
        elif status == 201:
            # The device was gone already (a 410 the harness has not heard of yet; the invariants check that one
            # came): the phone's registration made a new one.
            self.notes.append(f"re-registering device {incarnation.key} made a new device: it was gone")
            self.adopt(slot, body)
        else:
            self.violations.append(f"re-registering device {incarnation.key} answered {status} {body}")

    def do_canary(self):
        """A webhook for a brand-new device must be delivered within seconds whenever APNs is healthy."""
        if not all(self.processes.get(name) for name in self.schedule.processes) or self.fake_faulty():
            return
        self.canaries += 1
        canary_token = f"ca{self.canaries:062x}"
        status, body, _ = request("POST", f"{self.base}/devices", {"device_token": canary_token})
        if status != 201:
            raise ChaosFailure(f"registering a canary answered {status} {body}")
        text = f"canary {self.canaries}"
        alert = {"heartbeat": {"monitorID": 999, "status": 0, "msg": text, "important": True},
                 "monitor": {"id": 999, "name": "canary"}, "msg": text}
        status, answer, _ = request("POST", f"{self.base}/wh/{body['id']}", alert)
        if status != 202:
            raise ChaosFailure(f"the canary's webhook answered {status} {answer}")
        try:
            wait_until(lambda: self.fake.pushes(canary_token), timeout=RECOVERY_DEADLINE, interval=0.05, what=text)
        except TimeoutError:
            self.violations.append(f"{invariants.NAMES[6]}: {text} not delivered within {RECOVERY_DEADLINE:.0f} s "
                                   f"of APNs being healthy")

    # -- helpers -----------------------------------------------------------------------------------------------

    def count_stalls(self, name):
        """Adds the process's kumapush_delivery_stalls_total (deliverers only; counted before each kill and at the end,
        as the counter lives as long as the process)."""
        relay = self.processes.get(name)
        if relay is None or name.startswith("ingest"):
            return
        status, text, _ = request("GET", f"http://{relay.env['METRICS_ADDR']}/metrics", timeout=10)
        for line in (text.decode() if isinstance(text, bytes) else "").splitlines():
            if line.startswith("kumapush_delivery_stalls_total"):
                self.stalls += int(float(line.split()[-1]))

    def seconds(self, setting):
        text = self.schedule.settings[setting]
        return float(text[:-2]) / 1000 if text.endswith("ms") else float(text[:-1])

    def fake_faulty(self):
        fake = self.fake
        return fake.unavailable or fake.drop_requests or fake.latency or fake.goaway_after is not None or fake._server is None

    def start_process(self, name):
        command = name.split("-")[0]
        relay = Relay(self.binary, command, self.envs[name], self.workdir / f"{name}.log")
        if command == "deliver":
            relay.wait_metrics(timeout=30)
        else:
            relay.wait_healthy(timeout=30)
        self.processes[name] = relay
        self.notes.append(f"started {name}")

    def ingest_up(self):
        name = "serve" if self.schedule.topology == "serve" else "ingest"
        return self.processes.get(name) is not None

    def register(self, slot):
        """Registers the slot's token: a new device id (the token was deleted or removed by a 410 before)."""
        status, body, _ = request("POST", f"{self.base}/devices", {"device_token": token(slot)})
        if status != 201:
            raise ChaosFailure(f"registering slot {slot} answered {status} {body}")
        self.adopt(slot, body)

    def adopt(self, slot, body):
        """The slot's token is now registered as the device in `body` (a 201's)."""
        incarnation = Incarnation(slot, self.registrations[slot], body["id"], body["auth_token"])
        self.registrations[slot] += 1
        self.incarnations.append(incarnation)
        self.slots[slot] = incarnation

    def surviving(self):
        """Keys of the registrations whose device still exists (asked with its own auth token)."""
        alive = set()
        for incarnation in self.incarnations:
            if incarnation.deleted:
                continue
            status = request("GET", f"{self.base}/devices/{incarnation.device_id}",
                             headers={"Authorization": f"Bearer {incarnation.auth}"})[0]
            if status == 200:
                alive.add(incarnation.key)
        return alive

    def cli(self, *arguments):
        env = self.envs[self.schedule.processes[0]]
        result = subprocess.run([str(self.binary), *arguments], env=env, capture_output=True, text=True, timeout=60)
        if result.returncode != 0:
            raise ChaosFailure(f"kumapush-relay {' '.join(arguments)} exited {result.returncode}: {result.stderr}")
        return result.stdout

    def stats(self):
        return json.loads(self.cli("stats", "--json"))

    def dead_letters(self):
        """public id -> reason of every dead letter, read straight from the store (no command lists them)."""
        query = "SELECT public_id, last_error FROM jobs WHERE state = 'discarded'"
        if self.store == "postgres":
            return {row[0]: row[1] if len(row) > 1 else "" for row in self.postgres.query(self.database, query)}
        path = self.envs[self.schedule.processes[0]]["DATABASE_PATH"]
        connection = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=10)
        try:
            return dict(connection.execute(query))
        finally:
            connection.close()

    def snapshot_requests(self):
        with self.fake.lock:
            return [dict(record) for record in self.fake.requests]

    # -- reports -----------------------------------------------------------------------------------------------

    def summary(self):
        requests = self.snapshot_requests()
        delivered = sum(1 for r in requests if r["status"] == 200)
        acknowledged = sum(1 for job in self.jobs if job.public_id)
        return (f"seed {self.schedule.seed} ({self.schedule.topology}, {self.store}): {acknowledged} webhooks acknowledged, "
                f"answers {dict(sorted((str(k), v) for k, v in self.answers.items()))}, {len(requests)} APNs requests, "
                f"{delivered} delivered, {self.canaries} canaries, {len(self.incarnations)} registrations; "
                f"{len(invariants.NAMES)} invariants hold")

    def report(self):
        shown = self.violations[:20]
        more = f"\n  … and {len(self.violations) - len(shown)} more" if len(self.violations) > len(shown) else ""
        return (f"chaos seed {self.schedule.seed} ({self.store}) failed ({len(self.violations)} violations):\n  "
                + "\n  ".join(shown) + more
                + f"\nreplay it: {replay_command(self.schedule.seed, self.duration, self.store)}"
                + f"\nlogs: {self.workdir}\nschedule:\n{self.schedule.describe()}"
                + "\nwhat happened:\n  " + "\n  ".join(self.notes[-60:]))
