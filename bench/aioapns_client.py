"""The peer: Python's aioapns sending the same pushes to the same simulator (SPEC §7 "≥ 10× the aioapns client").

aioapns only knows Apple's hosts, so its protocol class is pointed at the simulator; everything else is stock.
Usage: aioapns_client.py PORT CA_FILE KEY_FILE TOPIC COUNT CONCURRENCY  → prints pushes/s
"""
import asyncio
import sys
import time
import ssl
import uuid

from aioapns import APNs, NotificationRequest
from aioapns import connection as apns_connection


async def main(port, ca_file, key_file, topic, count, concurrency):
    apns_connection.APNsProductionClientProtocol.APNS_SERVER = "127.0.0.1"
    apns_connection.APNsProductionClientProtocol.APNS_PORT = port
    context = ssl.create_default_context(cafile=ca_file)
    context.set_alpn_protocols(["h2"])  # HTTP/2 over TLS is negotiated by ALPN (APNs too)
    client = APNs(key=open(key_file).read(), key_id="BENCHKEY01", team_id="BENCHTEAM1", topic=topic,
                  use_sandbox=False, max_connections=2, ssl_context=context)
    payload = {"aps": {"alert": {"title": "Shop API is down", "body": "Request failed with status code 503"}, "sound": "default"}}
    token = "ab" * 32
    semaphore = asyncio.Semaphore(concurrency)
    accepted = 0

    async def send_one():
        nonlocal accepted
        async with semaphore:
            result = await client.send_notification(NotificationRequest(device_token=token, message=payload,
                                                                        notification_id=str(uuid.uuid4())))
            if result.is_successful:
                accepted += 1

    await send_one()  # connect and authenticate outside the timed part
    start = time.monotonic()
    await asyncio.gather(*(send_one() for _ in range(count)))
    elapsed = time.monotonic() - start
    print(f"{accepted / elapsed:.0f} {accepted}")


if __name__ == "__main__":
    port, ca, key, topic, count, concurrency = sys.argv[1:7]
    asyncio.run(main(int(port), ca, key, topic, int(count), int(concurrency)))
