"""Leases through any server of a cluster that loses its leader (docs/guarantees.md, Leases;
Guarantees table), with a real client: kubernetes.leaderelection LeaseLock candidates, each talking
to a different member of a 3-server litek8s cluster, while the Raft leader is SIGKILLed and
restarted several times. At no moment may two candidates believe they lead."""

import signal
import subprocess
import sys
import time
from pathlib import Path

from test_leader_election import intervals, leaders, overlaps, read_events, wait_for

HERE = Path(__file__).resolve().parent
RAFT_LEADER_KILLS = 3


def test_lease_election_survives_raft_leader_kills(cluster, tmp_path):
    names = ["cand-a", "cand-b", "cand-c"]
    logs = {n: tmp_path / f"{n}.log" for n in names}
    procs = {}
    ends = {}
    kills = []
    try:
        for n, member in zip(names, cluster.members):
            procs[n] = subprocess.Popen(
                [sys.executable, str(HERE / "candidate.py"), member.kubeconfig,
                 "ha-election", n, str(logs[n])],
                stdin=subprocess.DEVNULL,
            )
        wait_for(lambda: leaders(read_events(logs.values())), "a first leader")
        for _ in range(RAFT_LEADER_KILLS):
            time.sleep(3)
            raft_leader = wait_for(cluster.leader, "a Raft leader")
            kills.append((time.monotonic(), raft_leader.name))
            raft_leader.kill()
            # The survivors elect a new Raft leader; then the killed one comes back.
            wait_for(lambda: (l := cluster.leader()) is not None and l is not raft_leader,
                     "a new Raft leader")
            time.sleep(2)
            raft_leader.start()
        # The election settles with exactly one holder again.
        time.sleep(6)
        current = leaders(read_events(logs.values()))
        assert len(current) == 1, f"after the kills: {current}"
    finally:
        stop_at = time.monotonic()
        for n, p in procs.items():
            if p.poll() is None:
                p.send_signal(signal.SIGKILL)
                p.wait()
            ends.setdefault(n, stop_at)

    events = read_events(logs.values())
    spans = intervals(events, ends)
    print(f"Raft leader kills: {kills}; leadership spans: {spans}")
    clash = overlaps(spans)
    assert not clash, f"two candidates led at once: {clash}\nevents: {events}"
