#!/usr/bin/env python3
"""Captures the exact bytes Uptime Kuma's webhook client sends (real axios + form-data via Tests/e2e/uptime_kuma_client.js)
into real-*.http fixtures: request line, headers and body as they came off the socket (chunked bodies stay chunked).
The path is /wh/DEVICE_ID_HERE (14 characters, like a device id) for the tests to replace.

    NODE_PATH=/usr/share/nodejs python3 Tests/Fixtures/webhooks/capture_real_clients.py
"""
import pathlib
import socket
import sys
import threading

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1] / "e2e"))
import uptime_kuma  # noqa: E402

PLACEHOLDER = "DEVICE_ID_HERE"
CASES = {  # fixture name -> (mode, event)
    "real-json-ping-down.http": ("json", "ping-down"),
    "real-form-data-keyword-down.http": ("form-data", "keyword-down"),
    "real-custom-ping-down.http": ("custom", "ping-down"),
    "real-custom-keyword-down.http": ("custom", "keyword-down"),
    "real-custom-keyword-json-short-down.http": ("custom", "keyword-json-short-down"),
    "real-custom-keyword-json-long-down.http": ("custom", "keyword-json-long-down"),
    "real-custom-json-header-ping-down.http": ("custom-json-header", "ping-down"),
    "real-custom-json-header-http-down.http": ("custom-json-header", "http-down"),
    "real-custom-text-ping-down.http": ("custom-text", "ping-down"),
    "real-json-urlencoded-header-http-down.http": ("json-urlencoded-header", "http-down"),
    "real-get-http-up.http": ("get", "http-up-emoji"),
    "real-get-test-button.http": ("get", "test-button"),
}


def read_request(connection):
    """One HTTP/1.1 request's bytes: headers, then Content-Length bytes or chunks up to the last one."""
    data = b""
    while b"\r\n\r\n" not in data:
        data += connection.recv(65536)
    head, _, body = data.partition(b"\r\n\r\n")
    headers = {line.split(b":", 1)[0].strip().lower(): line.split(b":", 1)[1].strip()
               for line in head.split(b"\r\n")[1:]}
    if b"content-length" in headers:
        while len(body) < int(headers[b"content-length"]):
            body += connection.recv(65536)
    elif headers.get(b"transfer-encoding") == b"chunked":
        while not body.endswith(b"0\r\n\r\n"):
            body += connection.recv(65536)
    return head + b"\r\n\r\n" + body


def capture(mode, event):
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        server.settimeout(30)
        captured = {}

        def serve():
            connection, _ = server.accept()
            with connection:
                connection.settimeout(30)
                captured["bytes"] = read_request(connection)
                connection.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}")

        thread = threading.Thread(target=serve)
        thread.start()
        result = uptime_kuma.send(f"http://127.0.0.1:{server.getsockname()[1]}/wh/{PLACEHOLDER}", mode, event)
        thread.join(30)
        assert result["ok"], result
        return captured["bytes"]


if __name__ == "__main__":
    for name, (mode, event) in CASES.items():
        raw = capture(mode, event)
        # The port of this capture run is no part of what a client sends: pin it so re-captures diff cleanly.
        head, _, body = raw.partition(b"\r\n\r\n")
        head = b"\r\n".join(b"Host: 127.0.0.1:4321" if line.lower().startswith(b"host:") else line
                            for line in head.split(b"\r\n"))
        (HERE / name).write_bytes(head + b"\r\n\r\n" + body)
        print(f"{name}: {len(raw)} bytes")
