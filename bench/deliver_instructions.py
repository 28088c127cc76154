"""Instructions the `deliver` process spends per push, counted by callgrind (deterministic where CPU seconds on a
shared host are not), split by where they go. For each of two queue depths (--jobs, --baseline-jobs) it prefills a
relay database (`QueueBench prefill DB N 1000`: N jobs over 1,000 devices, every device's next job behind its
head), starts `apns-sim` (not measured) and runs `deliver` (DEVICE_BURST=off) under
`valgrind --tool=callgrind --separate-threads=no` until the jobs table is empty, then stops it with SIGTERM.
Per push = (instructions of the big run − those of the small run) / (jobs − baseline jobs): start-up (key, TLS
handshake, first provider token) and shutdown cancel out.

Areas, from `callgrind_annotate --inclusive=yes` (inclusive counts of functions that do not nest in one another;
a function shown under several files counts once, with its largest figure):
  store        the engine's calls into the store (the SQLiteStore protocol witnesses: claim, finish,
               changeCounter, …) and the store's WAL threads — the queue's own floor, SQLite included
  engine       the delivery thread without the store calls: wording the push, JSON payload, request and headers,
               provider token lookup, answers, metrics
  event loops  the APNs connections' threads (EventLoop.run): HTTP/2 (nghttp2), TLS (OpenSSL), the connection
               state, socket calls, and the completion handing each answer back
  other        everything else (metrics server, reconnect queue, process start-up left after the subtraction)
(OpenSSL and nghttp2 are not areas of their own: libcrypto's stripped, recursive internals make inclusive counts
hard to read; their self counts by library below say what they cost.)
Then by library (self counts): SQLite, OpenSSL, nghttp2, jemalloc (the binary's malloc since the twenty-ninth session;
glibc's before, counted under libc), libc (memcpy, locks), and the relay's own code
with the Swift runtime and standard library (linked statically: retain/release, hashing, allocation paths).
Last, h2load (2 connections × 500 streams, as `make bench` runs it) sends the same number of requests to the same
simulator under callgrind, for the target of SPEC §7 in the same unit: instructions per request; and `QueueBench
floor` claims and completes 10,000 and 1,000 jobs of the delivery floor's setup, whose difference is the floor in
instructions per job: SPEC §7's "deliverer minus the floor" row, counted instead of timed.
User-space instructions only: the kernel's side of each syscall is not counted.

Usage: python3 bench/deliver_instructions.py [--jobs 20000] [--baseline-jobs 2000] [--relay PATH]
         [--queue-bench PATH] [--output FILE] [--top 40] [--reuse DIR]
(needs valgrind and a release build: swift build -c release --static-swift-stdlib --product kumapush-relay, and
--product QueueBench). --output writes the figures and the big run's top functions (inclusive and self) as
Markdown; --reuse DIR analyses the callgrind outputs an earlier run left in DIR (its path is printed) again.
Takes 2–5 minutes on the shared 2-core machine."""
import argparse
import os
import re
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOPIC = "bench.kumapush.app"
# Inclusive counts of these functions make the areas (demangled with --simplified, matched as regular expressions).
# A function callgrind shows under several files (inlined code) counts once, with its largest figure.
AREAS = {
    # The thread body (its closure in start() is numbered by the closures before it, so matched by what it runs).
    "delivery thread": [r"^DeliveryEngine\.run\(\)$"],
    "store calls": [r"^protocol witness for \w+\.\w+\(.*\) in conformance SQLiteStore$"],
    "store threads": [r"^partial apply for closure #1 in WAL\w+\.init\("],
    "event loops": [r"^partial apply for closure #1 in EventLoop\.init\(name:\)$"],
}
# Self counts by library: where the instructions run, whichever thread.
LIBRARIES = {"sqlite": "libsqlite3", "openssl": "libssl|libcrypto", "nghttp2": "libnghttp2", "jemalloc": "libjemalloc",
             "libc": "libc\\.so|ld-linux",
             "relay (Swift)": "RELAY"}


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def wait_until(condition, what, seconds=120):
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.2)


def queued(database):
    try:
        with sqlite3.connect(f"file:{database}?mode=ro", uri=True, timeout=5) as db:
            return db.execute("SELECT count(*) FROM jobs").fetchone()[0]
    except sqlite3.OperationalError:
        return None


