"""Waiting Test requests (issue #13): 1,000 Test-button webhooks held waiting by a slow APNs (the simulator answers
after 5 s) while `GET /devices/:id` — the call the app makes on every launch — is timed; its p99 must stay under
50 ms. The same GETs are timed first with nothing waiting, in the same process."""
import asyncio
import json
import time

from harness import RUNS, percentile, phase_folder, register, sqlite_store, step, stop, summarize
from phase_serve import serve_with_sim

WAITING = 1000
SIM_LATENCY_MS = 5000
TEST_BODY = json.dumps({"heartbeat": None, "monitor": None, "msg": "My Webhook Alert (1) Testing"}).encode()


async def exchange(reader, writer, request):
    writer.write(request)
    head = await reader.readuntil(b"\r\n\r\n")
    length = int([l for l in head.split(b"\r\n") if l.lower().startswith(b"content-length:")][0].split(b":")[1])
    await reader.readexactly(length)
    return int(head.split(b" ", 2)[1])


async def time_gets(port, device, token, count, interval, pending=None):
    """`count` GET /devices/:id on one keep-alive connection, one every `interval` s. Returns [(ms, still waiting)]."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    request = (f"GET /devices/{device} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {token}\r\n\r\n").encode()
    timings = []
    for _ in range(count):
        started = time.perf_counter()
        status = await exchange(reader, writer, request)
        assert status == 200, f"GET /devices/:id answered {status}"
        timings.append(((time.perf_counter() - started) * 1000, pending() if pending else 0))
        await asyncio.sleep(max(0.0, interval - (time.perf_counter() - started)))
    writer.close()
    return timings


async def waiting_tests(port, devices, get_device):
    answers, sent = [], asyncio.Event()
    in_flight = [0]

    async def test_request(device):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        request = (f"POST /wh/{device} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                   f"Content-Length: {len(TEST_BODY)}\r\n\r\n").encode() + TEST_BODY
        in_flight[0] += 1
        if in_flight[0] == len(devices):
            sent.set()
        started = time.monotonic()
        status = await exchange(reader, writer, request)
        in_flight[0] -= 1
        answers.append((status, time.monotonic() - started))
        writer.close()

    baseline = await time_gets(port, *get_device, count=200, interval=0.01)
    tests = [asyncio.create_task(test_request(device)) for device, _ in devices]
    await sent.wait()
    await asyncio.sleep(0.5)  # the last requests reach the relay and are committed
    # While the Test requests wait (the simulator answers after 5 s): one GET every 10 ms for 3.5 s.
    loaded = await time_gets(port, *get_device, count=350, interval=0.01, pending=lambda: in_flight[0])
    await asyncio.gather(*tests)
    return baseline, loaded, answers


def testwait_once(folder):
    store = sqlite_store(folder / "testwait.db")
    sim, _, serve, port, _ = serve_with_sim(store, folder, latency=SIM_LATENCY_MS, TEST_WAIT="15s", HTTP_MAX_CONNECTIONS="4000")
    devices = register(port, range(1, WAITING + 2))
    get_device, test_devices = devices[0], devices[1:]
    baseline, loaded, answers = asyncio.run(waiting_tests(port, test_devices, get_device))
    stop(serve)
    stop(sim)
    base = sorted(ms for ms, _ in baseline)
    held = sorted(ms for ms, waiting in loaded if waiting >= WAITING * 0.9)
    statuses = {}
    for status, _ in answers:
        statuses[status] = statuses.get(status, 0) + 1
    return {"get_p99_ms": percentile(held, 0.99), "get_p50_ms": percentile(held, 0.5), "get_samples": len(held),
            "get_p99_idle_ms": percentile(base, 0.99), "answered_200": statuses.get(200, 0), "answered_202": statuses.get(202, 0),
            "answered_other": sum(v for k, v in statuses.items() if k not in (200, 202)),
            "test_wait_s_median": sorted(s for _, s in answers)[len(answers) // 2] if answers else None}


def bench_testwait(results):
    folder = phase_folder("testwait")
    step(f"waiting Test requests: {WAITING:,} Test webhooks held by a simulator answering after {SIM_LATENCY_MS / 1000:.0f} s "
         f"while GET /devices/:id is timed every 10 ms × {RUNS}")
    runs = []
    for number in range(1, RUNS + 1):
        run_folder = folder / f"run{number}"
        run_folder.mkdir()
        figures = testwait_once(run_folder)
        runs.append(figures)
        step(f"  run {number}: GET p99 {figures['get_p99_ms']} ms with {WAITING} waiting ({figures['get_samples']} samples), "
             f"{figures['get_p99_idle_ms']} ms idle; Test answers: {figures['answered_200']} × 200, {figures['answered_202']} × 202, "
             f"{figures['answered_other']} other, median wait {figures['test_wait_s_median']:.1f} s")
    results["testwait"] = summarize(runs)
