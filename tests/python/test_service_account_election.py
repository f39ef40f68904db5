"""Leader election as a ServiceAccount: two LeaseLock candidates (candidate.py) run with a
bound token from the TokenRequest API, whose only permissions are a Role on `leases`. One
leads, holds the Lease, and takes nothing else: listing pods is 403. Killing it hands the
Lease to the other."""

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from kubernetes import client, config
from kubernetes.client.rest import ApiException

import candidate
from test_leader_election import leaders, read_events, wait_for

HERE = Path(__file__).resolve().parent
NAMESPACE = "default"
ACCOUNT = "elector"


def token_kubeconfig(server, token, path):
    text = f"""apiVersion: v1
kind: Config
clusters:
- name: c
  cluster:
    server: https://127.0.0.1:{server.port}
    certificate-authority: {server.data_dir / "ca.crt"}
users:
- name: u
  user:
    token: {token}
contexts:
- name: c
  context: {{cluster: c, user: u}}
current-context: c
"""
    path.write_text(text)
    return str(path)


def grant_leases_only(api):
    core = client.CoreV1Api(api)
    rbac = client.RbacAuthorizationV1Api(api)
    core.create_namespaced_service_account(NAMESPACE, {"metadata": {"name": ACCOUNT}})
    rbac.create_namespaced_role(NAMESPACE, {
        "metadata": {"name": "leases-only"},
        "rules": [{"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
                   "verbs": ["get", "list", "watch", "create", "update", "patch"]}],
    })
    rbac.create_namespaced_role_binding(NAMESPACE, {
        "metadata": {"name": "elector-leases"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                    "name": "leases-only"},
        "subjects": [{"kind": "ServiceAccount", "name": ACCOUNT, "namespace": NAMESPACE}],
    })
    answer = core.create_namespaced_service_account_token(
        ACCOUNT, NAMESPACE, {"spec": {"expirationSeconds": 3600}})
    return answer.status.token


def test_lease_election_as_a_service_account(server, tmp_path):
    admin = server.api_client()
    token = grant_leases_only(admin)
    kubeconfig = token_kubeconfig(server, token, tmp_path / "elector.kubeconfig")

    as_account = config.new_client_from_config(config_file=kubeconfig)
    review = client.AuthenticationV1Api(as_account).create_self_subject_review({})
    assert review.status.user_info.username == f"system:serviceaccount:{NAMESPACE}:{ACCOUNT}"
    with pytest.raises(ApiException) as denied:
        client.CoreV1Api(as_account).list_namespaced_pod(NAMESPACE)
    assert denied.value.status == 403
    assert (f'pods is forbidden: User \\"system:serviceaccount:{NAMESPACE}:{ACCOUNT}\\" '
            f'cannot list resource \\"pods\\" in API group \\"\\" in the namespace '
            f'\\"{NAMESPACE}\\"') in denied.value.body

    names = ["sa-a", "sa-b"]
    logs = {n: tmp_path / f"{n}.log" for n in names}
    procs = {}
    try:
        for n in names:
            procs[n] = subprocess.Popen(
                [sys.executable, str(HERE / "candidate.py"), kubeconfig, "sa-election", n,
                 str(logs[n])],
                stdin=subprocess.DEVNULL,
            )
        first = wait_for(lambda: leaders(read_events(logs.values())), "a first leader")
        assert len(first) == 1, f"two leaders at once: {first}"
        (leader,) = first
        coord = client.CoordinationV1Api(admin)
        assert coord.read_namespaced_lease("sa-election", NAMESPACE).spec.holder_identity == leader
        killed_at = time.monotonic()
        procs[leader].send_signal(signal.SIGKILL)
        procs[leader].wait()

        def successor():
            for t, who, state in read_events(logs.values()):
                if state == "LEADER" and who != leader and t > killed_at:
                    return who
            return None

        other = wait_for(successor, "the other candidate to take over")
        time.sleep(2 * candidate.RETRY_PERIOD)
        assert coord.read_namespaced_lease("sa-election", NAMESPACE).spec.holder_identity == other
        errors = [line for path in logs.values() if path.exists()
                  for line in path.read_text().splitlines() if "ERROR" in line]
        assert not errors, f"a candidate failed a request: {errors}"
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.send_signal(signal.SIGKILL)
                p.wait()
