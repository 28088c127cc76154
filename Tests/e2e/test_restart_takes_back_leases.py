"""SPEC §4: "A process restarted on the same host takes back its dead predecessor's leases at once". A deliverer
killed with pushes in flight (SIGKILL: nothing released) is replaced; the new one sends those pushes now, not after
LEASE_TIMEOUT. Here LEASE_TIMEOUT is ten minutes, so only the take-back can deliver them within the test."""
import signal

from relayproc import request, wait_until
from test_delivery import register, token


def test_a_restarted_deliverer_sends_its_crashed_predecessor_s_pushes_at_once(relays, fake_apns):
    ingest = relays("ingest")
    settings = dict(LEASE_TIMEOUT="10m", DEVICE_BURST="off")
    first = relays("deliver", **settings)
    devices = [register(ingest, 9300 + n)[0] for n in range(3)]

    fake_apns.hold = True  # every push stays in flight: the deliverer holds the leases
    for device in devices:
        assert request("POST", f"{ingest.base}/wh/{device}", b'{"title":"t","body":"in flight"}')[0] == 202
    # APNs (and the fake) allow one stream per new connection until a push succeeds: one or two are in flight,
    # the rest leased and waiting for a stream.
    wait_until(lambda: fake_apns.held(), timeout=30, what="a push in flight")
    first.signal(signal.SIGKILL)
    first.wait()
    fake_apns.drop_all()  # the dead process's requests are never answered
    fake_apns.hold = False

    relays("deliver", **settings)
    wait_until(lambda: all(fake_apns.pushes(token(9300 + n)) for n in range(3)), timeout=60,
               what="the predecessor's pushes, long before LEASE_TIMEOUT")
