"""An independent APNs fake on Python's h2 and cryptography (DESIGN "Tests", tier 3).

It shares no code with the relay: TLS from Python's ssl module, HTTP/2 from hyper-h2, ES256 verification from
cryptography. So the relay's nghttp2, OpenSSL and JWT code is judged by someone else's implementation.

It is as strict as Apple (../shared/reference/apns.md §1.2, §1.4-1.6; issue #18): a new connection allows one stream
until a request with a valid provider token arrives, then `max_streams`, back to one after every rejected request
until one is accepted; a client that opens more gets GOAWAY, as APNs does. Requests are refused with Apple's status and reason for a repeated header, a missing or malformed device
token, an `apns-id` that is not a lower-case UUID, an `apns-expiration` that is not epoch seconds (digits, at most a
year ahead), an `apns-priority` other than 10, 5 or 1, an `apns-collapse-id` over 64 bytes, a missing or wrong topic
or push type, an empty or oversized payload, a provider token that is missing, unsigned, of another key or team or
over an hour old or issued over a minute ahead, a payload that is not a JSON dictionary (400 BadPayload), and a
provider token replaced on a connection less than 20 minutes after the one it replaces (429
TooManyProviderTokenUpdates). Token renewals are judged per connection, as Apple's engineer describes the
refusal ("that connection will be unusable", forums 675879), not per key and team: several relay processes share
one key, each with a token of its own, and judging per key would refuse every process but the first; a relay that
made a token per reconnect is caught instead by `ProviderTokenSource`'s tests (`DeliveryEngineTests`). 410 carries its `timestamp` in milliseconds. Breaches of the protocol itself (too many
streams) are also listed in `violations`.
"""
import asyncio
import base64
import itertools
import json
import re
import ssl
import threading
import time
import uuid

import h2.config
import h2.connection
import h2.errors
import h2.events
import h2.exceptions
import h2.settings
import hyperframe.frame
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature


UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
DEVICE_TOKEN = re.compile(r"(?:[0-9a-fA-F]{2}){16,256}")
TOKEN_RENEWAL_MINIMUM = 20 * 60   # seconds between provider tokens on one connection (Apple: "once every 20 minutes")
TOKEN_LIFETIME = 3600             # a provider token older than this is ExpiredProviderToken
CLOCK_SKEW = 60                   # a provider token issued further ahead than this is ExpiredProviderToken too


