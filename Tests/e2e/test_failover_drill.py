"""The failover drill (SPEC §4 "Failover", issue 40): the relay on a real Patroni cluster (etcd + two PostgreSQL
nodes, synchronous mode) under steady webhook load, through (a) a crash of the leader's host, the old node then
rejoining, (b) a planned `patronictl switchover`, and (c) a silent loss of the leader's host (its packets dropped,
then its processes killed: nothing the relay holds is ever closed or reset).

Each step: no acknowledged webhook lost, per-device order kept, no relay process exits; 202 again within 30 s of
the new leader for (a) and (b); for (c) every webhook answered within 15 s (503 during the gap) and 202 again within
15 s of the new leader. The measured gaps and the codes answered during them are printed (run with -s, or
`make drill`).

DRILL_SECONDS (default 3) is how long the load runs steadily before and between the steps; `make drill` runs 60.
DRILL_RATE (default 100) is webhooks per second over the 20 devices."""
import collections
import os
import shutil
import threading
import time

import pytest

from patroni_cluster import PatroniCluster
from relayproc import request, wait_until
from test_delivery import accepted_order, alert, register, token

DRILL_SECONDS = float(os.environ.get("DRILL_SECONDS", "3"))
DRILL_RATE = float(os.environ.get("DRILL_RATE", "100"))
DEVICES = 20
SEED = 40_000
# What SPEC §4 promises for all three faults: 202 again within 15 s of the new leader (ttl 10 s makes it; after it,
# the relay's reconnect backoff, at most 5 s, plus one connect attempt per host, connect_timeout, must fit), and no
# webhook held longer than 15 s for its answer. Measured: 202 again 1.6–4.0 s after a crash, within 1.8 s of a
# switchover, 0.2–2.4 s after a silent loss; the longest wait 10.6 s (docs/operations.md "Failover drill").
BOUND = 15.0

needs = [tool for tool in ("etcd", "patroni", "patronictl", "iptables") if shutil.which(tool) is None]
pytestmark = [pytest.mark.skipif(bool(needs), reason=f"missing {needs}: run scripts/install-deps.sh"),
              pytest.mark.skipif(os.getuid() != 0, reason="dropping a host's packets (iptables) needs root")]

Answer = collections.namedtuple("Answer", "device seq sent answered status id")


class Load:
    """One sender per device at DRILL_RATE / DEVICES webhooks a second, each message carrying the device's next
    sequence number; a device's next webhook goes only after the last one was answered, so its order is defined."""

    def __init__(self, ingest, devices):
        self.ingest, self.devices = ingest, devices
        self.answers, self.lock, self.stopping = [], threading.Lock(), threading.Event()
        self.threads = [threading.Thread(target=self.send, args=(index,), daemon=True) for index in range(len(devices))]

    def start(self):
        for thread in self.threads:
            thread.start()
        return self

    def send(self, index):
        interval, seq = len(self.devices) / DRILL_RATE, 0
        next_at = time.monotonic()
        while not self.stopping.is_set():
            # Pacing the load, not waiting for anything: the steady rate a monitoring fleet sends at.
            if self.stopping.wait(max(0.0, next_at - time.monotonic())):
                break
            sent = time.monotonic()
            try:
                status, body, _ = request("POST", f"{self.ingest.base}/wh/{self.devices[index]}",
                                          alert(index, "M", seq % 2, str(seq)), timeout=90)
            except OSError:
                status, body = "no answer", None
            answered = time.monotonic()
            job = body.get("id") if status == 202 and isinstance(body, dict) else None
            with self.lock:
                self.answers.append(Answer(index, seq, sent, answered, status, job))
            seq += 1
            next_at = max(next_at + interval, answered)

    def snapshot(self):
        with self.lock:
            return list(self.answers)

    def stop(self):
        self.stopping.set()
        for thread in self.threads:
            thread.join(timeout=120)

    def wait_steady(self, since):
        """Until every answer for DRILL_SECONDS after `since` and after the last refusal was 202, each device's too."""
        def steady():
            answers = self.snapshot()
            refused = [a.answered for a in answers if a.status != 202]
            start = max([since] + refused)
            after = [a for a in answers if a.sent > start]
            return (time.monotonic() - start >= DRILL_SECONDS
                    and {a.device for a in after} == set(range(len(self.devices))))
        wait_until(steady, timeout=DRILL_SECONDS + 180, interval=0.2, what="the load to run steadily on 202s")


def gap(answers, fault_at, leader_at):
    """What the relay answered from the fault on: when 202 came back for good (the first 202 to a webhook sent
    after the last refused one), the codes answered until then, and the longest any webhook waited."""
    window = [a for a in answers if a.answered >= fault_at]
    refused = [a for a in window if a.status != 202]
    last_refused = max((a.sent for a in refused), default=None)
    recovered = min((a.answered for a in window if a.status == 202 and (last_refused is None or a.sent > last_refused)),
                    default=None)
    # Webhooks sent before 202 came back, wherever their answer came: a webhook held through the gap counts too.
    during = [a for a in window if recovered is None or a.sent <= recovered]
    return dict(
        new_leader_after=leader_at - fault_at,
        first_refusal_after=min((a.answered for a in refused), default=fault_at) - fault_at if refused else None,
        accepting_again_after_new_leader=None if recovered is None else recovered - leader_at,
        codes=dict(collections.Counter(str(a.status) for a in during)),
        longest_wait=max((a.answered - a.sent for a in window), default=0.0),
        recovered=recovered)