def start_sim(relay, tls):
    port = free_port()
    sim = subprocess.Popen([relay, "apns-sim", "--cert", f"{tls}/server.pem", "--key", f"{tls}/server.key",
                            "--token-key", f"{tls}/apns-key.pub.pem", "--listen", f"127.0.0.1:{port}", "--topic", TOPIC,
                            "--quiet", "--threads", "2"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def up():
        with socket.socket() as probe:
            return probe.connect_ex(("127.0.0.1", port)) == 0
    wait_until(up, "apns-sim")
    return sim, port


def profile(relay, queue_bench, work, tls, sim_port, jobs):
    """One measured drain of `jobs` (its callgrind output: WORK/callgrind-JOBS.out)."""
    database = f"{work}/relay-{jobs}.db"
    subprocess.run([queue_bench, "prefill", database, str(jobs), "1000"], check=True)
    out = f"{work}/callgrind-{jobs}.out"
    env = dict(os.environ, DATABASE_PATH=database, HOST="127.0.0.1", QUEUE_MAX="10000000", DEVICE_BURST="off",
               LOG_LEVEL="warning", METRICS_ADDR=f"127.0.0.1:{free_port()}",
               APNS_URL=f"https://127.0.0.1:{sim_port}", APNS_CA_FILE=f"{tls}/ca.pem",
               APNS_AUTH_KEY_PATH=f"{tls}/apns-key.p8", APNS_KEY_ID="BENCHKEY01", APNS_TEAM_ID="BENCHTEAM1",
               APP_BUNDLE_IDENTIFIER=TOPIC)
    deliver = subprocess.Popen(["valgrind", "--tool=callgrind", "--separate-threads=no", f"--callgrind-out-file={out}",
                                relay, "deliver"], env=env, stdout=subprocess.DEVNULL, stderr=open(f"{work}/deliver-{jobs}.log", "w"))
    try:
        wait_until(lambda: queued(database) == 0 or deliver.poll() is not None, f"{jobs} pushes delivered", seconds=1800)
        if deliver.poll() is not None:
            raise RuntimeError(f"deliver exited early: see {work}/deliver-{jobs}.log")
    finally:
        deliver.send_signal(signal.SIGTERM)
        deliver.wait(timeout=300)
    return out


PROVIDER_TOKEN = """
import base64, json, sys, time
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature
b = lambda d: base64.urlsafe_b64encode(d).rstrip(b"=").decode()
key = serialization.load_pem_private_key(open(sys.argv[1], "rb").read(), None)
head = b(json.dumps({"alg": "ES256", "kid": "BENCHKEY01"}).encode()) + "." + b(json.dumps({"iss": "BENCHTEAM1", "iat": int(time.time())}).encode())
r, s = decode_dss_signature(key.sign(head.encode(), ec.ECDSA(hashes.SHA256())))
print(head + "." + b(r.to_bytes(32, "big") + s.to_bytes(32, "big")))
"""
# The relay's request for the prefilled jobs' kind of alert, as bench/phase_delivery.py sends it with h2load.
PAYLOAD = ('{"aps":{"alert":{"title":"Monitor 1 is down","body":"Request failed with status code 503"},"sound":"default",'
           '"interruption-level":"active","thread-id":"monitor-1"}}')


def h2load_instructions(work, tls, sim_port, requests):
    """Instructions of one h2load run (2 connections × 500 streams, as in `make bench`) sending `requests`."""
    python = os.path.join(ROOT, ".venv", "bin", "python")
    token = subprocess.run([python, "-c", PROVIDER_TOKEN, f"{tls}/apns-key.p8"], capture_output=True, text=True,
                           check=True).stdout.strip()
    with open(f"{work}/payload.json", "w") as payload:
        payload.write(PAYLOAD)
    out = f"{work}/h2load-{requests}.out"
    result = subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", "h2load", "-n", str(requests),
                             "-c", "2", "-m", "500", "-d", f"{work}/payload.json", "-H", f"authorization: bearer {token}",
                             "-H", f"apns-topic: {TOPIC}", "-H", "apns-push-type: alert", "-H", "apns-priority: 10",
                             "-H", "content-type: application/json", f"https://127.0.0.1:{sim_port}/3/device/{'ab' * 32}"],
                            capture_output=True, text=True, check=True)
    if f"{requests} 2xx" not in result.stdout:
        raise RuntimeError(f"h2load: not every request succeeded:\n{result.stdout}")
    return callgrind_total(out)


