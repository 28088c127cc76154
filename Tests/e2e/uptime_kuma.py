"""Uptime Kuma's real webhook client (uptime_kuma_client.js: the real axios and form-data) and real alerts for it.

Shared by test_uptime_kuma_clients.py and Tests/Fixtures/webhooks/capture_real_clients.py.
"""
import copy
import json
import os
import pathlib
import subprocess

HERE = pathlib.Path(__file__).resolve().parent
CLIENT = HERE / "uptime_kuma_client.js"
FIXTURES = HERE.parent / "Fixtures" / "webhooks"
NODE_PATH = "/usr/share/nodejs"  # Debian's node-axios and node-form-data (scripts/install-deps.sh)

# The template users write first, and the plain-text one (SPEC §2.2). Liquid does not escape {{msg}}.
JSON_TEMPLATE = '{"title":"{{name}}","body":"{{msg}}"}'
TEXT_TEMPLATE = "{{status}} {{name}}: {{msg}}"

# Uptime Kuma's webhook settings for each way of sending (reference/uptime-kuma-webhook.md §1.1, §1.2).
MODES = {
    "json": {"webhookContentType": "json"},
    "form-data": {"webhookContentType": "form-data"},
    "custom": {"webhookContentType": "custom", "webhookCustomBody": JSON_TEMPLATE},
    "custom-json-header": {"webhookContentType": "custom", "webhookCustomBody": JSON_TEMPLATE,
                           "webhookAdditionalHeaders": '{"Content-Type": "application/json"}'},
    "custom-text": {"webhookContentType": "custom", "webhookCustomBody": TEXT_TEMPLATE},
    "get": {"httpMethod": "get", "webhookContentType": "json"},
    # A header override users try (#4901): axios then form-encodes the object in bracket notation.
    "json-urlencoded-header": {"webhookContentType": "json",
                               "webhookAdditionalHeaders": '{"Content-Type": "application/x-www-form-urlencoded"}'},
}

_EXAMPLE = json.loads((FIXTURES / "b-2.5-http-down-in-group.json").read_text())


def _monitor(monitor_id, name, kind, **fields):
    """A 2.5 monitor object (88 keys, as Uptime Kuma sends it) with the given identity."""
    monitor = copy.deepcopy(_EXAMPLE["monitor"])
    monitor.update(id=monitor_id, name=name, type=kind, pathName=f"Production / {name}", path=["Production", name], **fields)
    return monitor


def _heartbeat(monitor_id, status, msg, saved_response=False):
    """A 2.5 heartbeat; `response` only where an HTTP monitor saved the error page."""
    heartbeat = copy.deepcopy(_EXAMPLE["heartbeat"])
    heartbeat.update(monitorID=monitor_id, status=status, msg=msg)
    if not saved_response:
        heartbeat.pop("response")
    if status == 1:
        heartbeat["retries"] = 0
    return heartbeat


# Messages as Uptime Kuma's monitors write them (reference §3): iputils ping output (multi-line, "100%"), an axios
# error, a keyword miss quoting the first 47 characters of the page (quotes, a tab, newlines, backslashes), an UP
# with 4-byte emoji in the name, and the Test button.
PING_OUTPUT = ("PING 10.20.0.7 (10.20.0.7) 56(84) bytes of data.\n\n--- 10.20.0.7 ping statistics ---\n"
               "1 packets transmitted, 0 received, 100% packet loss, time 0ms\n\n")
PAGE = '<html lang="en">\n<head>\n\t<title>Shop "Main" C:\\shop\\status</title></head><body>'
KEYWORD_MISS = f"200 - OK, but keyword is not in [{PAGE[:47]}...]"
# A keyword monitor on a JSON health endpoint: pages of 50 characters or fewer are quoted whole, longer ones cut.
JSON_PAGE_SHORT = '{"status":"error"}'
JSON_PAGE_LONG = '{"status":"error","db":"down","cache":"ok","queue":"stalled"}'

