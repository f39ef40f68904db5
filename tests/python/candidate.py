"""One leader-election candidate, run as its own OS process by test_leader_election.py.

Usage: candidate.py KUBECONFIG LEASE_NAME IDENTITY LOGFILE

Runs kubernetes.leaderelection with a LeaseLock (lease 4 s, renew deadline 2 s, retry 0.5 s)
forever; after losing the lease it runs for it again. Every state change is appended to
LOGFILE as `<CLOCK_MONOTONIC seconds> <IDENTITY> LEADER|LOST` with one write(2) per line, so
lines written before a SIGKILL are intact.
"""

import logging
import os
import sys
import time

from kubernetes import config
from kubernetes.leaderelection import electionconfig, leaderelection
from kubernetes.leaderelection.resourcelock.leaselock import LeaseLock

LEASE_DURATION = 4
RENEW_DEADLINE = 2
RETRY_PERIOD = 0.5

LOG = {}


def log(state):
    # CLOCK_MONOTONIC is system-wide on Linux, so lines of different processes compare.
    os.write(LOG["fd"], f"{time.monotonic():.6f} {LOG['identity']} {state}\n".encode())


class LoggedElection(leaderelection.LeaderElection):
    def acquire(self):
        acquired = super().acquire()
        # Logged the moment acquire() returns: from here this process believes it leads.
        self.leading = True
        log("LEADER")
        return acquired


def main():
    kubeconfig, lease_name, identity, logfile = sys.argv[1:5]
    LOG["fd"] = os.open(logfile, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    LOG["identity"] = identity
    logging.basicConfig(level=logging.WARNING)
    config.load_kube_config(config_file=kubeconfig)
    lock = LeaseLock(lease_name, "default", identity)
    cfg = electionconfig.Config(
        lock,
        lease_duration=LEASE_DURATION,
        renew_deadline=RENEW_DEADLINE,
        # Config refuses a retry period under 1 s; set the real one after validation.
        retry_period=1,
        onstarted_leading=lambda: None,
        onstopped_leading=lambda: log("LOST"),
    )
    cfg.retry_period = RETRY_PERIOD
    log("START")
    while True:
        election = LoggedElection(cfg)
        try:
            election.run()
        except Exception as e:  # server briefly unreachable: stay a candidate
            # run() raising ends this term of leadership (nothing renews any more).
            if getattr(election, "leading", False):
                log("LOST")
            log("ERROR " + type(e).__name__)
            time.sleep(RETRY_PERIOD)


if __name__ == "__main__":
    main()
