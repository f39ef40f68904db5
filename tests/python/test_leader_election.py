"""Leader election with kubernetes.leaderelection's LeaseLock among 3 candidate processes:
one leads, SIGKILL it, another takes over within the lease duration plus retry slack, and at no
moment do two candidates believe they lead."""

import signal
import subprocess
import sys
import time
from pathlib import Path

import candidate

HERE = Path(__file__).resolve().parent
# Takeover bound: the lease must run out (measured from the follower's last observation of a
# renewal, at most one retry period before the kill), then one retry period to notice, plus
# scheduling slack for a loaded 2-core machine.
TAKEOVER_BOUND = candidate.LEASE_DURATION + 2 * candidate.RETRY_PERIOD + 2.5
HANG_GUARD = 60.0


def read_events(logs):
    events = []
    for path in logs:
        if not path.exists():
            continue
        for line in path.read_text().splitlines():
            parts = line.split(" ", 2)
            if len(parts) == 3:
                events.append((float(parts[0]), parts[1], parts[2]))
    events.sort()
    return events


def leaders(events):
    """Identities currently believing they lead, replaying events in time order."""
    current = set()
    for _, who, state in events:
        if state == "LEADER":
            current.add(who)
        elif state == "LOST":
            current.discard(who)
    return current


def wait_for(pred, what, timeout=HANG_GUARD):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = pred()
        if result:
            return result
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def intervals(events, ends):
    """Leadership intervals per identity: [LEADER, LOST or the identity's end time]."""
    out = []
    start = {}
    for t, who, state in events:
        if state == "LEADER":
            start[who] = t
        elif state == "LOST" and who in start:
            out.append((start.pop(who), t, who))
    for who, t in start.items():
        out.append((t, ends[who], who))
    return sorted(out)


def overlaps(spans):
    """Pairs of leadership spans of different candidates that overlap in time."""
    return [
        (a, b) for i, a in enumerate(spans) for b in spans[i + 1:]
        if a[2] != b[2] and b[0] < a[1]
    ]


def test_lease_leader_election_failover(server, tmp_path):
    names = ["cand-a", "cand-b", "cand-c"]
    logs = {n: tmp_path / f"{n}.log" for n in names}
    procs = {}
    ends = {}
    try:
        for n in names:
            procs[n] = subprocess.Popen(
                [sys.executable, str(HERE / "candidate.py"), server.kubeconfig,
                 "e2e-election", n, str(logs[n])],
                stdin=subprocess.DEVNULL,
            )
        first = wait_for(lambda: leaders(read_events(logs.values())), "a first leader")
        assert len(first) == 1, f"two leaders at once: {first}"
        (leader,) = first
        # Several renewals go by with the same single leader.
        time.sleep(3 * candidate.RETRY_PERIOD + 1)
        assert leaders(read_events(logs.values())) == {leader}

        lease = server.api_client()
        from kubernetes import client as k8s

        coord = k8s.CoordinationV1Api(lease)
        held = coord.read_namespaced_lease("e2e-election", "default")
        assert held.spec.holder_identity == leader
        assert held.spec.lease_duration_seconds == candidate.LEASE_DURATION
        assert held.spec.renew_time is not None

        killed_at = time.monotonic()
        procs[leader].send_signal(signal.SIGKILL)
        procs[leader].wait()
        ends[leader] = killed_at

        def new_leader():
            for t, who, state in read_events(logs.values()):
                if state == "LEADER" and who != leader and t > killed_at:
                    return (t, who)
            return None

        took_over_at, successor = wait_for(new_leader, "a new leader after the kill")
        delay = took_over_at - killed_at
        print(f"leader {leader} killed; {successor} took over after {delay:.2f}s")
        assert delay <= TAKEOVER_BOUND, (
            f"{successor} took over {delay:.2f}s after the kill (bound {TAKEOVER_BOUND}s)"
        )
        # Let the new leader renew a few times, then stop the rest.
        time.sleep(2)
        held = coord.read_namespaced_lease("e2e-election", "default")
        assert held.spec.holder_identity == successor
    finally:
        stop_at = time.monotonic()
        for n, p in procs.items():
            if p.poll() is None:
                p.send_signal(signal.SIGKILL)
                p.wait()
            ends.setdefault(n, stop_at)

    events = read_events(logs.values())
    spans = intervals(events, ends)
    clash = overlaps(spans)
    assert not clash, f"two candidates led at once: {clash}\nevents: {events}"
    assert sum(1 for s in spans if s[2] == successor) >= 1
