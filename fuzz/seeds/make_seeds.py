#!/usr/bin/env python3
"""Writes the starting corpus of the api_request fuzz target (format: fuzz_targets/api_request.rs).

Usage: python3 fuzz/seeds/make_seeds.py fuzz/corpus/api_request
Each seed is a short sequence of well-formed calls (create, read, patch, replace, delete) for
one kind, so that mutations start from requests that reach validation and the store.
"""
import json
import os
import sys

METHOD = {"GET": 0, "POST": 1, "PUT": 2, "PATCH": 3, "DELETE": 4}
# Indexes into litek8s::kube::resources::RESOURCES.
RESOURCE = {
    "namespaces": 0, "nodes": 1, "pods": 2, "services": 3, "configmaps": 5, "secrets": 6,
    "serviceaccounts": 7, "events": 8, "leases": 11, "persistentvolumes": 13,
    "deployments": 17, "replicasets": 18, "daemonsets": 19, "statefulsets": 20, "jobs": 22,
    "cronjobs": 23, "horizontalpodautoscalers": 24, "poddisruptionbudgets": 25,
    "priorityclasses": 26, "ingresses": 27, "networkpolicies": 29, "roles": 30,
    "clusterrolebindings": 33,
}
CT = {"protobuf": 6, "json": 0, "yaml": 1, "merge": 2, "strategic": 3, "jsonpatch": 4, "apply": 5}
ACCEPT = {"protobuf": 2, "json": 0, "yaml": 1, "table": 3, "meta": 4}
NAME_A = 1 << 2
STATUS, SCALE = 1 << 4, 2 << 4

POD_SPEC = {"containers": [{"name": "c", "image": "busybox", "ports": [{"containerPort": 80}],
                            "env": [{"name": "K", "value": "v"}],
                            "resources": {"limits": {"cpu": "100m", "memory": "64Mi"}}}]}
TEMPLATE = {"metadata": {"labels": {"app": "a"}}, "spec": POD_SPEC}
SELECTOR = {"matchLabels": {"app": "a"}}

OBJECTS = {
    "namespaces": ("v1", "Namespace", {}),
    "nodes": ("v1", "Node", {"spec": {"podCIDR": "10.244.0.0/24"}}),
    "pods": ("v1", "Pod", {"spec": POD_SPEC}),
    "services": ("v1", "Service", {"spec": {"selector": {"app": "a"}, "type": "NodePort",
                                            "ports": [{"port": 80, "targetPort": 8080}]}}),
    "configmaps": ("v1", "ConfigMap", {"data": {"k": "v"}}),
    "secrets": ("v1", "Secret", {"type": "Opaque", "data": {"k": "dg=="}, "stringData": {"s": "t"}}),
    "serviceaccounts": ("v1", "ServiceAccount", {}),
    "events": ("v1", "Event", {"involvedObject": {"kind": "Pod", "name": "a", "namespace": "default"},
                               "reason": "R", "message": "m", "type": "Normal"}),
    "leases": ("coordination.k8s.io/v1", "Lease",
               {"spec": {"holderIdentity": "h", "leaseDurationSeconds": 15,
                         "renewTime": "2026-01-01T00:00:00.000000Z", "leaseTransitions": 0}}),
    "persistentvolumes": ("v1", "PersistentVolume",
                          {"spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
                                    "hostPath": {"path": "/tmp"}}}),
    "deployments": ("apps/v1", "Deployment",
                    {"spec": {"replicas": 2, "selector": SELECTOR, "template": TEMPLATE}}),
    "replicasets": ("apps/v1", "ReplicaSet",
                    {"spec": {"replicas": 1, "selector": SELECTOR, "template": TEMPLATE}}),
    "daemonsets": ("apps/v1", "DaemonSet", {"spec": {"selector": SELECTOR, "template": TEMPLATE}}),
    "statefulsets": ("apps/v1", "StatefulSet",
                     {"spec": {"serviceName": "a", "selector": SELECTOR, "template": TEMPLATE}}),
    "jobs": ("batch/v1", "Job", {"spec": {"template": {"spec": dict(POD_SPEC, restartPolicy="Never")}}}),
    "cronjobs": ("batch/v1", "CronJob",
                 {"spec": {"schedule": "*/5 * * * *",
                           "jobTemplate": {"spec": {"template": {"spec": dict(POD_SPEC, restartPolicy="OnFailure")}}}}}),
    "horizontalpodautoscalers": ("autoscaling/v2", "HorizontalPodAutoscaler",
                                 {"spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "a"},
                                           "minReplicas": 1, "maxReplicas": 3}}),
    "poddisruptionbudgets": ("policy/v1", "PodDisruptionBudget", {"spec": {"minAvailable": 1, "selector": SELECTOR}}),
    "priorityclasses": ("scheduling.k8s.io/v1", "PriorityClass", {"value": 1000}),
    "ingresses": ("networking.k8s.io/v1", "Ingress",
                  {"spec": {"rules": [{"host": "a.example", "http": {"paths": [
                      {"path": "/", "pathType": "Prefix",
                       "backend": {"service": {"name": "a", "port": {"number": 80}}}}]}}]}}),
    "networkpolicies": ("networking.k8s.io/v1", "NetworkPolicy", {"spec": {"podSelector": SELECTOR}}),
    "roles": ("rbac.authorization.k8s.io/v1", "Role",
              {"rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]}),
    "clusterrolebindings": ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding",
                            {"roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "x"},
                             "subjects": [{"kind": "User", "name": "u"}]}),
}


