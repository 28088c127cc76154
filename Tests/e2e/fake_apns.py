"""An independent APNs fake on Python's h2 and cryptography (DESIGN "Tests", tier 3).

It shares no code with the relay: TLS from Python's ssl module, HTTP/2 from hyper-h2, ES256 verification from
cryptography. So the relay's nghttp2, OpenSSL and JWT code is judged by someone else's implementation.
"""
import asyncio
import base64
import json
import ssl
import threading
import time
import uuid

import h2.config
import h2.connection
import h2.events
import h2.settings
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature


def _b64url_decode(text):
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class FakeAPNs:
    """Runs on its own thread and event loop. Faults are plain attributes, changed from the test thread."""

    def __init__(self, cert, key, public_key_pem, topic, max_streams=1000):
        self.context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self.context.load_cert_chain(cert, key)
        self.context.set_alpn_protocols(["h2"])
        self.public_key = serialization.load_pem_public_key(open(public_key_pem, "rb").read())
        self.topic = topic
        self.max_streams = max_streams
        self.lock = threading.Lock()
        self.received = []          # dicts: token, status, reason, headers, payload, jwt_claims
        self.by_token = {}          # token -> (status, reason)
        self.fail_first = {}        # token -> how many more requests get 500
        self.unavailable = False    # every push gets 503
        self.goaway_after = None    # send GOAWAY after this many more pushes
        self.drop_next = False      # drop the connection on the next push
        self.hostile_next = None    # "endless_data", "ping_flood" or "settings_flood" on the next push
        self.connections = 0
        self._transports = set()
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
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)

    def _run(self):
        asyncio.set_event_loop(self.loop)
        server = self.loop.run_until_complete(
            self.loop.create_server(lambda: _Protocol(self), "127.0.0.1", 0, ssl=self.context))
        self.port = server.sockets[0].getsockname()[1]
        self._ready.set()
        self.loop.run_forever()
        server.close()

    # -- observation -------------------------------------------------------------------------------------------

    def pushes(self, token=None, status=200):
        with self.lock:
            return [r for r in self.received if (token is None or r["token"] == token) and (status is None or r["status"] == status)]

    def bodies(self, token):
        return [p["payload"]["aps"]["alert"]["body"] for p in self.pushes(token)]

    def count(self, status):
        with self.lock:
            return sum(1 for r in self.received if r["status"] == status)

    def drop_all(self):
        def drop():
            for transport in list(self._transports):
                transport.abort()
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

    def answer(self, headers, body):
        path = headers.get(":path", "")
        token = path[len("/3/device/"):] if path.startswith("/3/device/") else ""
        if headers.get(":method") != "POST":
            return token, 405, "MethodNotAllowed", None
        if not path.startswith("/3/device/"):
            return token, 404, "BadPath", None
        auth = headers.get("authorization", "")
        claims = self.verify_jwt(auth[len("bearer "):]) if auth.startswith("bearer ") else None
        if claims is None:
            return token, 403, "InvalidProviderToken", None
        if claims["iat"] is None or claims["iat"] < time.time() - 3600:
            return token, 403, "ExpiredProviderToken", claims
        if headers.get("apns-topic") != self.topic:
            return token, 400, "BadTopic", claims
        if headers.get("apns-push-type") != "alert":
            return token, 400, "InvalidPushType", claims
        if not body:
            return token, 400, "PayloadEmpty", claims
        if len(body) > 4096:
            return token, 413, "PayloadTooLarge", claims
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


class _Protocol(asyncio.Protocol):
    def __init__(self, fake):
        self.fake = fake
        self.conn = h2.connection.H2Connection(config=h2.config.H2Configuration(client_side=False, header_encoding="utf-8"))
        self.streams = {}
        self.transport = None

    def connection_made(self, transport):
        self.transport = transport
        self.fake._transports.add(transport)
        with self.fake.lock:
            self.fake.connections += 1
        self.conn.initiate_connection()
        self.conn.update_settings({h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS: self.fake.max_streams})
        transport.write(self.conn.data_to_send())

    def connection_lost(self, exc):
        self.fake._transports.discard(self.transport)

    def data_received(self, data):
        try:
            events = self.conn.receive_data(data)
        except Exception:  # a protocol error: APNs would close the connection too
            self.transport.close()
            return
        for event in events:
            if isinstance(event, h2.events.RequestReceived):
                self.streams[event.stream_id] = {"headers": dict(event.headers), "body": b""}
            elif isinstance(event, h2.events.DataReceived):
                self.streams[event.stream_id]["body"] += event.data
                self.conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
            elif isinstance(event, h2.events.StreamEnded):
                self.respond(event.stream_id)
        self.transport.write(self.conn.data_to_send())

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
        request = self.streams.pop(stream_id)
        fake = self.fake
        with fake.lock:
            if fake.drop_next:
                fake.drop_next = False
                self.transport.abort()
                return
            hostile, fake.hostile_next = fake.hostile_next, None
        if hostile:
            return self.misbehave(hostile, stream_id)
        with fake.lock:
            goaway = False
            if fake.goaway_after is not None:
                if fake.goaway_after <= 0:
                    fake.goaway_after = None
                    goaway = True
                else:
                    fake.goaway_after -= 1
        token, status, reason, claims = fake.answer(request["headers"], request["body"])
        try:
            payload = json.loads(request["body"])
        except ValueError:
            payload = None
        apns_id = request["headers"].get("apns-id") or str(uuid.uuid4())
        with fake.lock:
            fake.received.append({"token": token, "status": status, "reason": reason, "headers": request["headers"],
                                  "payload": payload, "jwt": claims})
        headers = [(":status", str(status)), ("apns-id", apns_id)]
        body = b""
        if status != 200:
            body = json.dumps({"reason": reason}).encode()
            headers.append(("content-type", "application/json"))
        self.conn.send_headers(stream_id, headers, end_stream=not body)
        if body:
            self.conn.send_data(stream_id, body, end_stream=True)
        if goaway:
            self.conn.close_connection(error_code=0, additional_data=b'{"reason":"Shutdown"}', last_stream_id=stream_id)
            self.transport.write(self.conn.data_to_send())
            self.transport.close()
