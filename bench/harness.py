"""What every benchmark phase shares: processes, HTTP, the simulator, CPU and memory readings, isolation between
phases, and the median-of-runs summary."""
import json
import os
import pathlib
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

ROOT = pathlib.Path(__file__).resolve().parents[1]
BIN = ROOT / ".build" / "release"
RELAY = BIN / "kumapush-relay"
QUEUE_BENCH = BIN / "QueueBench"
# How the binaries are built: the Makefile's RELEASE_FLAGS, so the benchmark measures what `make release` and
# `make deb` ship (and shares `make test`'s release build instead of relinking it).
RELEASE_FLAGS = ("-c", "release", "--static-swift-stdlib")
TOPIC = "bench.kumapush.app"
PY = sys.executable
WORK = pathlib.Path(tempfile.mkdtemp(prefix="kumapush-bench-"))
TLS = WORK / "tls"
TICKS = os.sysconf("SC_CLK_TCK")
RUNS = int(os.environ.get("BENCH_RUNS") or 3)
# The simulator's event loops (apns-sim --threads): chosen where h2load runs fastest against it, see performance.md.
SIM_THREADS = int(os.environ.get("BENCH_SIM_THREADS") or 2)
WEBHOOK_BODY = ROOT / "Tests" / "Fixtures" / "webhooks" / "a-1.23-http-down.json"
processes = []


def step(message):
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(args, **kwargs):
    """subprocess.run with every argument turned into text."""
    return subprocess.run([str(a) for a in args], **kwargs)


def start(args, env=None, log=None):
    full_env = {**os.environ, "LOG_LEVEL": "warning", **(env or {})}  # env may set LOG_LEVEL itself
    out = open(log or os.devnull, "ab")
    process = subprocess.Popen([str(a) for a in args], env=full_env, stdout=out, stderr=out)
    processes.append(process)
    return process


def stop(process):
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()


def kill_all():
    for process in processes:
        if process.poll() is None:
            process.kill()


def peak_rss_mib(process):
    return _status_mib(process.pid, "VmHWM")


def rss_mib(process):
    return _status_mib(process.pid, "VmRSS")


def _status_mib(pid, field):
    try:
        return int(re.search(rf"{field}:\s+(\d+) kB", open(f"/proc/{pid}/status").read()).group(1)) / 1024
    except (OSError, AttributeError):
        return None


def cpu_seconds(pid):
    """User + system CPU time a live process has used so far (/proc/<pid>/stat fields 14 and 15)."""
    try:
        fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / TICKS
    except (OSError, IndexError, ValueError):
        return 0.0


def machine_busy_seconds():
    """CPU seconds the whole machine has spent busy so far, every core and process (/proc/stat: all but idle and
    iowait)."""
    fields = [int(v) for v in open("/proc/stat").readline().split()[1:]]
    return (sum(fields[:8]) - fields[3] - fields[4]) / TICKS


def disk_busy_seconds(path):
    """Seconds the block device holding `path` has had a request in flight so far (/sys/dev/block/M:m/stat's
    io_ticks, what iostat's %util is made of); 0 when the path is on no block device /sys/dev/block knows (tmpfs,
    overlayfs): read as unknown there, not idle."""
    device = os.stat(path).st_dev
    try:
        fields = open(f"/sys/dev/block/{os.major(device)}:{os.minor(device)}/stat").read().split()
    except OSError:
        return 0.0
    return int(fields[9]) / 1000


