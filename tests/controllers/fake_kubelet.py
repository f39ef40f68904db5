"""Plays the kubelet of a few Node objects for the controller tests, through the real API with
the Python `kubernetes` client (no containers run):

- creates each node (unless it exists) with capacity/allocatable, addresses, labels and the
  Ready condition, and keeps the Ready condition's heartbeat current;
- renews `kube-node-lease/<node>` every 10 s, as kubelet does;
- for every pod bound to one of its nodes: sets it Running and Ready (conditions PodScheduled,
  Initialized, ContainersReady, Ready; containerStatuses; podIP, hostIP, startTime), or, per
  the pod's annotations, runs it to completion;
- finishes deleting pods on its nodes once they are marked for deletion: the pod is reported
  Failed (exit code 137) unless it had already ended, then deleted with grace period 0, as a
  kubelet confirms a stop.

Annotations a test may put on a pod (or its template):
- `test.litek8s.dev/exit-code: "N"`: the pod ends Succeeded (N=0) or Failed after
  `test.litek8s.dev/run-seconds` (default 1).
- `test.litek8s.dev/ready: "false"`: Running but never Ready.
- `test.litek8s.dev/ready-after-seconds: "N"`: Running at once, Ready after N seconds.

Control directory (`--control DIR`): a file `DIR/stop-<node>` makes this kubelet stop
renewing that node's Lease and status (the node "dies"); removing it resumes them. A file
`DIR/ready` is written once every node exists.

Usage: fake_kubelet.py --kubeconfig KC --nodes n1,n2,n3 [--cpu 4] [--memory 8Gi]
       [--pods 110] [--control DIR]
"""

import argparse
import datetime
import os
import threading
import time

from kubernetes import client, config, watch
from kubernetes.client.rest import ApiException

# Renewals every 2 s (kubelet: 10 s); the servers under test run with
# --node-monitor-grace-period 8s (upstream: 40 s), keeping upstream's ratio of about 4.
LEASE_RENEW = 2.0


def now():
    return datetime.datetime.now(datetime.timezone.utc)