def _b64url_decode(text):
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class FakeAPNs:
    """Runs on its own thread and event loop. Faults are plain attributes, changed from the test thread."""

    def __init__(self, cert, key, public_key_pem, topic, max_streams=1000, key_id="KEY1234567", team_id="TEAM123456"):
        self.context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self.context.load_cert_chain(cert, key)
        self.context.set_alpn_protocols(["h2"])
        self.public_key = serialization.load_pem_public_key(open(public_key_pem, "rb").read())
        self.topic = topic
        self.key_id = key_id
        self.team_id = team_id
        self.max_streams = max_streams  # after the first request with a valid provider token; 1 before
        self.violations = []        # breaches of HTTP/2 as APNs enforces it (more streams than allowed)
        self.lock = threading.Lock()
        self.received = []          # dicts: token, status, reason, headers, payload, jwt_claims
        self.by_token = {}          # token -> (status, reason)
        self.fail_first = {}        # token -> how many more requests get 500
        self.unavailable = False    # every push gets 503
        self.goaway_after = None    # send GOAWAY after this many more pushes
        self.drop_next = False      # drop the connection on the next push
        self.hostile_next = None    # "endless_data", "ping_flood" or "settings_flood" on the next push
        self.drop_requests = False  # drop the connection of every push while set (a window of dropped connections)
        self.latency = 0.0          # seconds before each answer (a latency spike while nonzero)
        self.hold = False           # park every push unanswered until release() (to act while one is in flight)
        self.requests = []          # every request, answered or not: token, apns_id, payload, started, ended, status
        self.answers = itertools.count()  # answer_seq of each answered request: the order APNs accepted them in
        self.connections = 0
        self._held = []
        self._transports = set()
        self._server = None
        self.loop = asyncio.new_event_loop()
        self.port = None
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    # -- lifecycle ---------------------------------------------------------------------------------------------

    def start(self):
        self._thread.start()
        assert self._ready.wait(10), "fake APNs did not start"
        return self

    def stop(self):
        """Stops the fake; raises if the client broke HTTP/2 as APNs enforces it, so no test passes over that."""
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        assert not self.violations, f"the client broke APNs' rules: {self.violations}"

    def _run(self):
        asyncio.set_event_loop(self.loop)
        self._server = self.loop.run_until_complete(self._listen(0))
        self.port = self._server.sockets[0].getsockname()[1]
        self._ready.set()
        self.loop.run_forever()
        if self._server is not None:
            self._server.close()

    def _listen(self, port):
        return self.loop.create_server(lambda: _Protocol(self), "127.0.0.1", port, ssl=self.context)

    def _call(self, function, timeout=10):
        """Runs `function` on the fake's event loop and waits for it (faults that touch sockets happen there)."""
        return asyncio.run_coroutine_threadsafe(self._as_coroutine(function), self.loop).result(timeout)

    @staticmethod
    async def _as_coroutine(function):
        result = function()
        return await result if asyncio.iscoroutine(result) else result

    def refuse_connections(self):
        """APNs unreachable: the port is closed (connect() is refused) and every open connection is cut."""
        def refuse():
            if self._server is not None:
                self._server.close()
                self._server = None
            for transport in list(self._transports):
                _Protocol.of(transport).abort()
        self._call(refuse)

    def accept_connections(self):
        """Listens again on the same port after refuse_connections()."""
        async def accept():
            if self._server is None:
                self._server = await self._listen(self.port)
        self._call(accept)

    def release(self):
        """Answers every parked push (see `hold`) with the faults in force now, and stops parking."""
        def answer_held():
            self.hold = False
            held, self._held = self._held, []
            for protocol, stream_id in held:
                protocol.respond(stream_id)
        self._call(answer_held)

    # -- observation -------------------------------------------------------------------------------------------

    def pushes(self, token=None, status=200):
        with self.lock:
            return [r for r in self.received if (token is None or r["token"] == token) and (status is None or r["status"] == status)]

    def bodies(self, token):
        return [p["payload"]["aps"]["alert"]["body"] for p in self.pushes(token)]

    def count(self, status):
        with self.lock:
            return sum(1 for r in self.received if r["status"] == status)

    def held(self):
        """The requests parked by `hold`, oldest first."""
        with self.lock:
            return [r for r in self.requests if r["ended"] is None and r.get("held")]

    def in_flight(self):
        with self.lock:
            return [r for r in self.requests if r["ended"] is None]

    def drop_all(self):
        def drop():
            for transport in list(self._transports):
                _Protocol.of(transport).abort()
        self.loop.call_soon_threadsafe(drop)

    # -- what APNs would answer --------------------------------------------------------------------------------

    def verify_jwt(self, token):
        try:
            header_b64, claims_b64, signature_b64 = token.split(".")
            header = json.loads(_b64url_decode(header_b64))
            claims = json.loads(_b64url_decode(claims_b64))
            raw = _b64url_decode(signature_b64)
            if header.get("alg") != "ES256" or len(raw) != 64:
                return None
            signature = encode_dss_signature(int.from_bytes(raw[:32], "big"), int.from_bytes(raw[32:], "big"))
            self.public_key.verify(signature, f"{header_b64}.{claims_b64}".encode(), ec.ECDSA(hashes.SHA256()))
            return {"kid": header.get("kid"), "iss": claims.get("iss"), "iat": claims.get("iat")}
        except (ValueError, InvalidSignature, json.JSONDecodeError):
            return None

    def answer(self, header_list, body, connection):
        """(token, status, reason, claims) for one request, checked as APNs checks it. `connection` is the
        _Protocol it came on (provider tokens are judged per connection)."""
        headers = dict(header_list)
        path = headers.get(":path", "")
        token = path[len("/3/device/"):] if path.startswith("/3/device/") else ""
        if headers.get(":method") != "POST":
            return token, 405, "MethodNotAllowed", None
        if not path.startswith("/3/device/"):
            return token, 404, "BadPath", None
        names = [name for name, _ in header_list]
        if len(names) != len(set(names)):
            return token, 400, "DuplicateHeaders", None
        auth = headers.get("authorization", "")
        if not auth:
            return token, 403, "MissingProviderToken", None
        jwt = auth[len("bearer "):] if auth.startswith("bearer ") else ""
        claims = self.verify_jwt(jwt) if jwt else None
        if claims is None or claims["kid"] != self.key_id or claims["iss"] != self.team_id:
            return token, 403, "InvalidProviderToken", claims
        if not isinstance(claims["iat"], int) or claims["iat"] < time.time() - TOKEN_LIFETIME:
            return token, 403, "ExpiredProviderToken", claims
        # Issued in the future (a relay's clock stepped back, or a token made in milliseconds): Apple refuses it; bark
        # users saw ExpiredProviderToken after changing the system time (apns.md §1.5).
        if claims["iat"] > time.time() + CLOCK_SKEW:
            return token, 403, "ExpiredProviderToken", claims
        # A token is new when it was issued at another time (a signature differs on every signing, so the text
        # alone would take a re-signed token for a new one).
        if connection.jwt_iat is not None and claims["iat"] != connection.jwt_iat:
            if claims["iat"] - connection.jwt_iat < TOKEN_RENEWAL_MINIMUM:
                return token, 429, "TooManyProviderTokenUpdates", claims
        connection.jwt_iat = claims["iat"]
        connection.authenticated()
        if "apns-topic" not in headers:
            return token, 400, "MissingTopic", claims
        if headers["apns-topic"] != self.topic:
            return token, 400, "BadTopic", claims
        if headers.get("apns-push-type") != "alert":
            return token, 400, "InvalidPushType", claims
        if not token:
            return token, 400, "MissingDeviceToken", claims
        if not DEVICE_TOKEN.fullmatch(token):
            return token, 400, "BadDeviceToken", claims
        if "apns-id" in headers and not UUID.fullmatch(headers["apns-id"]):
            return token, 400, "BadMessageId", claims
        if "apns-expiration" in headers and not self.expiration_is_valid(headers["apns-expiration"]):
            return token, 400, "BadExpirationDate", claims
        if headers.get("apns-priority", "10") not in ("10", "5", "1"):
            return token, 400, "BadPriority", claims
        if len(headers.get("apns-collapse-id", "").encode()) > 64:
            return token, 400, "BadCollapseId", claims
        if not body:
            return token, 400, "PayloadEmpty", claims
        if len(body) > 4096:
            return token, 413, "PayloadTooLarge", claims
        # The payload is a JSON dictionary (apns.md §1.3). Apple documents no reason for one that is not; the fake
        # answers 400 BadPayload, so a relay that sent such a body would fail loudly instead of passing as delivered.
        try:
            if not isinstance(json.loads(body), dict):
                raise ValueError("not a dictionary")
        except ValueError:
            return token, 400, "BadPayload", claims
        with self.lock:
            if token in self.by_token:
                status, reason = self.by_token[token]
                return token, status, reason, claims
            if self.fail_first.get(token, 0) > 0:
                self.fail_first[token] -= 1
                return token, 500, "InternalServerError", claims
            if self.unavailable:
                return token, 503, "ServiceUnavailable", claims
        return token, 200, "", claims

    @staticmethod
    def expiration_is_valid(text):
        """UNIX epoch seconds as decimal digits: 0 (do not store) or a time. A value more than a year ahead can only
        be milliseconds (APNs stores for 30 days at most); it is BadExpirationDate, like anything not a number."""
        if not text.isdigit():
            return False
        value = int(text)
        return value == 0 or value <= time.time() + 365 * 86400


