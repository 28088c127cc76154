"""Open-loop webhook load: requests leave on schedule whatever the answers do (a closed loop would slow down with
the server and hide its latency). Keep-alive HTTP/1.1 over a pool of connections; each request's send time and
the job id from its 202 are recorded.

Usage: loadgen.py PORT RATE SECONDS DEVICE_IDS_FILE OUT_FILE
OUT_FILE lines: "<job id> <device index> <sequence> <send time µs since 1970> <status>"
"""
import asyncio
import json
import sys
import time

BODY_TEMPLATE = '{{"heartbeat":{{"monitorID":{m},"status":0,"msg":"{seq}","important":true}},"monitor":{{"id":{m},"name":"Monitor {m}"}},"msg":"down"}}'


async def main(port, rate, seconds, devices, out_path, connections=64):
    pool = asyncio.Queue()
    for _ in range(connections):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        pool.put_nowait((reader, writer))
    results = []
    sequence = [0] * len(devices)

    async def one(index):
        seq = sequence[index]
        sequence[index] += 1
        body = BODY_TEMPLATE.format(m=index, seq=seq).encode()
        request = (f"POST /wh/{devices[index]} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                   f"Content-Length: {len(body)}\r\n\r\n").encode() + body
        reader, writer = await pool.get()
        sent = time.time_ns() // 1000
        try:
            writer.write(request)
            head = await reader.readuntil(b"\r\n\r\n")
            status = int(head.split(b" ", 2)[1])
            length = int([l for l in head.split(b"\r\n") if l.lower().startswith(b"content-length:")][0].split(b":")[1])
            payload = json.loads(await reader.readexactly(length))
            results.append((payload.get("id", "-"), index, seq, sent, status))
        except (OSError, asyncio.IncompleteReadError, ValueError, IndexError):
            results.append(("-", index, seq, sent, 0))
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
        finally:
            pool.put_nowait((reader, writer))

    # Only the requests still in flight are held (a soak sends 600,000); their rows go to `results`.
    tasks = set()
    start = time.monotonic()
    total = int(rate * seconds)
    for n in range(total):
        target = start + n / rate
        delay = target - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        task = asyncio.create_task(one(n % len(devices)))
        tasks.add(task)
        task.add_done_callback(tasks.discard)
    await asyncio.gather(*tasks)
    achieved = total / (time.monotonic() - start)
    with open(out_path, "w") as out:
        for row in results:
            out.write(" ".join(str(v) for v in row) + "\n")
    print(f"{achieved:.0f}")


if __name__ == "__main__":
    port, rate, seconds, devices_file, out = sys.argv[1:6]
    devices = open(devices_file).read().split()
    asyncio.run(main(int(port), float(rate), float(seconds), devices, out))
