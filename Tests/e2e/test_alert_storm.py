"""Alert storms end to end (issue #20, SPEC §2.4 and §3 "Alert storms"): a shared dependency fails and a large
Uptime Kuma posts one webhook per monitor at once, with its own HTTP client (real axios, uptime_kuma_client.js),
never retrying. Every alert is acknowledged, the phone (the independent APNs fake) gets a handful of digests whose
titles account for every alert, and the database never holds more than DEVICE_QUEUE_MAX live jobs per device."""
import collections
import concurrent.futures
import re
import sqlite3
import threading

import uptime_kuma
from relayproc import request, wait_until

MONITORS = 1500
DEFAULT_DEVICE_QUEUE_MAX = 1000

COUNT = r"\d{1,3}(?:,\d{3})*"  # as people read it: 1,500
DIGEST_TITLE = re.compile(rf"^({COUNT}) (?:monitors changed|alerts from {COUNT} monitors|alerts)(?:: (.+))?$")
STATE_COUNT = re.compile(rf"^({COUNT}) (down|up|pending|in maintenance)$")
ALERT_TITLE = re.compile(r"^(.+) is (down|up)$")


def token(seed):
    return f"{seed:064x}"


def register(relay, seed):
    status, body, _ = request("POST", relay.base + "/devices", {"device_token": token(seed)})
    assert status == 201, body
    return body["id"]


def alerts_in(title):
    """The alerts one push carries, by state, read from its title as the phone shows it: a digest starts with the
    count (`1,500 monitors changed: 1,500 down`), a single alert is `<monitor> is down`."""
    digest = DIGEST_TITLE.match(title)
    if digest:
        states = collections.Counter()
        for part in digest[2].split(", ") if digest[2] else []:
            state = STATE_COUNT.match(part)
            assert state, f"a digest title that does not count by state: {title!r}"
            states[state[2]] += int(state[1].replace(",", ""))
        assert sum(states.values()) == int(digest[1].replace(",", "")), f"states do not add up: {title!r}"
        return states
    alert = ALERT_TITLE.match(title)
    assert alert, f"neither a digest nor one alert: {title!r}"
    return collections.Counter({alert[2]: 1})


def pushed(fake_apns, device_token):
    """Per push to the device, in the order APNs received them: the alerts it carries, by state."""
    return [alerts_in(push["payload"]["aps"]["alert"]["title"]) for push in fake_apns.pushes(device_token)]


def accounted(fake_apns, device_token):
    return sum(pushed(fake_apns, device_token), collections.Counter())


def wait_for_alerts(fake_apns, expected, what, timeout=20, drained=None):
    """Waits until the pushes to each device token in `expected` carry at least its alerts by state (a Counter),
    and, given `drained` (LiveJobs), no device holds live jobs any more. Fails saying what did arrive."""
    def arrived():
        return (all(accounted(fake_apns, device_token) >= alerts for device_token, alerts in expected.items())
                and (drained is None or not drained.now()))
    try:
        wait_until(arrived, timeout=timeout, what=what)
    except TimeoutError:
        seen = {device_token[-4:]: dict(accounted(fake_apns, device_token)) for device_token in expected}
        live = dict(drained.now()) if drained else "not checked"
        raise AssertionError(f"{what}: after {timeout} s the pushes carry {seen}; live jobs {live}") from None


def storm(url_of, status):
    """Uptime Kuma's webhooks for all its monitors changing to `status` (0 down, 1 up) at once; `url_of(n)` is
    monitor n's webhook URL."""
    msg = "Request failed with status code 503" if status == 0 else "200 - OK"
    return [uptime_kuma.webhook(url_of(n), "json", *uptime_kuma.monitor_alert(n, f"svc-{n:04d}", status, msg))
            for n in range(1, MONITORS + 1)]


def assert_all_acknowledged(results):
    """Every alert answered 202: stored as its own job or folded into the device's waiting digest. Returns how
    many were folded."""
    answers = collections.Counter((r["status"], (r.get("data") or {}).get("status")) for r in results)
    assert set(answers) <= {(202, "queued"), (202, "merged")}, answers
    return answers[(202, "merged")]


class LiveJobs:
    """Samples the relay's SQLite database read-only every 10 ms while a storm runs: the most live jobs (anything
    not dead-lettered) each device held at any sample."""

    QUERY = "SELECT device_id, count(*) FROM jobs WHERE state != 'discarded' GROUP BY device_id"

    def __init__(self, database_path):
        self.uri = f"file:{database_path}?mode=ro"
        self.most = collections.Counter()
        self.samples = 0
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *_):
        self._done.set()
        self._thread.join(10)

    def now(self):
        """Live jobs per device at this moment."""
        db = sqlite3.connect(self.uri, uri=True, timeout=5)
        try:
            return collections.Counter(dict(db.execute(self.QUERY).fetchall()))
        finally:
            db.close()

    def _sample(self):
        db = sqlite3.connect(self.uri, uri=True, timeout=1, check_same_thread=False)
        try:
            while not self._done.wait(0.01):  # the sampling period, not a wait for the relay
                try:
                    rows = db.execute(self.QUERY).fetchall()
                except sqlite3.OperationalError:  # busy for a moment: the next sample counts
                    continue
                self.samples += 1
                for device_id, live in rows:
                    self.most[device_id] = max(self.most[device_id], live)
        finally:
            db.close()


