"""One hostile body cannot pin the relay (issue 36): a 64 KiB body shaped against a parser costs about what a plain
one does, and the app's `GET /devices/:id` keeps answering 200 while four clients send such bodies in a loop.

No clock is asserted on: the relay's own CPU time (utime + stime in /proc/<pid>/stat) per shaped request is
compared with its CPU time per plain request of the same size, a ratio that load moves far less than it moves
seconds (see the bound's comment)."""
import os
import threading

import pytest

from relayproc import Relay, relay_env, request

SIZE = 64 * 1024
UNKNOWN_DEVICE = "AAAAAAAAAAAAAA"
MEASURED = 30
MIN_TICKS = 50  # each figure spans ≥ 0.5 s of the relay's CPU: a tick of error is ≤ 2 %
MOST_SENT = 20_000
SENDERS, SENDS_EACH = 4, 10
TICKS = os.sysconf("SC_CLK_TCK")


def sized(head, unit, tail):
    return (head + unit * ((SIZE - len(head) - len(tail)) // len(unit)) + tail).encode()


PLAIN = sized("title=NAS&body=", "PING 10.0.0.7 failed, 100% packet loss ", "")
ISSUE_36_BODY = sized("msg=a", "&x=", " ")
# (body, content type), each against a plain body of the same type.
SHAPES = {
    # Issue 36's body: 0.47-0.60 s of CPU each before, the form reader walking back to the last space at every `&x=`.
    "form-many-fields": (ISSUE_36_BODY, "text/plain"),
    # The same as a urlencoded form: libmicrohttpd's post processor also decodes its 21,800 fields as they arrive.
    "form-many-fields-urlencoded": (ISSUE_36_BODY, "application/x-www-form-urlencoded"),
    # Fields wide enough to stay under the 1,000-field cap: the form is read as a form.
    "form-wide-fields": (sized("msg=a", "&x=" + "a" * 69, " "), "text/plain"),
    # The tolerant JSON search at its most expensive: every quote can end the string, and nothing ever parses.
    "tolerant-search": (sized('{"a":"', 'x","b":"y"}', "z"), "text/plain"),
}


def cpu_seconds(pid):
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime and stime, fields 14 and 15 of stat(5)


def post(relay, body, content_type="text/plain"):
    return request("POST", f"{relay.base}/wh/{UNKNOWN_DEVICE}", body, headers={"Content-Type": content_type}, timeout=60)


def cpu_per_request(relay, body, content_type):
    """The relay's CPU per request, over at least MEASURED requests and at least MIN_TICKS clock ticks of its CPU:
    /proc counts in ticks (10 ms), so a baseline of 3 ticks (30 plain requests) was ±33 % and the ratio failed a
    loaded run at 10.3. Sends until enough is counted, an event, not a time."""
    before = cpu_seconds(relay.process.pid)
    statuses, sent = set(), 0
    while sent < MEASURED or cpu_seconds(relay.process.pid) - before < MIN_TICKS / TICKS:
        assert sent < MOST_SENT, f"{sent} requests and still under {MIN_TICKS} ticks of CPU"
        statuses.add(post(relay, body, content_type)[0])
        sent += 1
    return (cpu_seconds(relay.process.pid) - before) / sent, statuses


@pytest.fixture
def ingest(relay_binary, tmp_path):
    # Failed webhooks (404 for the unknown id) are not limited here, so every body is parsed.
    env = relay_env(tmp_path, RATE_LIMIT_WEBHOOK_FAILED="off", RATE_LIMIT_WEBHOOK_IP="off")
    relay = Relay(relay_binary, "ingest", env, tmp_path / "ingest.log").wait_healthy()
    yield relay
    relay.stop()


@pytest.mark.parametrize("shape", SHAPES)
def test_a_shaped_body_costs_at_most_twenty_plain_ones(ingest, shape):
    body, content_type = SHAPES[shape]
    assert len(body) <= SIZE and len(PLAIN) <= SIZE
    # The body is read before the device is looked up: both are answered 404 for the unknown id, after parsing.
    assert post(ingest, PLAIN, content_type)[0] == post(ingest, body, content_type)[0] == 404
    plain, plain_statuses = cpu_per_request(ingest, PLAIN, content_type)
    shaped, shaped_statuses = cpu_per_request(ingest, body, content_type)
    assert plain_statuses == shaped_statuses == {404}
    # Twenty: the search's worst shape measured 7x unloaded and 10.3-11.4x on the release build beside a release
    # build (cache contention weighs on the long scan, not on the plain request); what this guards against, a
    # reader without a budget, measured 160x, the old form reader 350x. The byte counts of ParserWorkTests hold 10x.
    assert shaped <= 20 * plain, f"{shape}: {shaped * 1000:.1f} ms of CPU per request against {plain * 1000:.1f} ms plain"


def test_device_lookups_answer_while_four_clients_send_shaped_bodies(ingest):
    status, device, _ = request("POST", ingest.base + "/devices", {"device_token": f"{36:064x}"})
    assert status == 201, device
    lookup = {"Authorization": f"Bearer {device['auth_token']}"}
    done, errors, answers, lookups = threading.Event(), [], [], []

    def send():
        try:
            for _ in range(SENDS_EACH):
                answers.append(post(ingest, ISSUE_36_BODY)[0])
        except Exception as error:  # noqa: BLE001 - any failure in a sender fails the test below
            errors.append(error)

    senders = [threading.Thread(target=send) for _ in range(SENDERS)]
    for sender in senders:
        sender.start()
    try:
        # The app's launch-time lookup, again and again while the senders run; its 10 s deadline only bounds a failure.
        while any(sender.is_alive() for sender in senders):
            status, body, _ = request("GET", f"{ingest.base}/devices/{device['id']}", headers=lookup, timeout=10)
            lookups.append(status)
            assert status == 200 and body["id"] == device["id"], (status, body)
    finally:
        for sender in senders:
            sender.join(timeout=600)
    assert not errors, errors
    assert answers == [404] * (SENDERS * SENDS_EACH)
    assert lookups and set(lookups) == {200}