def children_of(pid):
    """Process ids whose parent is `pid` (a PostgreSQL server's backends)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if int(open(f"/proc/{entry}/stat").read().rsplit(")", 1)[1].split()[1]) == pid:
                    found.append(int(entry))
            except (OSError, IndexError, ValueError):
                pass
    return found


def run_with_rusage(args, stdout_path):
    """Runs a command to completion; returns (exit status, CPU seconds user + system from wait4, stdout text)."""
    with open(stdout_path, "w") as out:
        process = subprocess.Popen([str(a) for a in args], stdout=out, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(process.pid, 0)
        process.returncode = os.waitstatus_to_exitcode(status)
    return process.returncode, usage.ru_utime + usage.ru_stime, open(stdout_path).read()


def wait_until(condition, timeout=60, what="condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.05)
    raise TimeoutError(what)


def http(method, url, body=None, headers=None):
    request = urllib.request.Request(url, data=body, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()
    except OSError:
        return 0, b""


def healthy(port):
    return http("GET", f"http://127.0.0.1:{port}/health")[0] == 200


def metric(port, name):
    status, body = http("GET", f"http://127.0.0.1:{port}/metrics")
    total = 0.0
    for line in body.decode(errors="replace").splitlines():
        if line.startswith(name) and not line.startswith("#"):
            total += float(line.rsplit(" ", 1)[1])
    return total


def sqlite_store(path):
    return {"DATABASE_PATH": str(path)}


def postgres_store(url):
    return {"DATABASE_URL": url}


def relay_env(store, **extra):
    """`store`: sqlite_store(path) or postgres_store(url)."""
    env = {"RATE_LIMIT_REGISTER": "off", "RATE_LIMIT_WEBHOOK_IP": "off", "RATE_LIMIT_WEBHOOK_FAILED": "off",
           "QUEUE_MAX": "10000000", "HOST": "127.0.0.1", **store}
    env.update({k: str(v) for k, v in extra.items()})
    return env


def apns_env(sim_port):
    return {"APNS_URL": f"https://127.0.0.1:{sim_port}", "APNS_CA_FILE": str(TLS / "ca.pem"),
            "APNS_AUTH_KEY_PATH": str(TLS / "apns-key.p8"), "APNS_KEY_ID": "BENCHKEY01", "APNS_TEAM_ID": "BENCHTEAM1",
            "APP_BUNDLE_IDENTIFIER": TOPIC}


def start_sim(latency=0, record=None, threads=SIM_THREADS):
    port = free_port()
    args = [RELAY, "apns-sim", "--cert", TLS / "server.pem", "--key", TLS / "server.key", "--token-key", TLS / "apns-key.pub.pem",
            "--listen", f"127.0.0.1:{port}", "--topic", TOPIC, "--quiet", "--latency", latency, "--threads", threads]
    if record:
        args += ["--record", record]
    process = start(args, log=WORK / "sim.log")
    wait_until(lambda: run(["curl", "-s", "--http2", "--cacert", TLS / "ca.pem", f"https://127.0.0.1:{port}/sim/stats"],
                           capture_output=True).returncode == 0, what="simulator")
    return process, port


def sim_faults(port, faults):
    run(["curl", "-s", "--http2", "--cacert", TLS / "ca.pem", "-X", "POST", "-d", json.dumps(faults),
         f"https://127.0.0.1:{port}/sim/faults"], check=True, capture_output=True)


def register(port, seeds):
    """Registers one device per seed; returns [(device id, auth token)]."""
    devices = []
    for seed in seeds:
        status, body = http("POST", f"http://127.0.0.1:{port}/devices", json.dumps({"device_token": f"{seed:064x}"}).encode(),
                            {"Content-Type": "application/json"})
        answer = json.loads(body)
        devices.append((answer["id"], answer["auth_token"]))
    return devices


def devices_file(port, count, folder):
    """Registers `count` devices and writes their ids, one a line (for loadgen.py and the wrk script)."""
    path = folder / "devices.txt"
    path.write_text("\n".join(device for device, _ in register(port, range(1, count + 1))))
    return path


def wrk(port, body_file, ids_file, folder, seconds=10, connections=64):
    """wrk posting `body_file` to /wh/<id>, the id picked at random from `ids_file` per request.
    Returns (requests/s, non-2xx answers, requests answered)."""
    script = folder / "post.lua"
    script.write_text('wrk.method = "POST"\nwrk.headers["Content-Type"] = "application/json"\n'
                      f'local f = io.open("{body_file}", "rb")\nwrk.body = f:read("*a")\nf:close()\n'
                      f'local ids = {{}}\nfor line in io.lines("{ids_file}") do ids[#ids + 1] = line end\n'
                      'request = function() return wrk.format(nil, "/wh/" .. ids[math.random(#ids)]) end\n')
    result = run(["wrk", "-t1", f"-c{connections}", f"-d{seconds}s", "-s", str(script), f"http://127.0.0.1:{port}"],
                 capture_output=True, text=True)
    match = re.search(r"Requests/sec:\s+([\d.]+)", result.stdout)
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", result.stdout)
    total = re.search(r"(\d+) requests in", result.stdout)
    return (float(match.group(1)) if match else 0.0, int(non2xx.group(1)) if non2xx else 0, int(total.group(1)) if total else 0)


def jobs_in(store):
    stats = json.loads(run([RELAY, "stats", "--json"], env=dict(os.environ, LOG_LEVEL="error", **store),
                           capture_output=True, text=True).stdout)
    return sum(stats["jobs"].values())


def queue_empty(store):
    return jobs_in(store) == 0


def percentile(sorted_values, q):
    if not sorted_values:
        return None
    return round(sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))], 2)


def least_squares_slope(points):
    """Slope of the least-squares line through [(x, y)]."""
    n = len(points)
    if n < 2:
        return None
    mean_x = sum(x for x, _ in points) / n
    mean_y = sum(y for _, y in points) / n
    spread = sum((x - mean_x) ** 2 for x, _ in points)
    return sum((x - mean_x) * (y - mean_y) for x, y in points) / spread if spread else None


def summary(values):
    """One figure over several runs: its median, judged against targets, and its spread."""
    values = [v for v in values if v is not None]
    if not values:
        return None
    rounded = lambda v: round(v, 3) if isinstance(v, float) and abs(v) < 100 else round(v)
    return {"median": rounded(statistics.median(values)), "min": rounded(min(values)), "max": rounded(max(values)),
            "runs": [rounded(v) for v in values]}


def summarize(runs):
    """[{figure: value}] of several runs → {figure: summary}."""
    keys = [k for k in runs[0] if isinstance(runs[0][k], (int, float))]
    return {k: summary([r.get(k) for r in runs]) for k in keys}


def phase_folder(name):
    folder = WORK / name
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def isolate(previous_folder=None, pause=3.0):
    """Between phases: the previous phase's files deleted, dirty pages written, the page cache dropped (where this
    process may: root on Linux), and a pause, so no phase measures an earlier one's leftovers."""
    if previous_folder is not None:
        shutil.rmtree(previous_folder, ignore_errors=True)
    os.sync()
    try:
        with open("/proc/sys/vm/drop_caches", "w") as caches:
            caches.write("3\n")
    except OSError:
        pass
    time.sleep(pause)