def report(step, measured):
    shown = {key: (round(value, 2) if isinstance(value, float) else value) for key, value in measured.items()
             if key != "recovered"}
    print(f"\nDRILL {step}: {shown}", flush=True)


@pytest.fixture
def cluster():
    patroni = PatroniCluster().start()
    yield patroni
    patroni.stop()


@pytest.mark.timeout(600 + 6 * DRILL_SECONDS)
def test_failover_drill_loses_no_acknowledged_webhook_and_answers_within_the_bounds(relays, fake_apns, cluster):
    leader = cluster.leader()
    cluster.query(leader, "postgres", "CREATE DATABASE relay")
    url = cluster.url("relay")
    settings = dict(DATABASE_URL=url, RATE_LIMIT_WEBHOOK="off", RATE_LIMIT_REGISTER="off", RATE_LIMIT_WEBHOOK_IP="off")
    ingest = relays("ingest", **settings)
    # STALL_TIMEOUT shorter than the leaderless seconds of a crash (ttl 10 s): a deliverer that reports a stall
    # then must blame the database, never APNs.
    deliverers = [relays("deliver", DATABASE_URL=url, DEVICE_BURST="off", STALL_TIMEOUT="5s") for _ in range(2)]
    processes = [ingest] + deliverers
    devices = [register(ingest, SEED + n)[0] for n in range(DEVICES)]
    load = Load(ingest, devices).start()
    measured = {}
    try:
        load.wait_steady(time.monotonic())

        # (a) The leader's host crashes; the standby takes over; the old node comes back and rejoins.
        old = cluster.leader()
        fault_at = time.monotonic()
        old.crash()
        new, leader_at = cluster.wait_for_new_leader(old)
        load.wait_steady(leader_at)
        measured["crash"] = gap(load.snapshot(), fault_at, leader_at)
        report("(a) leader host crash", measured["crash"])
        old.start()
        assert cluster.wait_healthy() is new

        # (b) A planned switchover back to the old node.
        fault_at = time.monotonic()
        cluster.switchover(to=old)
        _, leader_at = cluster.wait_for_new_leader(new)
        load.wait_steady(leader_at)
        measured["switchover"] = gap(load.snapshot(), fault_at, leader_at)
        report("(b) patronictl switchover", measured["switchover"])
        cluster.wait_healthy()

        # (c) The leader's host vanishes silently: packets dropped first, then its processes killed.
        old = cluster.leader()
        fault_at = time.monotonic()
        old.drop_packets()
        old.crash()
        _, leader_at = cluster.wait_for_new_leader(old)
        load.wait_steady(leader_at)
        measured["silent"] = gap(load.snapshot(), fault_at, leader_at)
        report("(c) silent loss of the leader's host", measured["silent"])
    finally:
        load.stop()

    answers = load.snapshot()
    assert [p.process.poll() for p in processes] == [None] * len(processes), "a relay process exited"
    assert {str(a.status) for a in answers} <= {"202", "503"}, collections.Counter(str(a.status) for a in answers)
    for step in ("crash", "switchover", "silent"):
        assert measured[step]["recovered"] is not None and measured[step]["accepting_again_after_new_leader"] <= BOUND, \
            (step, measured[step])
        assert measured[step]["longest_wait"] <= BOUND, (step, measured[step])

    stalls = [line for d in deliverers for line in open(d.log.name, errors="replace") if "delivery stalled" in line]
    print(f"\nDRILL stall reports: {len(stalls)}", flush=True)
    assert all("database unavailable" in line and "resetting" not in line for line in stalls), stalls

    # Every acknowledged webhook reaches APNs (at least once), and each device's pushes in the order acknowledged.
    accepted = {a.id for a in answers if a.status == 202}

    def delivered():
        return {p["headers"]["apns-id"] for p in fake_apns.pushes(status=200)}
    wait_until(lambda: accepted <= delivered(), timeout=180, what="every acknowledged webhook to be delivered")
    print(f"\nDRILL totals: {dict(collections.Counter(str(a.status) for a in answers))}, every 202 delivered", flush=True)
    for index in range(DEVICES):
        with fake_apns.lock:
            records = [dict(r) for r in fake_apns.requests if r["token"] == token(SEED + index)]
        first, unexplained = accepted_order(records)
        sequence = [int(body) for body in first]
        # A webhook answered 503 may still have been stored (its commit's answer lost with the server): it may be
        # delivered, in its place. Every 202 one must be, and nothing may come out of order.
        acknowledged = [a.seq for a in answers if a.device == index and a.status == 202]
        assert sequence == sorted(sequence) and len(set(sequence)) == len(sequence), (index, sequence)
        assert set(acknowledged) <= set(sequence) and not unexplained, (index, acknowledged, sequence, unexplained)