def rfc3339(t):
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def micro(t):
    return t.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class Kubelet:
    def __init__(self, args):
        config.load_kube_config(config_file=args.kubeconfig)
        self.core = client.CoreV1Api()
        self.coord = client.CoordinationV1Api()
        self.nodes = [n for n in args.nodes.split(",") if n]
        self.args = args
        self.lock = threading.Lock()
        # pod uid -> (when it started running, annotations)
        self.started = {}
        self.ip_seq = 1

    def stopped(self, node):
        return self.args.control and os.path.exists(os.path.join(self.args.control, f"stop-{node}"))

    # --- nodes and leases
    def node_body(self, i, node):
        ip = f"10.200.0.{i + 10}"
        res = {"cpu": str(self.args.cpu), "memory": self.args.memory, "pods": str(self.args.pods),
               "ephemeral-storage": "100Gi"}
        return {
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": node, "labels": {
                "kubernetes.io/hostname": node, "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64"}},
            "spec": {},
            "status": {
                "capacity": res, "allocatable": res,
                "addresses": [{"type": "InternalIP", "address": ip},
                              {"type": "Hostname", "address": node}],
                "conditions": [self.ready_condition()],
                "nodeInfo": {"kubeletVersion": "v1.33.0", "operatingSystem": "linux",
                             "architecture": "amd64", "containerRuntimeVersion": "fake://1",
                             "kernelVersion": "", "osImage": "fake", "kubeProxyVersion": "",
                             "machineID": "", "systemUUID": "", "bootID": ""},
            },
        }

    def ready_condition(self):
        t = rfc3339(now())
        return {"type": "Ready", "status": "True", "reason": "KubeletReady",
                "message": "kubelet is posting ready status", "lastHeartbeatTime": t,
                "lastTransitionTime": t}

    def ensure_nodes(self):
        for i, node in enumerate(self.nodes):
            try:
                self.core.read_node(node)
            except ApiException as e:
                if e.status != 404:
                    raise
                body = self.node_body(i, node)
                status = body.pop("status")
                self.core.create_node(body)
                self.core.patch_node_status(node, {"status": status})

    def renew_leases(self):
        while True:
            for node in self.nodes:
                if self.stopped(node):
                    continue
                try:
                    self.renew_lease(node)
                    self.core.patch_node_status(node, {"status": {"conditions": [self.ready_condition()]}})
                except Exception as e:  # keep playing the kubelet through API hiccups
                    print(f"fake kubelet: {node}: {e}", flush=True)
            time.sleep(LEASE_RENEW)

    def renew_lease(self, node):
        t = micro(now())
        try:
            lease = self.coord.read_namespaced_lease(node, "kube-node-lease")
            lease.spec.renew_time = t
            self.coord.replace_namespaced_lease(node, "kube-node-lease", lease)
        except ApiException as e:
            if e.status != 404:
                raise
            self.coord.create_namespaced_lease("kube-node-lease", {
                "metadata": {"name": node, "namespace": "kube-node-lease"},
                "spec": {"holderIdentity": node, "leaseDurationSeconds": 40,
                         "renewTime": t}})

    # --- pods
    def pod_status(self, pod, phase, ready, exit_code=None, keep_ip=False):
        t = rfc3339(now())
        if keep_ip and pod.status and pod.status.pod_ip:
            ip = pod.status.pod_ip
        else:
            with self.lock:
                self.ip_seq += 1
                ip = f"10.42.{self.ip_seq // 250}.{self.ip_seq % 250 + 2}"
        if pod.status and pod.status.pod_ip:
            ip = pod.status.pod_ip
        node_index = self.nodes.index(pod.spec.node_name)
        statuses = []
        for c in pod.spec.containers:
            if exit_code is None:
                state = {"running": {"startedAt": t}}
            else:
                state = {"terminated": {"exitCode": exit_code, "reason": "Completed" if exit_code == 0 else "Error",
                                        "startedAt": t, "finishedAt": t}}
            statuses.append({"name": c.name, "image": c.image, "imageID": f"fake://{c.image}",
                             "containerID": f"fake://{pod.metadata.uid}-{c.name}", "ready": ready,
                             "started": exit_code is None, "restartCount": 0, "state": state})
        cond = lambda kind, ok: {"type": kind, "status": "True" if ok else "False", "lastTransitionTime": t}
        return {"status": {
            "phase": phase, "hostIP": f"10.200.0.{node_index + 10}", "podIP": ip,
            "podIPs": [{"ip": ip}], "startTime": t,
            "conditions": [cond("PodScheduled", True), cond("Initialized", True),
                           cond("ContainersReady", ready), cond("Ready", ready)],
            "containerStatuses": statuses}}

    def sync_pod(self, pod):
        node = pod.spec.node_name
        if node not in self.nodes or self.stopped(node):
            return
        ns, name, uid = pod.metadata.namespace, pod.metadata.name, pod.metadata.uid
        if pod.metadata.deletion_timestamp:
            # A kubelet stops the containers and reports the pod Failed before it confirms the
            # deletion (Job pods held by a finalizer stay, and must read as failed).
            if not pod.status or pod.status.phase not in ("Succeeded", "Failed"):
                self.patch_status(pod, self.pod_status(pod, "Failed", False, 137, keep_ip=True))
            try:
                self.core.delete_namespaced_pod(name, ns, grace_period_seconds=0,
                                                body=client.V1DeleteOptions(grace_period_seconds=0, preconditions={"uid": uid}))
            except ApiException as e:
                if e.status not in (404, 409):
                    print(f"fake kubelet: delete {ns}/{name}: {e.status} {e.reason}", flush=True)
            return
        phase = pod.status.phase if pod.status else None
        if phase in ("Succeeded", "Failed"):
            return
        ann = pod.metadata.annotations or {}
        current_ready = any(c.type == "Ready" and c.status == "True" for c in (pod.status.conditions or [])) if pod.status else False
        with self.lock:
            first = uid not in self.started
            if first:
                # A pod already Ready ran under an earlier kubelet (this one was restarted):
                # its timers ran out long ago, so it stays Ready.
                self.started[uid] = time.monotonic() - (1e6 if current_ready else 0)
            started = self.started[uid]
        elapsed = time.monotonic() - started
        if "test.litek8s.dev/exit-code" in ann:
            run = float(ann.get("test.litek8s.dev/run-seconds", "1"))
            if elapsed >= run:
                code = int(ann["test.litek8s.dev/exit-code"])
                self.patch_status(pod, self.pod_status(pod, "Succeeded" if code == 0 else "Failed", False, code))
                return
        ready = ann.get("test.litek8s.dev/ready", "true") != "false"
        if "test.litek8s.dev/ready-after-seconds" in ann:
            ready = ready and elapsed >= float(ann["test.litek8s.dev/ready-after-seconds"])
        if phase != "Running" or current_ready != ready:
            self.patch_status(pod, self.pod_status(pod, "Running", ready))

    def patch_status(self, pod, body):
        try:
            self.core.patch_namespaced_pod_status(pod.metadata.name, pod.metadata.namespace, body)
        except ApiException as e:
            if e.status != 404:
                print(f"fake kubelet: status {pod.metadata.namespace}/{pod.metadata.name}: {e.status} {e.reason}", flush=True)

    def resync_loop(self):
        """Timed transitions (run-seconds, ready-after-seconds) happen without events."""
        while True:
            time.sleep(0.5)
            try:
                for pod in self.core.list_pod_for_all_namespaces().items:
                    if pod.spec.node_name in self.nodes:
                        self.sync_pod(pod)
            except Exception as e:
                print(f"fake kubelet: resync: {e}", flush=True)

    def watch_pods(self):
        while True:
            try:
                rv = self.core.list_pod_for_all_namespaces().metadata.resource_version
                for ev in watch.Watch().stream(self.core.list_pod_for_all_namespaces,
                                               resource_version=rv, timeout_seconds=300):
                    if ev["type"] in ("ADDED", "MODIFIED"):
                        self.sync_pod(ev["object"])
            except Exception as e:
                print(f"fake kubelet: watch: {e}", flush=True)
                time.sleep(0.5)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--kubeconfig", required=True)
    p.add_argument("--nodes", required=True)
    p.add_argument("--cpu", default="4")
    p.add_argument("--memory", default="8Gi")
    p.add_argument("--pods", default="110")
    p.add_argument("--control", default="")
    args = p.parse_args()
    k = Kubelet(args)
    # A kubelet started while the servers elect a leader (a test killed the old one) sees
    # 5xx and, against its predecessor's last renewal, 409: it retries, as kubelet does.
    deadline = time.monotonic() + 60
    while True:
        try:
            k.ensure_nodes()
            for node in k.nodes:
                k.renew_lease(node)
            break
        except Exception as e:
            if time.monotonic() > deadline:
                raise
            print(f"fake kubelet: start: {e}", flush=True)
            time.sleep(0.5)
    if args.control:
        open(os.path.join(args.control, "ready"), "w").close()
    threading.Thread(target=k.renew_leases, daemon=True).start()
    threading.Thread(target=k.resync_loop, daemon=True).start()
    k.watch_pods()


if __name__ == "__main__":
    main()