EVENTS = {
    "ping-down": (_monitor(15, "NAS ping", "ping", hostname="10.20.0.7", url="https://"),
                  _heartbeat(15, 0, PING_OUTPUT)),
    "http-down": (_monitor(12, "Shop API", "http"), _heartbeat(12, 0, "Request failed with status code 503", saved_response=True)),
    "keyword-down": (_monitor(21, 'Shop "Main" page', "keyword", keyword="healthy"), _heartbeat(21, 0, KEYWORD_MISS)),
    "keyword-json-short-down": (_monitor(22, "Orders API", "keyword", keyword="healthy"),
                                _heartbeat(22, 0, f"200 - OK, but keyword is not in [{JSON_PAGE_SHORT}]")),
    "keyword-json-long-down": (_monitor(23, "Orders API", "keyword", keyword="healthy"),
                               _heartbeat(23, 0, f"200 - OK, but keyword is not in [{JSON_PAGE_LONG[:47]}...]")),
    "http-up-emoji": (_monitor(33, "Web 🐘🔴 \\ edge", "http"), _heartbeat(33, 1, "200 - OK")),
    "test-button": (None, None),
}
TEST_MESSAGE = "My Webhook Alert (1) Testing"


def uptime_kuma_msg(monitor, heartbeat):
    """Monitor.sendNotification's `msg`."""
    if heartbeat is None:
        return TEST_MESSAGE
    return f"[{monitor['name']}] [{'✅ Up' if heartbeat['status'] == 1 else '🔴 Down'}] {heartbeat['msg']}"


def rendered(template, monitor, heartbeat):
    """What the template stand-in renders (for what a push must say)."""
    status = "⚠️ Test" if heartbeat is None else ("🔴 Down" if heartbeat["status"] == 0 else "✅ Up")
    name = "Monitor Name not available" if monitor is None else monitor["name"]
    return (template.replace("{{status}}", status).replace("{{name}}", name)
            .replace("{{msg}}", uptime_kuma_msg(monitor, heartbeat)))


def send(url, mode, event, timeout=60):
    """Sends one event the way Uptime Kuma does in `mode` (a MODES name, or the notification settings themselves);
    returns the client's {ok, status, data, error}."""
    monitor, heartbeat = EVENTS[event]
    request = {"url": url, "notification": MODES[mode] if isinstance(mode, str) else mode, "monitorJSON": monitor, "heartbeatJSON": heartbeat,
               "msg": uptime_kuma_msg(monitor, heartbeat)}
    env = dict(os.environ, NODE_PATH=NODE_PATH)
    done = subprocess.run(["node", str(CLIENT)], input=json.dumps(request).encode(), capture_output=True, env=env,
                          timeout=timeout)
    assert done.stdout, f"the client printed nothing: {done.stderr.decode(errors='replace')}"
    return json.loads(done.stdout)


def monitor_alert(monitor_id, name, status, msg):
    """One of a large Uptime Kuma's HTTP monitors changing state, as (monitor, heartbeat) the way 2.5 sends them."""
    return _monitor(monitor_id, name, "http"), _heartbeat(monitor_id, status, msg)


def webhook(url, mode, monitor, heartbeat, local_address=None):
    """One request for send_many: `monitor`/`heartbeat` sent in `mode`, from `local_address` (another Uptime Kuma
    host, e.g. 127.0.0.2) when given."""
    request = {"url": url, "notification": MODES[mode] if isinstance(mode, str) else mode, "monitorJSON": monitor,
               "heartbeatJSON": heartbeat, "msg": uptime_kuma_msg(monitor, heartbeat)}
    if local_address:
        request["localAddress"] = local_address
    return request


def send_many(requests, timeout=120):
    """Sends every request at once from one client process, as Uptime Kuma's monitors do when they all fail
    together; returns the results ({ok, status, data, error}) in the same order."""
    env = dict(os.environ, NODE_PATH=NODE_PATH)
    done = subprocess.run(["node", str(CLIENT)], input=json.dumps(requests).encode(), capture_output=True, env=env,
                          timeout=timeout)
    assert done.returncode == 0 and done.stdout, f"the client failed: {done.stderr.decode(errors='replace')}"
    results = json.loads(done.stdout)
    assert len(results) == len(requests)
    return results