def floor_instructions(queue_bench, work, claims):
    """Instructions of `QueueBench floor` (the delivery floor's own setup: 10,000 queued, claimed and completed in
    batches of 1,000) claiming and completing `claims` jobs, the setup included (the caller subtracts it)."""
    out = f"{work}/floor-{claims}.out"
    subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", queue_bench, "floor", work, str(claims)],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return callgrind_total(out)


def callgrind_total(out):
    """The instructions a callgrind output file counts in all (its `summary:` or `totals:` line)."""
    with open(out) as data:
        return int(next(line.split()[1] for line in data if line.startswith(("summary:", "totals:"))))


def annotate(out, inclusive):
    text = subprocess.run(["callgrind_annotate", f"--inclusive={'yes' if inclusive else 'no'}", "--threshold=100", out],
                          capture_output=True, text=True, check=True).stdout
    return subprocess.run(["swift", "demangle", "--simplified"], input=text, capture_output=True, text=True, check=True).stdout


LINE = re.compile(r"\s*([\d,]+) \([\s\d.]+%\)\s+(\S*?):(.+?)(?: \[([^\]]*)\])?$")


def functions(text):
    """{function: instructions} from callgrind_annotate's per-function lines ("1,234 (5.6%)  file:function [obj]"),
    the largest figure of a name shown more than once (inclusive counts of one function under several files)."""
    table = {}
    for line in text.splitlines():
        match = LINE.match(line)
        if match and "PROGRAM TOTALS" not in line:
            name = match.group(3).strip()
            table[name] = max(table.get(name, 0), int(match.group(1).replace(",", "")))
    return table


def libraries(text, relay):
    """{library: self instructions}. A line without [object] is code inlined from another file: libc's own
    sources (./…) or the relay's (Swift sources, compiler-generated, the Swift shims)."""
    figures = dict.fromkeys(LIBRARIES, 0)
    figures["other libraries"] = 0
    for line in text.splitlines():
        match = LINE.match(line)
        if not match or "PROGRAM TOTALS" in line:
            continue
        source, library = match.group(2), match.group(4) or ""
        if not library:
            library = "libc.so" if source.startswith("./") else relay
        name = next((name for name, pattern in LIBRARIES.items()
                     if re.search(pattern.replace("RELAY", re.escape(os.path.basename(relay))), library)), "other libraries")
        figures[name] += int(match.group(1).replace(",", ""))
    return figures


def total(text):
    match = re.search(r"([\d,]+) \([\s\d.]+%\)\s+PROGRAM TOTALS", text)
    return int(match.group(1).replace(",", ""))


def areas(inclusive, exclusive, relay):
    table = functions(inclusive)
    figures = {"total": total(inclusive)}
    for area, patterns in AREAS.items():
        figures[area] = sum(count for name, count in table.items() if any(re.search(p, name) for p in patterns))
    figures["store"] = figures["store calls"] + figures["store threads"]
    figures["engine"] = figures["delivery thread"] - figures["store calls"]
    figures["other"] = figures["total"] - figures["delivery thread"] - figures["event loops"] - figures["store threads"]
    figures.update(libraries(exclusive, relay))
    return figures


ORDER = ["total", "store", "engine", "event loops", "other"]
# The floor's claims in the two QueueBench runs whose difference is counted.
FLOOR_CLAIMS = (10_000, 1_000)
BY_LIBRARY = list(LIBRARIES) + ["other libraries"]


