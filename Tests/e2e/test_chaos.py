"""The chaos suite's fixed seeds (issue #19): each is a seeded schedule of webhooks, APNs faults, crashes, replays
and device churn over the real binary, followed by the invariants of `chaos_invariants.NAMES`. The seeds cover
both process layouts (`serve`, and `ingest` + two `deliver`), on SQLite and on PostgreSQL. `make chaos SEEDS=N`
runs random ones."""
import pytest

from chaos_run import ChaosRun
from chaos_schedule import generate
from postgres_server import PostgresServer

SEEDS = [1, 2, 7, 9]
POSTGRES_SEEDS = [2, 7]  # serve and split


@pytest.fixture(scope="module")
def postgres():
    server = PostgresServer().start()
    yield server
    server.stop()


def test_the_fixed_seeds_cover_both_process_layouts_and_every_fault():
    schedules = [generate(seed) for seed in SEEDS]
    assert {s.topology for s in schedules} == {"serve", "split"}
    assert {generate(seed).topology for seed in POSTGRES_SEEDS} == {"serve", "split"}
    modes = {step.args[0] for s in schedules for step in s.steps if step.action == "apns"}
    assert modes == {"ok", "503", "drop", "goaway", "refuse", "latency"}
    actions = {step.action for s in schedules for step in s.steps}
    assert actions == {"post", "apns", "token", "kill", "start", "replay", "delete", "register", "reregister", "canary"}


@pytest.mark.parametrize("seed", SEEDS)
def test_chaos_seed_keeps_every_invariant(relay_binary, tmp_path, seed):
    print(ChaosRun(seed, relay_binary, tmp_path).run())


@pytest.mark.parametrize("seed", POSTGRES_SEEDS)
def test_chaos_seed_keeps_every_invariant_on_postgresql(relay_binary, tmp_path, postgres, seed):
    print(ChaosRun(seed, relay_binary, tmp_path, store="postgres", postgres=postgres).run())


# Each invariant check can fail: synthetic histories with one defect each.

from chaos_invariants import (dead_letter_reasons_are_true, devices_vanish_only_for_a_cause, none_vanishes,  # noqa: E402
                              nothing_queued, one_push_in_flight_per_device, per_device_order)
from chaos_run import Incarnation, Job  # noqa: E402


def push(marker, started, ended, status=200, apns_id=None, reason=""):
    return {"token": "t", "apns_id": apns_id or f"id-{marker}", "payload": {"aps": {"alert": {"body": marker}}},
            "started": started, "ended": ended, "status": status, "reason": reason}


def stats(dead=None, **live):
    jobs = {"pending": 0, "available": 0, "running": 0, "retryable": 0, "discarded": sum((dead or {}).values())}
    jobs.update(live)
    return {"jobs": jobs, "dead_letters_by_reason": dead or {}}


def test_a_job_neither_delivered_nor_dead_lettered_is_reported():
    jobs = [Job("chaos 0.0.1", "0.0", "id-chaos 0.0.1"), Job("chaos 0.0.2", "0.0", "id-chaos 0.0.2")]
    assert none_vanishes(jobs, {"0.0"}, [push("chaos 0.0.1", 1, 2)], {"id-chaos 0.0.2": "Expired"}) == []
    assert len(none_vanishes(jobs, {"0.0"}, [push("chaos 0.0.1", 1, 2)], {})) == 1
    assert none_vanishes(jobs, set(), [], {}) == [], "a deleted device's jobs may vanish with it"
    wrong_id = none_vanishes(jobs[:1], {"0.0"}, [push("chaos 0.0.1", 1, 2, apns_id="other")], {})
    assert len(wrong_id) == 1 and "apns-id" in wrong_id[0]


