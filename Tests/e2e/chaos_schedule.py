"""The chaos suite's seeded schedule (issue #19): one seed gives one list of timed actions, the same on every run.

What varies with the seed: the processes (`serve` alone, or `ingest` + two `deliver` on one SQLite file), the
retry settings, and a timeline of webhooks mixed with faults: APNs windows (200, 503, dropped connections, GOAWAY,
latency spikes, connection refused), per-token 400 and 410 windows, SIGKILL and restart of each process, `replay`
during and after outages, and devices deleted and re-registered. Only the actions are seeded; how the operating
system interleaves the processes is not, so a replayed seed repeats the schedule, not every microsecond.
"""
import dataclasses
import random

SLOTS = 6  # devices in use at once; each slot is one APNs token, re-registered after a deletion or a 410

# An APNs mode holds for one window; the driver returns to "ok" between windows.
APNS_MODES = [("503", 3), ("drop", 2), ("goaway", 2), ("refuse", 1), ("latency", 2)]


@dataclasses.dataclass(frozen=True)
class Step:
    at: float       # seconds after the start of the run
    action: str     # see Schedule.ACTIONS
    args: tuple = ()

    def __str__(self):
        return f"{self.at:6.2f}s {self.action} {' '.join(map(str, self.args))}".rstrip()


@dataclasses.dataclass(frozen=True)
class Schedule:
    seed: int
    topology: str               # "serve" or "split"
    settings: dict              # environment shared by every relay process
    steps: list                 # Step, by time

    ACTIONS = ("post", "apns", "token", "kill", "start", "replay", "delete", "register", "reregister", "canary")

    @property
    def processes(self):
        return ["serve"] if self.topology == "serve" else ["ingest", "deliver-1", "deliver-2"]

    def describe(self):
        lines = [f"seed {self.seed}: {self.topology}, " + ", ".join(f"{k}={v}" for k, v in sorted(self.settings.items()))]
        return "\n".join(lines + [f"  {step}" for step in self.steps if step.action != "post"])


def generate(seed, duration=20.0):
    rng = random.Random(seed)
    topology = rng.choice(["serve", "split"])
    settings = {
        "JOB_TTL": rng.choice(["3s", "5s", "8s"]),
        "RETRY_BASE": rng.choice(["50ms", "100ms", "200ms"]),
        "RETRY_MAX": rng.choice(["500ms", "1s"]),
        # Latency spikes (at most 1 s) stay below the request timeout, which stays 1.5 s below the lease (the relay
        # insists), so a slow answer is never taken for a crashed worker.
        "APNS_REQUEST_TIMEOUT": "2s",
        "LEASE_TIMEOUT": "4s",
    }
    steps = []
    rounds = max(1, round(duration / 20))  # longer runs get proportionally more crashes, replays and churn
    processes = ["serve"] if topology == "serve" else ["ingest", "deliver-1", "deliver-2"]

    # Traffic: about eight webhooks a second over the slots, each to one slot.
    t = 0.0
    while t < duration:
        t += rng.expovariate(8.0)
        steps.append(Step(round(t, 3), "post", (rng.randrange(SLOTS),)))

    # APNs: healthy windows alternate with fault windows; a canary after a fault checks delivery resumed.
    t = rng.uniform(0.5, 2.0)
    while t < duration - 1.0:
        mode = rng.choices([m for m, _ in APNS_MODES], weights=[w for _, w in APNS_MODES])[0]
        length = rng.uniform(0.5, 2.5) if mode == "refuse" else rng.uniform(1.0, 4.0)
        argument = round(rng.uniform(0.2, 1.0), 2) if mode == "latency" else rng.randrange(0, 6) if mode == "goaway" else None
        steps.append(Step(round(t, 3), "apns", (mode,) if argument is None else (mode, argument)))
        t += length
        steps.append(Step(round(t, 3), "apns", ("ok",)))
        if rng.random() < 0.4:
            steps.append(Step(round(t + 0.3, 3), "canary"))
        t += rng.uniform(1.0, 4.0)

    # Per-token rejections: one slot's pushes get 400 DeviceTokenNotForTopic or 410 Unregistered for a while.
    for _ in range(rng.randint(1, 2) * rounds):
        start = rng.uniform(1.0, duration - 4.0)
        slot = rng.randrange(SLOTS)
        status, reason = rng.choice([(400, "DeviceTokenNotForTopic"), (410, "Unregistered")])
        steps.append(Step(round(start, 3), "token", (slot, status, reason)))
        steps.append(Step(round(start + rng.uniform(0.5, 3.0), 3), "token", (slot, 200, "")))

    # Crashes: SIGKILL a process, start it again a moment later.
    for _ in range(rng.randint(1, 3) * rounds):
        start = rng.uniform(1.0, duration - 3.0)
        name = rng.choice(processes)
        steps.append(Step(round(start, 3), "kill", (name,)))
        steps.append(Step(round(start + rng.uniform(0.2, 2.0), 3), "start", (name,)))

    # Operators: replay during or after outages; devices deleted, registered again, re-registered in place.
    for _ in range(rng.randint(1, 2) * rounds):
        steps.append(Step(round(rng.uniform(2.0, duration), 3), "replay", (rng.choice(["all", "Expired"]),)))
    for _ in range(rng.randint(1, 2) * rounds):
        start = rng.uniform(1.0, duration - 2.0)
        slot = rng.randrange(SLOTS)
        steps.append(Step(round(start, 3), "delete", (slot,)))
        steps.append(Step(round(start + rng.uniform(0.1, 2.0), 3), "register", (slot,)))
    if rng.random() < 0.5:
        steps.append(Step(round(rng.uniform(1.0, duration), 3), "reregister", (rng.randrange(SLOTS),)))

    steps.sort(key=lambda step: step.at)
    return Schedule(seed, topology, settings, _kills_paired(steps))


def _kills_paired(steps):
    """A process killed twice before its restart would be restarted once: drop the inner kill/start pair."""
    down = set()
    kept = []
    skip_start = {}
    for step in steps:
        if step.action == "kill":
            name = step.args[0]
            if name in down:
                skip_start[name] = skip_start.get(name, 0) + 1
                continue
            down.add(name)
        elif step.action == "start":
            name = step.args[0]
            if skip_start.get(name):
                skip_start[name] -= 1
                continue
            down.discard(name)
        kept.append(step)
    return kept