def test_a_1500_monitor_outage_and_its_recovery_reach_one_phone_whole(relays, fake_apns):
    """1,500 monitors go down at once, then all come back up, every webhook to the same phone."""
    relay = relays("serve")  # every limit, DEVICE_QUEUE_MAX and DEVICE_BURST as shipped
    device_id = register(relay, 1)
    url = f"{relay.base}/wh/{device_id}"
    with LiveJobs(relay.env["DATABASE_PATH"]) as live:
        merged = assert_all_acknowledged(uptime_kuma.send_many(storm(lambda n: url, 0)))
        merged += assert_all_acknowledged(uptime_kuma.send_many(storm(lambda n: url, 1)))
        wait_for_alerts(fake_apns, {token(1): collections.Counter(down=MONITORS, up=MONITORS)},
                        "pushes accounting for all 3,000 alerts", timeout=90, drained=live)

    pushes = pushed(fake_apns, token(1))
    assert sum(pushes, collections.Counter()) == {"down": MONITORS, "up": MONITORS}, pushes
    # A handful: up to DEVICE_BURST (10) pushes go out as the first alerts arrive, then one digest per 5 s window
    # while the rest keep arriving.
    assert 2 <= len(pushes) <= 25, f"{len(pushes)} pushes for one incident: {pushes}"
    # Per-device order: every DOWN was acknowledged before the first UP was sent, so none arrives after an UP.
    last_down = max(i for i, p in enumerate(pushes) if p["down"])
    first_up = min(i for i, p in enumerate(pushes) if p["up"])
    assert last_down <= first_up, pushes
    assert fake_apns.pushes(token(1), status=None) == fake_apns.pushes(token(1)), "APNs refused a digest"
    # The device never held more than its cap of live jobs, and it did reach it (alerts were folded). Digests were in
    # flight meanwhile: near the cap each left out the job ingest folds into (DigestCarry), so none added a job.
    assert live.samples > 0 and 0 < live.most[device_id] <= DEFAULT_DEVICE_QUEUE_MAX, live.most
    assert merged > 0


def test_a_storm_over_three_phones_does_not_hold_back_another_uptime_kumas_alerts(relays, fake_apns):
    """1,500 monitors split over three phones go down and come back up; meanwhile a second Uptime Kuma, on another
    address (127.0.0.2), reports its own monitors to the first phone. Those alerts reach the phone within seconds,
    while the storm is still arriving. A small DEVICE_QUEUE_MAX makes every phone fold alerts."""
    cap = 200
    relay = relays("serve", DEVICE_QUEUE_MAX=cap)
    devices = [register(relay, 10 + n) for n in range(3)]
    phone = token(10)  # the one that also hears from the second Uptime Kuma
    per_phone = MONITORS // 3

    def url_of(n):
        return f"{relay.base}/wh/{devices[n % 3]}"

    def other_uptime_kuma(status, names):
        """The second Uptime Kuma's alerts to the first phone (form-data, its other body mode), all at once."""
        results = uptime_kuma.send_many([
            uptime_kuma.webhook(f"{relay.base}/wh/{devices[0]}", "form-data",
                                *uptime_kuma.monitor_alert(9000 + n, name, status, "edge check"), local_address="127.0.0.2")
            for n, name in enumerate(names)])
        assert_all_acknowledged(results)

    merged = 0
    with LiveJobs(relay.env["DATABASE_PATH"]) as live, concurrent.futures.ThreadPoolExecutor(1) as client:
        # The storm is DOWN alerts, so the other Uptime Kuma's UP alerts are told apart by the phone's count of ups.
        down = client.submit(uptime_kuma.send_many, storm(url_of, 0))
        wait_until(lambda: sum(live.now().values()) > 0, what="the storm to start arriving")
        other_uptime_kuma(1, ["edge-a", "edge-b"])
        wait_for_alerts(fake_apns, {phone: collections.Counter(up=2)},
                        "the other Uptime Kuma's two UP alerts during the DOWN storm")
        merged += assert_all_acknowledged(down.result(timeout=120))
        wait_for_alerts(fake_apns, {token(10 + n): collections.Counter(down=per_phone) for n in range(3)},
                        "the DOWN storm delivered", timeout=60, drained=live)

        # And the other way round while every monitor comes back up: its DOWN alerts are the phone's 501st and 502nd.
        up = client.submit(uptime_kuma.send_many, storm(url_of, 1))
        wait_until(lambda: sum(live.now().values()) > 0, what="the recovery storm to start arriving")
        other_uptime_kuma(0, ["edge-a", "edge-b"])
        wait_for_alerts(fake_apns, {phone: collections.Counter(down=per_phone + 2)},
                        "the other Uptime Kuma's two DOWN alerts during the UP storm")
        merged += assert_all_acknowledged(up.result(timeout=120))

        expected = {token(10 + n): collections.Counter(down=per_phone, up=per_phone) for n in range(3)}
        expected[phone] += collections.Counter(down=2, up=2)
        wait_for_alerts(fake_apns, expected, "pushes accounting for every alert", timeout=90, drained=live)

    assert accounted(fake_apns, phone) == {"down": per_phone + 2, "up": per_phone + 2}
    for n in (1, 2):
        pushes = pushed(fake_apns, token(10 + n))
        assert sum(pushes, collections.Counter()) == {"down": per_phone, "up": per_phone}, pushes
        assert len(pushes) <= 25, pushes
    assert live.samples > 0 and set(live.most) == set(devices) and max(live.most.values()) <= cap, live.most
    assert merged > 0
