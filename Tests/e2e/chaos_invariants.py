"""The chaos suite's invariants (issue #19, SPEC §4), checked over what a run recorded: the webhooks it posted and
what they answered, every request the fake APNs saw (start, end, status, payload), the dead letters the database
holds and `stats --json`. Each check returns a list of violations, as sentences; an empty list is a pass.

Pushes are matched to webhooks by the unique marker each webhook carries in its message (`chaos S.I.N`: slot,
incarnation of the device in that slot, sequence number); the job id answered with 202 must be the push's apns-id.
"""
import re

MARKER = re.compile(r"chaos (\d+)\.(\d+)\.(\d+)")
# Statuses that dead-letter a push at once (the fake gives 400 DeviceTokenNotForTopic per token).
PERMANENT = (400, 413)

# The invariants, named as the README's testing section counts them.
NAMES = [
    "every acknowledged job is delivered or dead-lettered (none vanishes)",
    "no job stays queued once APNs is healthy",
    "every dead letter has a true reason (Expired, or the rejection APNs gave that push)",
    "a device disappears only when deleted or when APNs answered 410",
    "per-device order: no job is sent after a later job of its device unless it was dead-lettered meanwhile",
    "no device has two pushes in flight at once",
    "once APNs is healthy and jobs are due, delivery resumes within seconds",
    "replayed dead letters are delivered",
    "the relay keeps APNs' rules (no request refused as malformed, no stream over the server's limit)",
]

# The only refusals a chaos run provokes: outage windows and per-token windows.
PROVOKED = {(503, "ServiceUnavailable"), (400, "DeviceTokenNotForTopic"), (410, "Unregistered")}


def marker_of(record):
    """The marker a request carried, or None (a canary, or a request cut before its body arrived)."""
    try:
        match = MARKER.fullmatch(record["payload"]["aps"]["alert"]["body"])
    except (KeyError, TypeError):
        return None
    return match.group(0) if match else None


def incarnation_of(marker):
    slot, incarnation, _ = MARKER.fullmatch(marker).groups()
    return f"{slot}.{incarnation}"


def sequence_of(marker):
    return int(MARKER.fullmatch(marker).group(3))


def requests_by_incarnation(requests):
    grouped = {}
    for record in requests:
        marker = marker_of(record)
        if marker is not None:
            grouped.setdefault(incarnation_of(marker), []).append((marker, record))
    for records in grouped.values():
        records.sort(key=lambda pair: pair[1]["started"])
    return grouped


def none_vanishes(jobs, surviving, requests, dead_letters):
    """Every job acknowledged with 202 for a device that still exists was delivered (APNs answered 200 to a push
    carrying its marker and its id) or is a dead letter with a reason."""
    delivered = {}
    for record in requests:
        marker = marker_of(record)
        if marker is not None and record["status"] == 200:
            delivered.setdefault(marker, []).append(record)
    violations = []
    for job in jobs:
        if job.public_id is None:
            continue
        pushes = delivered.get(job.marker, [])
        for push in pushes:
            if push["apns_id"] != job.public_id:
                violations.append(f"{job.marker}: pushed with apns-id {push['apns_id']}, but its 202 said {job.public_id}")
        if job.incarnation not in surviving or pushes:
            continue
        reason = dead_letters.get(job.public_id)
        if reason is None:
            violations.append(f"{job.marker} ({job.public_id}): acknowledged with 202, neither delivered nor dead-lettered")
        elif not reason:
            violations.append(f"{job.marker} ({job.public_id}): dead-lettered without a reason")
    return violations


def nothing_queued(stats):
    live = {state: count for state, count in stats["jobs"].items() if state != "discarded" and count}
    return [f"jobs still queued after the drain: {live}"] if live else []


