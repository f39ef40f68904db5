"""Watches the pods of one namespace and label selector for the controller scenarios, and
writes one JSON line per change to the pod set (flushed at once), so a scenario can check
a rollout's bounds at every step, not only at the end:

  {"seq": N, "active": A, "available": R, "all": T, "hashes": {HASH: [A, T], ...}}

- active: pods neither being deleted nor Succeeded/Failed (what controllers count);
- available: active pods whose Ready condition is True;
- all: every pod, those being deleted included;
- hashes: the same two counts per `pod-template-hash` label ("" without one).

The first line (seq 0) is written after the initial list. When the connection fails (the
server it talks to was killed), it reads the kubeconfig again (the scenario may have pointed
it at another server), lists again and goes on; a line with "relisted": true marks that the
changes in between were not seen one by one.

Usage: pod_watch.py --kubeconfig KC --namespace NS --selector SEL --out FILE
"""

import argparse
import json
import time

from kubernetes import client, config, watch


def is_ready(pod):
    for c in (pod.status.conditions or []) if pod.status else []:
        if c.type == "Ready":
            return c.status == "True"
    return False


def facts(pod):
    labels = pod.metadata.labels or {}
    phase = pod.status.phase if pod.status else None
    deleting = pod.metadata.deletion_timestamp is not None
    active = not deleting and phase not in ("Succeeded", "Failed")
    return {"hash": labels.get("pod-template-hash", ""), "active": active,
            "available": active and is_ready(pod)}


class Recorder:
    def __init__(self, path):
        self.out = open(path, "a", buffering=1)
        self.pods = {}
        self.seq = 0
        self.last = None

    def write(self, relisted=False):
        hashes = {}
        for f in self.pods.values():
            counts = hashes.setdefault(f["hash"], [0, 0])
            counts[1] += 1
            if f["active"]:
                counts[0] += 1
        line = {
            "active": sum(1 for f in self.pods.values() if f["active"]),
            "available": sum(1 for f in self.pods.values() if f["available"]),
            "all": len(self.pods),
            "hashes": hashes,
        }
        if relisted:
            line["relisted"] = True
        if line == self.last and self.seq > 0:
            return
        self.last = line
        self.out.write(json.dumps(dict(seq=self.seq, **line)) + "\n")
        self.seq += 1


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--kubeconfig", required=True)
    p.add_argument("--namespace", required=True)
    p.add_argument("--selector", required=True)
    p.add_argument("--out", required=True)
    args = p.parse_args()
    rec = Recorder(args.out)
    first = True
    while True:
        try:
            api = client.CoreV1Api(config.new_client_from_config(config_file=args.kubeconfig))
            listed = api.list_namespaced_pod(args.namespace, label_selector=args.selector)
            rec.pods = {pod.metadata.uid: facts(pod) for pod in listed.items}
            rec.write(relisted=not first)
            first = False
            rv = listed.metadata.resource_version
            while True:
                stream = watch.Watch().stream(api.list_namespaced_pod, args.namespace,
                                              label_selector=args.selector, resource_version=rv,
                                              timeout_seconds=300, allow_watch_bookmarks=False)
                for ev in stream:
                    pod = ev["object"]
                    rv = pod.metadata.resource_version
                    if ev["type"] == "DELETED":
                        rec.pods.pop(pod.metadata.uid, None)
                    else:
                        rec.pods[pod.metadata.uid] = facts(pod)
                    rec.write()
        except Exception as e:  # the server went away: read the kubeconfig again and relist
            print(f"pod watch: {e}", flush=True)
            time.sleep(0.3)


if __name__ == "__main__":
    main()