class _ClientResets:
    """Finds the client's RST_STREAM frames in the bytes of a connection before h2 reads them. h2 drops a reset of
    a stream it has already answered without a word, and that reset is what shows the client gave up on the request
    (APNS_REQUEST_TIMEOUT) before the answer reached it: the order checks forgive a late copy of such a job only."""
    PREFACE = 24  # "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

    def __init__(self):
        self.pending = b""
        self.preface_left = self.PREFACE

    def feed(self, data):
        """The stream ids of the RST_STREAM frames completed by `data`."""
        buffer, at, resets = self.pending + data, 0, []
        if self.preface_left:
            at = min(self.preface_left, len(buffer))
            self.preface_left -= at
        while len(buffer) - at >= 9:
            length = int.from_bytes(buffer[at:at + 3], "big")
            if len(buffer) - at < 9 + length:
                break
            if buffer[at + 3] == 0x3:
                resets.append(int.from_bytes(buffer[at + 5:at + 9], "big") & 0x7FFFFFFF)
            at += 9 + length
        self.pending = buffer[at:]
        return resets


class _Protocol(asyncio.Protocol):
    _by_transport = {}

    def __init__(self, fake):
        self.fake = fake
        self.conn = h2.connection.H2Connection(config=h2.config.H2Configuration(client_side=False, header_encoding="utf-8"))
        self.streams = {}
        self.open = {}      # stream id -> its record in fake.requests, until it is answered, reset or cut
        self.records = []   # every request record of this connection
        self.by_stream = {}  # stream id -> its record, answered or not (the client may reset it after the answer)
        self.resets = _ClientResets()
        self.reset_early = set()  # streams reset in the same read as their request, before h2 reported it
        self.transport = None
        self.jwt_iat = None  # when the provider token this connection uses was issued
        self.limit_raised = False
        self.advertised = 1  # the MAX_CONCURRENT_STREAMS this side last sent

    @classmethod
    def of(cls, transport):
        return cls._by_transport[transport]

    def connection_made(self, transport):
        self.transport = transport
        self.fake._transports.add(transport)
        _Protocol._by_transport[transport] = self
        with self.fake.lock:
            self.fake.connections += 1
        # APNs starts a token-authenticated connection at one stream (apns.md §1.5, §1.6).
        self.conn.local_settings = h2.settings.Settings(client=False, initial_values={
            h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS: 1,
            h2.settings.SettingCodes.MAX_HEADER_LIST_SIZE: self.conn.DEFAULT_MAX_HEADER_LIST_SIZE})
        self.conn.initiate_connection()
        transport.write(self.conn.data_to_send())

    def authenticated(self):
        """A request with a valid provider token arrived: raise the stream limit, as APNs does."""
        if not self.limit_raised:
            self.limit_raised = True
            self.advertise(self.fake.max_streams)

    def answered(self, status):
        """Apple drops a connection's stream limit to 1 right after it rejects a notification and raises it again
        after one it accepts (apns.md §1.6, openradar 27870881): a client that keeps its old limit gets GOAWAY."""
        if self.limit_raised:
            self.advertise(self.fake.max_streams if status == 200 else 1)

    def advertise(self, limit):
        if limit != self.advertised:
            self.advertised = limit
            self.conn.update_settings({h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS: limit})

    def connection_lost(self, exc):
        self.fake._transports.discard(self.transport)
        _Protocol._by_transport.pop(self.transport, None)
        self.end_all()
        # Whatever was answered on a connection that is gone may never have reached the client (a killed process:
        # the fake still reads what it had sent and answers into a dead socket, possibly seconds late).
        with self.fake.lock:
            for record in self.records:
                record["connection_lost"] = True

    def end_all(self):
        """Every request still open on this connection ends now, unanswered."""
        now = time.time()
        with self.fake.lock:
            for record in self.open.values():
                record["ended"] = now
        self.open.clear()

    def abort(self):
        """Cuts the connection without a word (the client sees a reset)."""
        self.end_all()
        self.transport.abort()

    def data_received(self, data):
        for stream_id in self.resets.feed(data):
            record = self.by_stream.get(stream_id)
            if record is None:
                self.reset_early.add(stream_id)
            else:
                with self.fake.lock:
                    record["reset_by_client"] = True
        try:
            events = self.conn.receive_data(data)
        except h2.exceptions.TooManyStreamsError:
            limit = self.conn.local_settings.max_concurrent_streams
            with self.fake.lock:
                self.fake.violations.append(f"a stream opened beyond the limit of {limit}")
            # h2 has queued a bare GOAWAY; APNs' carries its reason, so send that one instead.
            self.conn.data_to_send()
            self.transport.write(hyperframe.frame.GoAwayFrame(
                0, last_stream_id=self.conn.highest_inbound_stream_id, error_code=h2.errors.ErrorCodes.PROTOCOL_ERROR,
                additional_data=b'{"reason":"Maximum active streams violated for this endpoint"}').serialize())
            self.end_all()
            self.transport.close()
            return
        except Exception:  # a protocol error: APNs would close the connection too
            self.end_all()
            self.transport.close()
            return
        # A stream the client reset in these same bytes (its request timed out) is already closed inside h2 while
        # its earlier events are handled here: answering it would raise and cut the connection, leaving the request
        # looking answered and open until then. It is left unanswered, as APNs would: the client gave up on it.
        reset_here = {event.stream_id for event in events if isinstance(event, h2.events.StreamReset)}
        for event in events:
            if isinstance(event, h2.events.RequestReceived):
                headers = dict(event.headers)
                header_list = list(event.headers)
                path = headers.get(":path", "")
                record = {"token": path[len("/3/device/"):] if path.startswith("/3/device/") else "",
                          "apns_id": headers.get("apns-id"), "started": time.time(), "ended": None, "status": None}
                self.streams[event.stream_id] = {"headers": headers, "header_list": header_list, "body": b"",
                                                 "record": record}
                self.open[event.stream_id] = record
                self.records.append(record)
                self.by_stream[event.stream_id] = record
                if event.stream_id in self.reset_early:
                    record["reset_by_client"] = True
                with self.fake.lock:
                    self.fake.requests.append(record)
            elif isinstance(event, h2.events.DataReceived):
                self.streams[event.stream_id]["body"] += event.data
                self.conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
            elif isinstance(event, h2.events.StreamEnded):
                if event.stream_id not in reset_here:
                    self.request_complete(event.stream_id)
            elif isinstance(event, h2.events.StreamReset):
                self.streams.pop(event.stream_id, None)
                record = self.open.pop(event.stream_id, None)
                if record is not None:
                    with self.fake.lock:
                        record["ended"] = time.time()
        self.transport.write(self.conn.data_to_send())

    def request_complete(self, stream_id):
        """The whole request is in: answer now, later (latency), or when released (hold)."""
        fake = self.fake
        try:
            payload = json.loads(self.streams[stream_id]["body"])
        except ValueError:
            payload = None
        with fake.lock:
            self.streams[stream_id]["record"]["payload"] = payload
        if fake.hold:
            with fake.lock:
                self.streams[stream_id]["record"]["held"] = True
            fake._held.append((self, stream_id))
        elif fake.latency > 0:
            fake.loop.call_later(fake.latency, self.respond, stream_id)
        else:
            self.respond(stream_id)

    def misbehave(self, how, stream_id):
        """A broken or hostile server, as far as the client can tell."""
        if how == "endless_data":
            # A 200 whose body never ends (the client must give up on the stream, not buffer forever).
            self.conn.send_headers(stream_id, [(":status", "200")])
            self.transport.write(self.conn.data_to_send())
            for _ in range(40):
                if self.conn.local_flow_control_window(stream_id) < 65536:
                    break
                self.conn.send_data(stream_id, b"x" * 65536)
                self.transport.write(self.conn.data_to_send())
        elif how == "oversized_frame":
            # A frame header announcing 16 MiB, far over the client's maximum frame size: FRAME_SIZE_ERROR.
            self.transport.write(b"\xff\xff\xff\x00\x00" + stream_id.to_bytes(4, "big") + b"\x00" * 64)
        elif how == "huge_headers":
            # A response whose header block is 200 KB (one header), sent as HEADERS + CONTINUATION frames by hand.
            def integer(value, prefix_bits, first_byte_flags=0):
                limit = (1 << prefix_bits) - 1
                if value < limit:
                    return bytes([first_byte_flags | value])
                out, value = [first_byte_flags | limit], value - limit
                while value >= 128:
                    out.append((value % 128) + 128)
                    value //= 128
                return bytes(out + [value])
            value = b"a" * 200_000
            block = b"\x88" + b"\x00" + integer(1, 7) + b"x" + integer(len(value), 7) + value
            chunks = [block[i:i + 16384] for i in range(0, len(block), 16384)]
            frames = b""
            for index, chunk in enumerate(chunks):
                kind = b"\x01" if index == 0 else b"\x09"
                flags = (0x01 if index == 0 else 0) | (0x04 if index == len(chunks) - 1 else 0)
                frames += len(chunk).to_bytes(3, "big") + kind + bytes([flags]) + stream_id.to_bytes(4, "big") + chunk
            self.transport.write(frames)
        elif how == "settings_flood":
            for _ in range(20000):
                self.conn.update_settings({h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS: 100})
            self.transport.write(self.conn.data_to_send())
        elif how == "ping_flood":
            for _ in range(20000):
                self.conn.ping(b"12345678")
            self.transport.write(self.conn.data_to_send())

    def respond(self, stream_id):
        if stream_id not in self.streams or self.transport.is_closing():
            return  # reset by the client or cut meanwhile
        request = self.streams.pop(stream_id)
        record = self.open.pop(stream_id)
        fake = self.fake
        with fake.lock:
            drop = fake.drop_next or fake.drop_requests
            fake.drop_next = False
        if drop:
            self.open[stream_id] = record
            self.abort()
            return
        with fake.lock:
            hostile, fake.hostile_next = fake.hostile_next, None
        if hostile:
            with fake.lock:
                record["ended"] = time.time()
            return self.misbehave(hostile, stream_id)
        with fake.lock:
            goaway = False
            if fake.goaway_after is not None:
                if fake.goaway_after <= 0:
                    fake.goaway_after = None
                    goaway = True
                else:
                    fake.goaway_after -= 1
        token, status, reason, claims = fake.answer(request["header_list"], request["body"], self)
        self.answered(status)
        try:
            payload = json.loads(request["body"])
        except ValueError:
            payload = None
        apns_id = request["headers"].get("apns-id") or str(uuid.uuid4())
        now = time.time()
        with fake.lock:
            fake.received.append({"token": token, "status": status, "reason": reason, "headers": request["headers"],
                                  "payload": payload, "jwt": claims, "at": now})
            record["status"], record["reason"] = status, reason
            record["answer_seq"] = next(fake.answers)
        headers = [(":status", str(status)), ("apns-id", apns_id)]
        body = b""
        if status != 200:
            error = {"reason": reason}
            if status == 410:
                error["timestamp"] = int(now * 1000)  # when APNs learnt the token was gone, in milliseconds
            body = json.dumps(error).encode()
            headers.append(("content-type", "application/json"))
        self.conn.send_headers(stream_id, headers, end_stream=not body)
        if body:
            self.conn.send_data(stream_id, body, end_stream=True)
        if goaway:
            self.conn.close_connection(error_code=0, additional_data=b'{"reason":"Shutdown"}', last_stream_id=stream_id)
        self.transport.write(self.conn.data_to_send())
        with fake.lock:
            record["ended"] = time.time()
        if goaway:
            self.end_all()
            self.transport.close()
