"""Fixtures of the Python end-to-end tests: start the real `litek8s apiserver` binary in a
temporary data directory on a free loopback port, stop it (SIGTERM or SIGKILL), restart it on
the same data, and build `kubernetes` API clients from the kubeconfig it writes.

The binary is $LITEK8S_BIN, else <cargo target dir>/debug/litek8s (run-all.sh builds it).
"""

import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest
from kubernetes import client, config

REPO = Path(__file__).resolve().parents[2]
READY_TIMEOUT = 60.0


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    """Keeps each phase's report on the test item, for fixtures to see whether it failed."""
    report = yield
    setattr(item, f"report_{report.when}", report)
    return report


def keep_logs_if_failed(request, servers):
    """When the test failed, copies every server's logs to
    <target>/test-logs/python/<test name>/ (pytest's temporary directories are deleted by later
    runs), so that a rare failure in CI can be read afterwards."""
    report = getattr(request.node, "report_call", None)
    if report is None or not report.failed:
        return
    kept = REPO / "target" / "test-logs" / "python" / request.node.name
    kept.mkdir(parents=True, exist_ok=True)
    for i, server in enumerate(servers):
        for n in range(1, server.starts + 1):
            log = server.log_path(n)
            if log.exists():
                shutil.copy(log, kept / f"{i}-{server.root.name}-{log.name}")


def litek8s_bin():
    if os.environ.get("LITEK8S_BIN"):
        return os.environ["LITEK8S_BIN"]
    target = os.environ.get("CARGO_TARGET_DIR") or str(REPO / "target")
    return str(Path(target) / "debug" / "litek8s")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def readyz(port):
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as resp:
            return resp.status
    except Exception:
        return None


class Server:
    """One litek8s apiserver process and its data directory."""

    def __init__(self, root, extra_args=()):
        self.root = Path(root)
        self.data_dir = self.root / "data"
        self.port = free_port()
        self.extra_args = list(extra_args)
        self.proc = None
        self.starts = 0
        self.name = "pytest"
        self.env = dict

    @property
    def kubeconfig(self):
        return str(self.data_dir / "kubeconfig.yaml")

    def log_path(self, n=None):
        return self.root / f"server-{n or self.starts}.log"

    def logs(self):
        return "".join(
            self.log_path(n).read_text(errors="replace") for n in range(1, self.starts + 1)
        )

    def start(self):
        assert self.proc is None, "already running"
        self.starts += 1
        log = open(self.log_path(), "wb")
        self.proc = subprocess.Popen(
            [litek8s_bin(), "apiserver", "--data-dir", str(self.data_dir),
             "--listen", f"127.0.0.1:{self.port}", "--name", self.name, *self.extra_args],
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            env={**os.environ, **self.env()},
        )
        log.close()
        deadline = time.monotonic() + READY_TIMEOUT
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                code = self.proc.returncode
                self.proc = None
                raise RuntimeError(f"litek8s exited with {code} during startup:\n{self.logs()}")
            if readyz(self.port) == 200:
                return self
            time.sleep(0.05)
        raise RuntimeError(f"litek8s not ready after {READY_TIMEOUT}s:\n{self.logs()}")

    def terminate(self):
        """SIGTERM and wait; returns the exit code."""
        if self.proc is None:
            return None
        self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait()
        self.proc = None
        return code

    def kill(self):
        if self.proc is None:
            return
        self.proc.kill()
        self.proc.wait()
        self.proc = None

    def api_client(self):
        return config.new_client_from_config(config_file=self.kubeconfig)

    def core(self):
        return client.CoreV1Api(self.api_client())


@pytest.fixture
def make_server(tmp_path, request):
    """Factory: make_server(extra_args) starts a server; all are killed at the end (their logs
    kept if the test failed)."""
    servers = []

    def make(extra_args=()):
        root = tmp_path / f"server{len(servers)}"
        root.mkdir()
        server = Server(root, extra_args).start()
        servers.append(server)
        return server

    yield make
    for server in servers:
        server.kill()
    keep_logs_if_failed(request, servers)


@pytest.fixture
def server(make_server):
    return make_server()


class ClusterMember(Server):
    """One member of an HA cluster: `--cluster-init` for the first, `--server` for the rest.
    `env` is called at each start (the join token exists only once the first member runs)."""

    def __init__(self, root, name, mode_args, env):
        super().__init__(root, ["--raft-port", str(free_port()), *mode_args])
        self.name = name
        self.env = env


class Cluster:
    """An HA cluster of litek8s processes on loopback (fast Raft timers: 100 ms heartbeat)."""

    def __init__(self, root, size):
        self.root = Path(root)
        self.members = []
        for i in range(size):
            name = f"lk{i + 1}"
            mode = ["--cluster-init"] if i == 0 else ["--server", f"https://127.0.0.1:{self.members[0].port}"]
            member_root = self.root / name
            member_root.mkdir(parents=True)
            member = ClusterMember(member_root, name, mode, self.env)
            member.start()
            self.members.append(member)

    def env(self):
        env = {"LITEK8S_RAFT_HEARTBEAT_MS": "100"}
        token = self.root / "lk1" / "data" / "join-token"
        if token.exists():
            env["LITEK8S_TOKEN"] = token.read_text().strip()
        return env

    def leader(self):
        """The running member that leads, asked of the running members (None if unknown)."""
        import json
        import ssl

        secret = self.env()["LITEK8S_TOKEN"].rsplit(":", 1)[1]
        ctx = ssl.create_default_context(cafile=str(self.members[0].data_dir / "ca.crt"))
        for m in self.members:
            if m.proc is None:
                continue
            req = urllib.request.Request(
                f"https://127.0.0.1:{m.port}/litek8s/v1/members", data=b"null", method="POST",
                headers={"Authorization": f"Bearer {secret}", "Content-Type": "application/json"},
            )
            try:
                with urllib.request.urlopen(req, context=ctx, timeout=5) as resp:
                    done = json.load(resp).get("Done")
            except Exception:
                continue
            if not done or done.get("leader") is None:
                continue
            for view in done["members"]:
                if view["node_id"] == done["leader"]:
                    for cand in self.members:
                        if cand.name == view["name"] and cand.proc is not None:
                            return cand
        return None

    def kill_all(self):
        for m in self.members:
            m.kill()


@pytest.fixture
def cluster(tmp_path, request):
    c = Cluster(tmp_path / "cluster", 3)
    yield c
    c.kill_all()
    keep_logs_if_failed(request, c.members)
