"""The relay against an APNs that does what real servers do on a bad day, at the transport level: allows one stream,
expires the provider token mid-batch, resets connections while the relay is writing. Every push still arrives, in
order per device. `make test-asan` runs these (and test_delivery.py) against an AddressSanitizer build: they are the
paths where an HTTP/2 client is most likely to touch freed memory."""
import socket
import struct

import pytest

from fake_apns import FakeAPNs, _Protocol
from conftest import TLS, TOPIC
from relayproc import request, wait_until
from test_delivery import alert, register, token


class _FaultyProtocol(_Protocol):
    def respond(self, stream_id):
        fake = self.fake
        with fake.lock:
            fake.requests_seen += 1
            reset = fake.reset_every and fake.requests_seen % fake.reset_every == 0 and fake.resets_left > 0
            if reset:
                fake.resets_left -= 1
        if reset:
            # RST, not FIN (SO_LINGER 0): the relay is mid-write with other streams and gets ECONNRESET/EPIPE.
            sock = self.transport.get_extra_info("socket")
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.transport.abort()
            return
        super().respond(stream_id)


class FaultyAPNs(FakeAPNs):
    """FakeAPNs with two more faults: `expire_next` requests answered 403 ExpiredProviderToken, and every
    `reset_every`-th request resetting its connection (`resets_left` times)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.expire_next = 0
        self.reset_every = 0
        self.resets_left = 0
        self.requests_seen = 0

    def answer(self, *args, **kwargs):
        token_, status, reason, claims = super().answer(*args, **kwargs)
        with self.lock:
            if status == 200 and self.expire_next > 0:
                self.expire_next -= 1
                return token_, 403, "ExpiredProviderToken", claims
        return token_, status, reason, claims

    def _listen(self, port):
        return self.loop.create_server(lambda: _FaultyProtocol(self), "127.0.0.1", port, ssl=self.context)


@pytest.fixture
def fake_apns():
    fake = FaultyAPNs(str(TLS / "server.pem"), str(TLS / "server.key"), str(TLS / "apns-key.pub.pem"), TOPIC).start()
    yield fake
    fake.stop()


def send_rounds(relay, devices, first, end):
    for n in range(first, end):
        for device_id in devices:
            assert request("POST", f"{relay.base}/wh/{device_id}", alert(1, "DB", n % 2, f"event {n}"))[0] == 202


def assert_all_in_order(fake, seeds, rounds):
    expected = [f"event {k}" for k in range(rounds)]

    def deduplicated(seed):
        bodies = fake.bodies(token(seed))
        return [b for i, b in enumerate(bodies) if i == 0 or bodies[i - 1] != b]

    wait_until(lambda: all(deduplicated(seed) == expected for seed in seeds), timeout=60, what="every push, in order")


def test_a_server_that_allows_one_stream_gets_every_push_in_order(relays, fake_apns):
    fake_apns.max_streams = 1
    relay = relays("serve", DEVICE_BURST="off")
    seeds = range(500, 530)
    devices = [register(relay, seed)[0] for seed in seeds]
    send_rounds(relay, devices, 0, 4)
    assert_all_in_order(fake_apns, seeds, 4)
    assert request("GET", f"{relay.base}/health")[0] == 200


def test_an_expired_provider_token_mid_batch_is_recycled_and_nothing_is_lost(relays, fake_apns):
    relay = relays("serve", DEVICE_BURST="off")
    seeds = range(600, 640)
    devices = [register(relay, seed)[0] for seed in seeds]
    eager = eager_connections(fake_apns)
    fake_apns.expire_next = 25
    send_rounds(relay, devices, 0, 3)
    assert_all_in_order(fake_apns, seeds, 3)
    assert fake_apns.count(403) == 25
    # The relay recycles the connection the refusal came on (APNs wedges it): new connections beyond the eager ones.
    assert fake_apns.connections > eager


def test_connections_reset_while_the_relay_writes_lose_nothing(relays, fake_apns):
    relay = relays("serve", DEVICE_BURST="off")
    seeds = range(700, 760)
    devices = [register(relay, seed)[0] for seed in seeds]
    fake_apns.reset_every = 37
    fake_apns.resets_left = 4
    send_rounds(relay, devices, 0, 4)
    assert_all_in_order(fake_apns, seeds, 4)
    assert fake_apns.resets_left == 0, "every reset happened while pushes were flowing"
    assert request("GET", f"{relay.base}/health")[0] == 200


def test_goaway_with_streams_above_its_last_stream_id_loses_nothing(relays, fake_apns):
    """GOAWAY names the stream just answered; the streams the relay opened after it are refused and resent."""
    relay = relays("serve", DEVICE_BURST="off")
    seeds = range(800, 860)
    devices = [register(relay, seed)[0] for seed in seeds]
    eager = eager_connections(fake_apns)
    fake_apns.goaway_after = 11
    send_rounds(relay, devices, 0, 2)
    wait_until(lambda: fake_apns.goaway_after is None, what="the first GOAWAY")
    # Each GOAWAY is followed by a connection that replaces the one it closed.
    wait_until(lambda: fake_apns.connections >= eager + 1, what="a new connection after the first GOAWAY")
    fake_apns.goaway_after = 23
    send_rounds(relay, devices, 2, 4)
    wait_until(lambda: fake_apns.goaway_after is None, what="the second GOAWAY")
    assert_all_in_order(fake_apns, seeds, 4)
    wait_until(lambda: fake_apns.connections >= eager + 2, what="a new connection after the second GOAWAY")


def eager_connections(fake):
    """The connections the relay opens at start (APNS_CONNECTIONS, 2 by default): every test above counts the
    reconnects beyond them, which the eager two alone would have passed."""
    wait_until(lambda: fake.connections >= 2, what="the eager connections")
    assert fake.connections == 2, "no connection was replaced before the faults"
    return fake.connections