def test_queued_jobs_and_untrue_dead_letter_reasons_are_reported():
    assert nothing_queued(stats()) == [] and len(nothing_queued(stats(retryable=1))) == 1
    rejected = [push("chaos 0.0.1", 1, 2, status=400, reason="DeviceTokenNotForTopic")]
    assert dead_letter_reasons_are_true({"id-chaos 0.0.1": "DeviceTokenNotForTopic"}, rejected,
                                        stats({"DeviceTokenNotForTopic": 1})) == []
    assert len(dead_letter_reasons_are_true({"id-chaos 0.0.1": "BadDeviceToken"}, rejected, stats({"BadDeviceToken": 1}))) == 1
    assert len(dead_letter_reasons_are_true({"id-chaos 0.0.1": "Expired"}, [], stats({"Expired": 2}))) == 1


def test_a_device_gone_without_a_delete_or_a_410_is_reported():
    kept, deleted, unregistered = Incarnation(0, 0, "a", "x"), Incarnation(1, 0, "b", "x", deleted=True), Incarnation(2, 0, "c", "x")
    answered_410 = [push("chaos 2.0.1", 1, 2, status=410, reason="Unregistered")]
    assert devices_vanish_only_for_a_cause([kept, deleted, unregistered], {"0.0"}, answered_410) == []
    assert len(devices_vanish_only_for_a_cause([kept, deleted, unregistered], set(), answered_410)) == 1


def test_a_job_sent_after_a_later_one_is_reported_unless_it_was_rejected_or_expired():
    posted = {"chaos 0.0.1": 0.0, "chaos 0.0.2": 0.1}
    in_order = [push("chaos 0.0.1", 1, 2), push("chaos 0.0.2", 3, 4)]
    overtaken = [push("chaos 0.0.2", 1, 2), push("chaos 0.0.1", 3, 4)]
    assert per_device_order(in_order, posted, job_ttl=5, retry_max=1) == []
    assert len(per_device_order(overtaken, posted, job_ttl=5, retry_max=1)) == 1
    assert per_device_order(overtaken, posted, job_ttl=0.5, retry_max=0.1) == [], "expired, dead-lettered and replayed"
    assert per_device_order(overtaken, posted, job_ttl=1.5, retry_max=1) == [], "a retry past the TTL expires early"
    rejected_first = [push("chaos 0.0.1", 0.5, 0.6, status=400, reason="DeviceTokenNotForTopic")] + overtaken
    assert per_device_order(rejected_first, posted, job_ttl=5, retry_max=1) == [], "rejected, dead-lettered and replayed"
    other_device = [push("chaos 0.0.2", 1, 2), push("chaos 0.1.1", 3, 4)]
    assert per_device_order(other_device, {"chaos 0.0.2": 0, "chaos 0.1.1": 0}, job_ttl=5, retry_max=1) == []


def test_two_pushes_in_flight_for_one_device_are_reported():
    assert one_push_in_flight_per_device([push("chaos 0.0.1", 1, 2), push("chaos 0.0.2", 2, 3)]) == []
    assert len(one_push_in_flight_per_device([push("chaos 0.0.1", 1, 3), push("chaos 0.0.2", 2, 4)])) == 1
    assert len(one_push_in_flight_per_device([push("chaos 0.0.1", 1, None), push("chaos 0.0.2", 2, 4)])) == 1
    assert one_push_in_flight_per_device([push("chaos 0.0.1", 1, 3), push("chaos 0.1.2", 2, 4)]) == [], "another registration"
    assert one_push_in_flight_per_device([push("chaos 0.0.1", 1, 3), push("chaos 0.0.1", 2, 4)]) == [], "the same job resent"
    given_up = [dict(push("chaos 0.0.1", 1, 3), reset_by_client=True), push("chaos 0.0.2", 2, 4)]
    assert one_push_in_flight_per_device(given_up) == [], "the relay reset the first stream"
    lost = [dict(push("chaos 0.0.1", 1, 3), connection_lost=True), push("chaos 0.0.2", 2, 4)]
    assert one_push_in_flight_per_device(lost) == [], "the first one's connection is gone"