def dead_letter_reasons_are_true(dead_letters, requests, stats):
    """A dead letter's reason is Expired, or the permanent rejection APNs gave a push with its id; stats agrees
    with the database."""
    rejections = {}
    for record in requests:
        if record["status"] in PERMANENT:
            rejections.setdefault(record["apns_id"], set()).add(record.get("reason"))
    violations = []
    for public_id, reason in dead_letters.items():
        if reason != "Expired" and reason not in rejections.get(public_id, set()):
            violations.append(f"dead letter {public_id}: reason {reason!r}, but APNs never gave that push that answer")
    counted = {}
    for reason in dead_letters.values():
        counted[reason] = counted.get(reason, 0) + 1
    if stats["dead_letters_by_reason"] != counted or stats["jobs"].get("discarded", 0) != len(dead_letters):
        violations.append(f"stats says {stats['dead_letters_by_reason']} ({stats['jobs'].get('discarded')} dead letters), "
                          f"the database holds {counted}")
    return violations


def devices_vanish_only_for_a_cause(incarnations, surviving, requests):
    answered_410 = {key for key, records in requests_by_incarnation(requests).items()
                    if any(record["status"] == 410 for _, record in records)}
    return [f"device {inc.key} ({inc.device_id}) is gone, but it was never deleted and APNs never answered 410"
            for inc in incarnations
            if inc.key not in surviving and not inc.deleted and inc.key not in answered_410]


def per_device_order(requests, posted_at, job_ttl, retry_max):
    """For two jobs j < k of one device, a push of j that starts after a push of k started is out of order unless
    j may have been dead-lettered (and replayed) before k was sent: APNs rejected j permanently before that, or j
    may have expired. A job expires at its JOB_TTL (counted from just before its webhook was posted, so never too
    early), or up to RETRY_MAX before it: a retry that would fall after the TTL is dead-lettered as Expired at once."""
    violations = []
    for key, records in requests_by_incarnation(requests).items():
        rejected_at = {}
        for marker, record in records:
            if record["status"] in PERMANENT and record["ended"] is not None:
                rejected_at[marker] = min(rejected_at.get(marker, record["ended"]), record["ended"])
        for index, (marker, push) in enumerate(records):
            for later_marker, later_push in records[:index]:
                # `later_push` started first: out of order if it carries a later job than `push`.
                if sequence_of(later_marker) <= sequence_of(marker):
                    continue
                overtaken_at = later_push["started"]
                may_be_dead = (rejected_at.get(marker, float("inf")) <= overtaken_at
                               or overtaken_at >= posted_at[marker] + job_ttl - retry_max)
                if not may_be_dead:
                    violations.append(f"device {key}: {marker} was sent after the later {later_marker}, "
                                      f"though it was neither rejected nor expired when {later_marker} was sent")
                    break
    return violations


def one_push_in_flight_per_device(requests):
    """No push of a device starts while its previous one is in flight, with the allowance test_postgres.py's
    check (devices_sent_two_at_once) needed after a CI failure: the same job sent again (the relay gave up on the
    request at APNS_REQUEST_TIMEOUT and resent it while a fake far behind still answered the first), and a request
    the relay no longer waited for (its connection gone, or the stream reset by the relay). Two different jobs of
    one device open at APNs together, or a next job sent while one is simply unanswered, stay violations."""
    violations = []
    for key, records in requests_by_incarnation(requests).items():
        for (marker_a, a), (marker_b, b) in zip(records, records[1:]):
            overlapping = a["ended"] is None or a["ended"] > b["started"]
            given_up = a.get("connection_lost") or a.get("reset_by_client")
            if overlapping and not given_up and marker_a != marker_b:
                violations.append(f"device {key}: {marker_b} was sent while {marker_a} was still in flight")
    return violations


def apns_rules_kept(requests, protocol_violations):
    """Every answer other than 200 is one the schedule provoked; the fake saw no breach of HTTP/2 as APNs runs it."""
    refused = {}
    for record in requests:
        if record["status"] not in (None, 200) and (record["status"], record.get("reason")) not in PROVOKED:
            key = f"{record['status']} {record.get('reason')}"
            refused[key] = refused.get(key, 0) + 1
    return [f"APNs refused {count} request(s) with {key}" for key, count in sorted(refused.items())] + list(protocol_violations)
