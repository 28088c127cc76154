"""Playing systemd for a relay process: a listening socket it is handed as fd 3 (socket activation, `LISTEN_FDS`,
`LISTEN_PID`) and a `NOTIFY_SOCKET` whose datagrams the test reads (READY=1, WATCHDOG=1, STOPPING=1)."""
import os
import socket
import subprocess
import threading
import time


def listening_socket():
    """What a `.socket` unit holds: a TCP socket bound to a free loopback port, listening, never closed between
    the processes it is handed to."""
    held = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    held.bind(("127.0.0.1", 0))
    held.listen(1024)
    return held


def start_activated(binary, command, env, log_path, listener=None, notify_path=None, watchdog_for_self=False):
    """Starts `kumapush-relay command` the way systemd does: the listener as fd 3 with LISTEN_FDS=1 and LISTEN_PID
    set to the relay's own pid (the shell execs the relay, so `$$` is its pid), NOTIFY_SOCKET if given, and
    WATCHDOG_PID naming the relay when `watchdog_for_self` (WATCHDOG_USEC comes with `env`)."""
    env = dict(env)
    if notify_path:
        env["NOTIFY_SOCKET"] = str(notify_path)
    log = open(log_path, "ab")
    exports = ("LISTEN_PID=$$ LISTEN_FDS=1 " if listener is not None else "") + ("WATCHDOG_PID=$$ " if watchdog_for_self else "")
    arguments = ["sh", "-c", exports + 'exec "$@"', "sh", str(binary), command]
    if listener is None:
        return subprocess.Popen(arguments, env=env, stdout=log, stderr=log)
    source = listener.fileno()
    return subprocess.Popen(arguments, env=env, stdout=log, stderr=log, pass_fds=(3,),
                            preexec_fn=lambda: os.dup2(source, 3))


class NotifySocket:
    """A unix datagram socket standing in for systemd's notification socket; records every message with the time
    it arrived (monotonic), on a thread of its own."""

    def __init__(self, path):
        self.path = str(path)
        self.socket = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.socket.bind(self.path)
        self.socket.settimeout(0.2)
        self.messages = []
        self.lock = threading.Lock()
        self.running = True
        self.thread = threading.Thread(target=self._receive, daemon=True)
        self.thread.start()

    def _receive(self):
        while self.running:
            try:
                data = self.socket.recv(4096)
            except socket.timeout:
                continue
            with self.lock:
                self.messages.append((time.monotonic(), data.decode()))

    def fields(self):
        """Every KEY=VALUE line received, in order, as (time, key, value)."""
        with self.lock:
            return [(at, *line.split("=", 1)) for at, message in self.messages for line in message.splitlines()]

    def times(self, key, value="1"):
        return [at for at, k, v in self.fields() if k == key and v == value]

    def close(self):
        self.running = False
        self.thread.join(5)
        self.socket.close()
