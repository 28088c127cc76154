"""The APNs fake itself (issue #18): it refuses every kind of request Apple refuses, with Apple's status and reason,
and behaves as Apple does at connection start, on provider-token renewal and on 410. A plain h2 client talks to it,
so these tests judge the fake, not the relay."""
import base64
import json
import socket
import ssl
import time
import uuid

import h2.config
import h2.connection
import h2.events
import h2.settings
import pytest
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature

from conftest import TLS, TOPIC

TOKEN = "ab" * 32
SIGNING_KEY = serialization.load_pem_private_key((TLS / "apns-key.p8").read_bytes(), password=None)


def b64url(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def provider_token(kid="KEY1234567", iss="TEAM123456", iat=None, key=SIGNING_KEY):
    header = b64url(json.dumps({"alg": "ES256", "kid": kid}).encode())
    claims = b64url(json.dumps({"iss": iss, "iat": int(time.time()) if iat is None else iat}).encode())
    r, s = decode_dss_signature(key.sign(f"{header}.{claims}".encode(), ec.ECDSA(hashes.SHA256())))
    return f"{header}.{claims}.{b64url(r.to_bytes(32, 'big') + s.to_bytes(32, 'big'))}"


PROVIDER_TOKEN = provider_token()


def valid_request(jwt=None):
    """A request APNs accepts; every one carries the same provider token unless `jwt` is given."""
    headers = [(":method", "POST"), (":scheme", "https"), (":authority", "127.0.0.1"), (":path", f"/3/device/{TOKEN}"),
               ("authorization", f"bearer {jwt or PROVIDER_TOKEN}"), ("apns-topic", TOPIC), ("apns-push-type", "alert"),
               ("apns-priority", "10"), ("apns-id", str(uuid.uuid4())), ("apns-expiration", str(int(time.time()) + 3600)),
               ("apns-collapse-id", "c" * 64)]
    return headers, json.dumps({"aps": {"alert": {"title": "DB is down", "body": "timeout"}}}).encode()


class Client:
    """A minimal HTTP/2 client over TLS with socket timeouts (a stuck fake fails the test, never hangs it)."""

    def __init__(self, port):
        context = ssl.create_default_context(cafile=str(TLS / "ca.pem"))
        context.set_alpn_protocols(["h2"])
        self.sock = context.wrap_socket(socket.create_connection(("127.0.0.1", port), timeout=10), server_hostname="127.0.0.1")
        self.sock.settimeout(10)
        self.conn = h2.connection.H2Connection(config=h2.config.H2Configuration(client_side=True, header_encoding="utf-8"))
        self.conn.initiate_connection()
        self.flush()
        self.events = []

    def flush(self):
        self.sock.sendall(self.conn.data_to_send())

    def read(self):
        data = self.sock.recv(65536)
        if not data:
            raise ConnectionError("the fake closed the connection")
        self.events += self.conn.receive_data(data)
        self.flush()

    def until(self, predicate):
        while not (found := [event for event in self.events if predicate(event)]):
            self.read()
        return found[0]

    def send(self, headers, body):
        stream_id = self.conn.get_next_available_stream_id()
        self.conn.send_headers(stream_id, headers, end_stream=not body)
        if body:
            self.conn.send_data(stream_id, body, end_stream=True)
        self.flush()
        return stream_id

    def answer(self, stream_id):
        """(status, JSON body or None)."""
        self.until(lambda e: isinstance(e, h2.events.StreamEnded) and e.stream_id == stream_id)
        status = next(int(dict(e.headers)[":status"]) for e in self.events
                      if isinstance(e, h2.events.ResponseReceived) and e.stream_id == stream_id)
        body = b"".join(e.data for e in self.events if isinstance(e, h2.events.DataReceived) and e.stream_id == stream_id)
        return status, json.loads(body) if body else None

    def request(self, headers, body):
        return self.answer(self.send(headers, body))

    def close(self):
        self.sock.close()


@pytest.fixture
def client(fake_apns):
    clients = []

    def connect():
        clients.append(Client(fake_apns.port))
        return clients[-1]
    yield connect
    for c in clients:
        c.close()


def replace(headers, name, value):
    return [(n, value if n == name else v) for n, v in headers if value is not None or n != name]


def test_a_valid_request_is_accepted(client, fake_apns):
    assert client().request(*valid_request()) == (200, None)
    assert fake_apns.pushes(TOKEN)[0]["payload"]["aps"]["alert"]["body"] == "timeout"


BAD_REQUESTS = {
    "DuplicateHeaders": (400, lambda h, b: (h + [("apns-topic", TOPIC)], b)),
    "MissingDeviceToken": (400, lambda h, b: (replace(h, ":path", "/3/device/"), b)),
    "BadDeviceToken (not hex)": (400, lambda h, b: (replace(h, ":path", "/3/device/" + "zz" * 32), b)),
    "BadDeviceToken (odd length)": (400, lambda h, b: (replace(h, ":path", "/3/device/" + "a" * 63), b)),
    "BadMessageId (upper case)": (400, lambda h, b: (replace(h, "apns-id", str(uuid.uuid4()).upper()), b)),
    "BadMessageId (not a UUID)": (400, lambda h, b: (replace(h, "apns-id", "job-17"), b)),
    "BadExpirationDate (milliseconds)": (400, lambda h, b: (replace(h, "apns-expiration", str(int(time.time() * 1000))), b)),
    "BadExpirationDate (not a number)": (400, lambda h, b: (replace(h, "apns-expiration", "tomorrow"), b)),
    "BadExpirationDate (negative)": (400, lambda h, b: (replace(h, "apns-expiration", "-1"), b)),
    "BadPriority": (400, lambda h, b: (replace(h, "apns-priority", "7"), b)),
    "BadCollapseId (65 bytes)": (400, lambda h, b: (replace(h, "apns-collapse-id", "c" * 65), b)),
    "MissingTopic": (400, lambda h, b: (replace(h, "apns-topic", None), b)),
    "BadTopic": (400, lambda h, b: (replace(h, "apns-topic", "com.example.other"), b)),
    "InvalidPushType": (400, lambda h, b: (replace(h, "apns-push-type", "background"), b)),
    "PayloadEmpty": (400, lambda h, b: (h, b"")),
    "PayloadTooLarge": (413, lambda h, b: (h, json.dumps({"aps": {"alert": "x" * 4100}}).encode())),
    "MissingProviderToken": (403, lambda h, b: (replace(h, "authorization", None), b)),
    "InvalidProviderToken (kid)": (403, lambda h, b: (replace(h, "authorization", "bearer " + provider_token(kid="OTHERKEY12")), b)),
    "InvalidProviderToken (iss)": (403, lambda h, b: (replace(h, "authorization", "bearer " + provider_token(iss="OTHERTEAM1")), b)),
    "InvalidProviderToken (signature)": (403, lambda h, b: (replace(h, "authorization", "bearer " + provider_token(
        key=ec.generate_private_key(ec.SECP256R1()))), b)),
    "ExpiredProviderToken": (403, lambda h, b: (replace(h, "authorization", "bearer " + provider_token(iat=int(time.time()) - 3700)), b)),
    "ExpiredProviderToken (issued in the future)": (403, lambda h, b: (replace(h, "authorization", "bearer " + provider_token(
        iat=int(time.time()) + 600)), b)),
    "BadPayload (not JSON)": (400, lambda h, b: (h, b"{aps: not json")),
    "BadPayload (not a dictionary)": (400, lambda h, b: (h, b'["aps"]')),
    "MethodNotAllowed": (405, lambda h, b: (replace(h, ":method", "GET"), b"")),
    "BadPath": (404, lambda h, b: (replace(h, ":path", "/3/topics/" + TOKEN), b)),
}


@pytest.mark.parametrize("case", list(BAD_REQUESTS))
def test_a_request_apple_refuses_is_refused_with_apples_status_and_reason(client, fake_apns, case):
    status, mutate = BAD_REQUESTS[case]
    headers, body = mutate(*valid_request())
    assert client().request(headers, body) == (status, {"reason": case.split(" ")[0]})
    assert fake_apns.pushes(TOKEN) == []


def test_the_edges_apple_accepts_are_accepted(client):
    headers, body = valid_request()
    for name, value in [("apns-expiration", "0"), ("apns-priority", "5"), ("apns-priority", "1"), ("apns-collapse-id", "é" * 32)]:
        assert client().request(replace(headers, name, value), body)[0] == 200, (name, value)
    assert client().request(replace(replace(headers, "apns-id", None), "apns-priority", None), body)[0] == 200


def test_a_new_connection_allows_one_stream_until_a_valid_provider_token_arrives(client):
    connection = client()
    connection.until(lambda e: isinstance(e, h2.events.RemoteSettingsChanged))
    assert connection.conn.remote_settings.max_concurrent_streams == 1
    assert connection.request(*valid_request()) == (200, None)
    connection.until(lambda e: isinstance(e, h2.events.RemoteSettingsChanged)
                     and connection.conn.remote_settings.max_concurrent_streams == 1000)


def test_a_rejected_provider_token_does_not_raise_the_stream_limit(client):
    connection = client()
    headers, body = valid_request()
    assert connection.request(replace(headers, "authorization", "bearer " + provider_token(kid="OTHERKEY12")), body)[0] == 403
    assert connection.conn.remote_settings.max_concurrent_streams == 1


def test_a_second_stream_on_a_new_connection_gets_goaway(client, fake_apns):
    fake_apns.hold = True  # the first request stays open
    connection = client()
    # Both sent before the fake's SETTINGS is read, so the client library does not hold the second one back.
    for _ in range(2):
        headers, body = valid_request()
        stream_id = connection.conn.get_next_available_stream_id()
        connection.conn.send_headers(stream_id, headers)
        connection.conn.send_data(stream_id, body, end_stream=True)
    connection.flush()
    goaway = connection.until(lambda e: isinstance(e, h2.events.ConnectionTerminated))
    assert b"Maximum active streams violated" in goaway.additional_data
    assert fake_apns.violations == ["a stream opened beyond the limit of 1"]
    fake_apns.violations.clear()  # provoked here; stop() fails any other test that leaves one


def test_a_rejected_request_drops_the_stream_limit_to_one_until_one_is_accepted(client, fake_apns):
    connection = client()
    assert connection.request(*valid_request())[0] == 200
    limit = lambda: connection.conn.remote_settings.max_concurrent_streams  # noqa: E731
    connection.until(lambda e: isinstance(e, h2.events.RemoteSettingsChanged) and limit() == 1000)
    headers, body = valid_request()
    assert connection.request(replace(headers, "apns-priority", "7"), body) == (400, {"reason": "BadPriority"})
    connection.until(lambda e: isinstance(e, h2.events.RemoteSettingsChanged) and limit() == 1)
    assert connection.request(*valid_request())[0] == 200
    connection.until(lambda e: isinstance(e, h2.events.RemoteSettingsChanged) and limit() == 1000)


def test_a_second_stream_after_a_valid_request_is_welcome(client, fake_apns):
    connection = client()
    assert connection.request(*valid_request())[0] == 200
    connection.until(lambda e: isinstance(e, h2.events.RemoteSettingsChanged) and connection.conn.remote_settings.max_concurrent_streams == 1000)
    fake_apns.latency = 0.2
    streams = [connection.send(*valid_request()) for _ in range(10)]
    assert [connection.answer(stream)[0] for stream in streams] == [200] * 10
    assert fake_apns.violations == []


def test_a_request_reset_in_the_bytes_that_end_it_goes_unanswered_and_the_connection_serves_the_next(client, fake_apns):
    """A client that gives up on a request (RST_STREAM) in the same write that ends it, as the relay does when a
    request times out while its frames still wait to go out. The fake must not answer or count it (the client will
    never read the answer), and must keep the connection: cutting it once made every other request on it look
    answered but open, and the several-hosts test saw two requests for one device open at once."""
    connection = client()
    assert connection.request(*valid_request())[0] == 200
    headers, body = valid_request()
    stream = connection.conn.get_next_available_stream_id()
    connection.conn.send_headers(stream, headers)
    connection.conn.send_data(stream, body, end_stream=True)
    connection.conn.reset_stream(stream)
    connection.flush()
    assert connection.request(*valid_request())[0] == 200
    assert len(fake_apns.pushes()) == 2
    [reset] = [r for r in fake_apns.requests if r["apns_id"] == dict(headers)["apns-id"]]
    assert reset["status"] is None and reset["ended"] is not None and reset["reset_by_client"]


def test_a_reset_after_the_answer_marks_the_request_the_client_gave_up_on(client, fake_apns):
    """The relay resets a request at APNS_REQUEST_TIMEOUT even if the answer is already on its way; a fake far
    behind answers first and reads the reset after. h2 drops that reset without an event, so the fake reads the
    frame itself: the kill tests forgive a late copy of a job only when its request was given up on like this."""
    connection = client()
    headers, body = valid_request()
    stream = connection.send(headers, body)
    assert connection.answer(stream)[0] == 200
    # RST_STREAM (type 3), CANCEL (8), on the stream just answered: h2 would not send it on a closed stream.
    connection.sock.sendall((4).to_bytes(3, "big") + bytes([3, 0]) + stream.to_bytes(4, "big") + (8).to_bytes(4, "big"))
    assert connection.request(*valid_request())[0] == 200  # read after the reset, on the same connection
    records = {r["apns_id"]: r for r in fake_apns.requests}
    assert records[dict(headers)["apns-id"]].get("reset_by_client") is True
    assert all(not r.get("reset_by_client") for key, r in records.items() if key != dict(headers)["apns-id"])


def test_a_provider_token_replaced_within_20_minutes_on_a_connection_gets_too_many_provider_token_updates(client):
    now = int(time.time())
    connection = client()
    assert connection.request(*valid_request(provider_token(iat=now - 600)))[0] == 200
    assert connection.request(*valid_request(provider_token(iat=now))) == (429, {"reason": "TooManyProviderTokenUpdates"})
    assert connection.request(*valid_request(provider_token(iat=now - 600)))[0] == 200, "the old token still works"
    assert client().request(*valid_request(provider_token(iat=now)))[0] == 200, "a new connection may start with a new token"

    renewed = client()
    assert renewed.request(*valid_request(provider_token(iat=now - 1500)))[0] == 200
    assert renewed.request(*valid_request(provider_token(iat=now)))[0] == 200, "25 minutes later is a lawful renewal"


def test_410_carries_the_time_apple_learnt_the_token_was_gone_in_milliseconds(client, fake_apns):
    fake_apns.by_token[TOKEN] = (410, "Unregistered")
    before = int(time.time() * 1000)
    status, body = client().request(*valid_request())
    assert status == 410 and body["reason"] == "Unregistered"
    assert before <= body["timestamp"] <= int(time.time() * 1000)


def test_refused_connections_until_the_fake_accepts_again(client, fake_apns):
    fake_apns.refuse_connections()
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", fake_apns.port), timeout=5).close()
    fake_apns.accept_connections()
    assert client().request(*valid_request())[0] == 200