def call(method, resource, flags=0, ct="json", accept="json", query="", name="", body=b""):
    head = bytes([METHOD[method], RESOURCE[resource] if resource in RESOURCE else 255, flags, CT[ct], ACCEPT[accept]])
    if isinstance(body, (dict, list)):
        body = json.dumps(body).encode()
    return head + query.encode() + b"\n" + name.encode() + b"\n" + body


def object_of(resource, name="a"):
    api_version, kind, rest = OBJECTS[resource]
    obj = {"apiVersion": api_version, "kind": kind, "metadata": {"name": name, "labels": {"app": "a"}}}
    obj.update(rest)
    return obj


def varint(n):
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def field(tag, payload):
    """A length-delimited protobuf field."""
    if isinstance(payload, str):
        payload = payload.encode()
    return varint(tag << 3 | 2) + varint(len(payload)) + payload


def envelope(api_version, kind, raw):
    """The `k8s\\0` envelope (runtime.Unknown) around an encoded object."""
    type_meta = field(1, api_version) + field(2, kind)
    return b"k8s\x00" + field(1, type_meta) + field(2, raw)


def protobuf_seeds():
    meta = field(1, "a") + field(11, field(1, "app") + field(2, "a"))
    configmap = field(1, meta) + field(2, field(1, "k") + field(2, "v"))
    container = field(1, "c") + field(2, "busybox") + field(6, varint(3 << 3) + varint(80))
    pod = field(1, meta) + field(2, field(2, container))
    yield "configmaps-protobuf", [
        call("POST", "configmaps", ct="protobuf", accept="protobuf", body=envelope("v1", "ConfigMap", configmap)),
        call("GET", "configmaps", NAME_A, accept="protobuf"),
        call("PUT", "configmaps", NAME_A, ct="protobuf", body=envelope("v1", "ConfigMap", configmap)),
    ]
    yield "pods-protobuf", [
        call("POST", "pods", ct="protobuf", accept="protobuf", body=envelope("v1", "Pod", pod)),
        call("GET", "pods", accept="protobuf"),
    ]


def seeds():
    yield from protobuf_seeds()
    for resource in OBJECTS:
        obj = object_of(resource)
        yield resource + "-crud", [
            call("POST", resource, body=obj),
            call("GET", resource, NAME_A, accept="table"),
            call("PATCH", resource, NAME_A, ct="merge", body={"metadata": {"labels": {"b": "c"}}}),
            call("PUT", resource, NAME_A, body=obj),
            call("GET", resource, query="labelSelector=app%3Da&limit=1", accept="meta"),
            call("DELETE", resource, NAME_A, body={"propagationPolicy": "Background"}),
        ]
        yield resource + "-apply", [
            call("PATCH", resource, NAME_A, ct="apply", query="fieldManager=fuzz&force=true",
                 body=json.dumps(obj).encode()),
            call("PATCH", resource, NAME_A, ct="jsonpatch",
                 body=[{"op": "add", "path": "/metadata/annotations", "value": {"x": "y"}},
                       {"op": "test", "path": "/metadata/name", "value": "a"}]),
            call("PATCH", resource, NAME_A, ct="strategic", body={"metadata": {"finalizers": ["f/x"]}}),
            call("DELETE", resource, NAME_A),
            call("GET", resource, NAME_A, accept="yaml"),
        ]
    deploy = object_of("deployments")
    yield "deployments-scale-status", [
        call("POST", "deployments", body=deploy),
        call("GET", "deployments", NAME_A | SCALE),
        call("PUT", "deployments", NAME_A | SCALE,
             body={"apiVersion": "autoscaling/v1", "kind": "Scale", "metadata": {"name": "a", "namespace": "default"},
                   "spec": {"replicas": 5}}),
        call("PATCH", "deployments", NAME_A | STATUS, ct="merge", body={"status": {"replicas": 1}}),
        call("GET", "deployments", query="watch=true&resourceVersion=0"),
    ]
    yield "pods-yaml", [
        call("POST", "pods", ct="yaml",
             body=b"apiVersion: v1\nkind: Pod\nmetadata:\n  name: a\nspec:\n  containers:\n  - name: c\n    image: busybox\n"),
        call("GET", "pods", query="fieldSelector=spec.nodeName%3D%2Cstatus.phase!%3DRunning"),
    ]
    yield "namespace-finalize", [
        call("POST", "namespaces", body={"metadata": {"name": "a"}}),
        call("PUT", "namespaces", NAME_A | (3 << 4), body={"metadata": {"name": "a"}, "spec": {"finalizers": []}}),
        call("DELETE", "namespaces", NAME_A),
    ]
    yield "raw-paths", [
        call("GET", "raw", name="/apis"),
        call("GET", "raw", name="/api/v1"),
        call("GET", "raw", name="/openapi/v3/api/v1"),
        call("GET", "raw", name="/apis/apps/v1/namespaces/default/deployments?continue=abc"),
    ]


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    for name, calls in seeds():
        with open(os.path.join(out, name), "wb") as f:
            f.write(b"\n@@\n".join(calls))


if __name__ == "__main__":
    main()