def top(text, count):
    rows = [line for line in text.splitlines() if LINE.match(line)]
    return "\n".join(rows[: count + 1])


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=20000)
    parser.add_argument("--baseline-jobs", type=int, default=2000)
    parser.add_argument("--relay", default=os.path.join(ROOT, ".build", "release", "kumapush-relay"))
    parser.add_argument("--queue-bench", default=os.path.join(ROOT, ".build", "release", "QueueBench"))
    parser.add_argument("--output")
    parser.add_argument("--top", type=int, default=40)
    parser.add_argument("--reuse", help="a directory of an earlier run: analyse its callgrind outputs again")
    arguments = parser.parse_args()
    work = arguments.reuse or tempfile.mkdtemp(prefix="deliver-instructions-")
    outputs = [f"{work}/callgrind-{jobs}.out" for jobs in (arguments.jobs, arguments.baseline_jobs)]
    if not arguments.reuse:
        tls = f"{work}/tls"
        subprocess.run([os.path.join(ROOT, "scripts", "generate-test-certs.sh"), tls], check=True, stdout=subprocess.DEVNULL)
        sim, port = start_sim(arguments.relay, tls)
        try:
            for jobs in (arguments.jobs, arguments.baseline_jobs):
                profile(arguments.relay, arguments.queue_bench, work, tls, port, jobs)
            h2load = [h2load_instructions(work, tls, port, requests) for requests in (arguments.jobs, arguments.baseline_jobs)]
            with open(f"{work}/h2load.txt", "w") as saved:
                saved.write(f"{h2load[0]} {h2load[1]}\n")
            floor = [floor_instructions(arguments.queue_bench, work, claims) for claims in FLOOR_CLAIMS]
            with open(f"{work}/floor.txt", "w") as saved:
                saved.write(f"{floor[0]} {floor[1]}\n")
        finally:
            sim.terminate()
            sim.wait()
        for name in os.listdir(work):
            if ".db" in name:
                # The databases, their WAL files, and the deliverers' lock folder beside each (`<db>-deliverers`).
                path = os.path.join(work, name)
                shutil.rmtree(path) if os.path.isdir(path) else os.remove(path)
    texts = [(annotate(out, inclusive=True), annotate(out, inclusive=False)) for out in outputs]
    (big, big_self), (small, small_self) = texts
    pushes = arguments.jobs - arguments.baseline_jobs
    a, b = areas(big, big_self, arguments.relay), areas(small, small_self, arguments.relay)
    per_push = {area: (a[area] - b[area]) / pushes for area in ORDER + BY_LIBRARY}
    lines = ["| area (inclusive) | instructions per push |", "|---|---:|"]
    lines += [f"| {area} | {per_push[area]:,.0f} |" for area in ORDER]
    lines += ["", "| library (self) | instructions per push |", "|---|---:|"]
    lines += [f"| {area} | {per_push[area]:,.0f} |" for area in BY_LIBRARY]
    if os.path.exists(f"{work}/h2load.txt"):
        h2load = [int(n) for n in open(f"{work}/h2load.txt").read().split()]
        per_request = (h2load[0] - h2load[1]) / pushes
        above = per_push["total"] - per_push["store"]
        lines += ["", f"h2load (same simulator, same request): {per_request:,.0f} instructions per request; the deliverer "
                  f"above the store: {above:,.0f} = {above / per_request:.1f}× h2load"]
        if os.path.exists(f"{work}/floor.txt"):
            floor = [int(n) for n in open(f"{work}/floor.txt").read().split()]
            per_job = (floor[0] - floor[1]) / (FLOOR_CLAIMS[0] - FLOOR_CLAIMS[1])
            beyond = per_push["total"] - per_job
            lines += ["", f"the delivery floor (QueueBench floor: claim + complete at 10,000 queued, batches of 1,000): "
                      f"{per_job:,.0f} instructions per job; the deliverer minus the floor (SPEC §7's row, in "
                      f"instructions): {beyond:,.0f} = {beyond / per_request:.2f}× h2load"]
    print("\n".join(lines))
    if arguments.output:
        with open(arguments.output, "w") as report:
            report.write(f"Per push: runs of {arguments.jobs:,} and {arguments.baseline_jobs:,} jobs, difference / {pushes:,}.\n\n")
            report.write("\n".join(lines) + "\n\n")
            report.write(f"Totals: {arguments.jobs:,} jobs {a['total']:,}; {arguments.baseline_jobs:,} jobs {b['total']:,}\n\n")
            report.write(f"Top functions of the {arguments.jobs:,}-job run, inclusive:\n\n```\n{top(big, arguments.top)}\n```\n\n")
            report.write(f"Top functions of the {arguments.jobs:,}-job run, self:\n\n```\n{top(big_self, arguments.top)}\n```\n")
    print(f"callgrind outputs in {work}", file=sys.stderr)


if __name__ == "__main__":
    main()
