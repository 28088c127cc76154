"""Starting and stopping the real kumapush-relay as a process, with free ports and deadlines (no fixed sleeps)."""
import json
import os
import pathlib
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request


_handed_out = set()


def free_port() -> int:
    """A port free now and never handed out before in this test run. The kernel may give the same free port to two
    calls in a row, and the relay's listeners set SO_REUSEPORT (libmicrohttpd's LISTENING_ADDRESS_REUSE), so a PORT
    equal to METRICS_ADDR's port bound both and split the connections between them: POST /devices once answered 404
    from the metrics listener."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in _handed_out:
            _handed_out.add(port)
            return port


def wait_until(condition, timeout=20.0, interval=0.02, what="condition"):
    """Polls `condition` until it returns a truthy value or the deadline passes."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(interval)
    raise TimeoutError(f"timed out waiting for {what}")


class Relay:
    """One kumapush-relay subcommand running in the background."""

    def __init__(self, binary, command, env, log_path, args=(), prefix=()):
        """`prefix`: a command the relay runs under, e.g. `unshare --pid --fork` (a container's namespaces)."""
        self.env = env
        self.log_path = pathlib.Path(log_path)
        self.log = open(log_path, "ab")
        self.prefix = tuple(prefix)
        self.process = subprocess.Popen([*prefix, str(binary), command, *args], env=env, stdout=self.log, stderr=self.log)
        self.port = int(env.get("PORT", "0"))

    @property
    def base(self):
        return f"http://127.0.0.1:{self.port}{self.env.get('BASE_PATH', '')}"

    def wait_healthy(self, timeout=20.0):
        def healthy():
            if self.process.poll() is not None:
                raise RuntimeError(f"relay exited with {self.process.returncode}")
            try:
                return request("GET", self.base + "/health")[0] == 200
            except OSError:
                return False
        wait_until(healthy, timeout, what="/health")
        return self

    def wait_metrics(self, timeout=20.0):
        """Waits for the Prometheus listener (the sign a `deliver` process is up: it has no /health)."""
        url = f"http://{self.env['METRICS_ADDR']}/metrics"

        def up():
            if self.process.poll() is not None:
                raise RuntimeError(f"relay exited with {self.process.returncode}")
            try:
                return request("GET", url)[0] == 200
            except (OSError, ValueError):
                return False
        wait_until(up, timeout, what="/metrics")
        return self

    def signal(self, sig):
        self.process.send_signal(sig)

    def freeze(self):
        """SIGSTOP, returning once every thread of the process is stopped. kill(2) returns before that: the stop
        begins only when one thread is scheduled to take the signal, and until then the others run on (on a loaded
        machine, long enough to finish a transaction the caller meant to catch half-done). Only for a relay started
        without a `prefix`: with one, the process signalled and watched would be the wrapper."""
        assert not self.prefix, "freeze() would stop the wrapper, not the relay"
        self.process.send_signal(signal.SIGSTOP)

        def thread_stopped(task):
            try:
                # The state follows the parenthesised command name, which may itself hold spaces.
                return (task / "stat").read_text().rpartition(")")[2].split()[0] in ("T", "t")
            except (FileNotFoundError, ProcessLookupError):
                return True  # the thread ended

        def stopped():
            if self.process.poll() is not None:
                raise RuntimeError(f"relay exited with {self.process.returncode} before it could be frozen")
            return all(thread_stopped(task) for task in pathlib.Path(f"/proc/{self.process.pid}/task").iterdir())
        wait_until(stopped, timeout=30, what="every thread of the relay to stop")

    def wait(self, timeout=30.0):
        return self.process.wait(timeout=timeout)

    def stop(self):
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(timeout=10)
        self.log.close()


def request(method, url, body=None, headers=None, timeout=10.0):
    """(status, parsed JSON or None, headers) for one HTTP request; never raises on HTTP errors."""
    data = body if isinstance(body, (bytes, type(None))) else json.dumps(body).encode()
    all_headers = {"Content-Type": "application/json"} if data is not None else {}
    all_headers.update(headers or {})
    req = urllib.request.Request(url, data=data, method=method, headers=all_headers)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as response:
            raw = response.read()
            return response.status, (json.loads(raw) if raw and response.headers.get_content_type() == "application/json" else raw or None), dict(response.headers)
    except urllib.error.HTTPError as error:
        raw = error.read()
        return error.code, (json.loads(raw) if raw else None), dict(error.headers)


def relay_env(tmp_path, **overrides):
    env = {
        "PATH": os.environ.get("PATH", ""),
        "DATABASE_PATH": str(tmp_path / "relay.db"),
        "PORT": str(free_port()),
        "HOST": "127.0.0.1",
        "METRICS_ADDR": f"127.0.0.1:{free_port()}",
        "LOG_LEVEL": os.environ.get("RELAY_LOG_LEVEL", "warning"),
    }
    env.update({key: str(value) for key, value in overrides.items()})
    return env
