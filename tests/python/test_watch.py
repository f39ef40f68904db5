"""Watch semantics through the `kubernetes` Python client against the real binary:
(b) a watch resumes after a server restart from its last resourceVersion without missing or
repeating an event; (c) a resourceVersion older than the watch history gets ERROR 410 inside
the stream, and a list-then-watch client relists and ends with the right state."""

import threading
import time

import pytest
from kubernetes import client, watch
from kubernetes.client.rest import ApiException

NS = "default"
HANG_GUARD = 60.0
WATCH_TIMEOUT = 120  # server-side timeoutSeconds; also disables the client's own retries


def cm(name, value):
    return client.V1ConfigMap(metadata=client.V1ObjectMeta(name=name), data={"v": str(value)})


class Writer:
    """Makes writes and records the event each must produce: (type, name, rv or None)."""

    def __init__(self, core):
        self.core = core
        self.expected = []
        self.exists = set()
        self.counter = 0

    def step(self, name):
        """Create if missing, else modify; every 5th modify deletes instead."""
        self.counter += 1
        if name not in self.exists:
            obj = self.core.create_namespaced_config_map(NS, cm(name, self.counter))
            self.exists.add(name)
            self.expected.append(("ADDED", name, int(obj.metadata.resource_version)))
        elif self.counter % 5 == 0:
            self.core.delete_namespaced_config_map(name, NS)
            self.exists.discard(name)
            # The DELETED event carries the deletion's own resourceVersion, which the delete
            # response does not: only its order is checked.
            self.expected.append(("DELETED", name, None))
        else:
            obj = self.core.patch_namespaced_config_map(
                name, NS, {"data": {"v": str(self.counter)}})
            self.expected.append(("MODIFIED", name, int(obj.metadata.resource_version)))

    def run(self, count, names=("w-a", "w-b", "w-c", "w-d")):
        for i in range(count):
            self.step(names[i % len(names)])


class Recorder(threading.Thread):
    """Watches configmaps from a resourceVersion in a thread, recording every event."""

    def __init__(self, core, resource_version):
        super().__init__(daemon=True)
        self.core = core
        self.resource_version = resource_version
        self.events = []
        self.error = None
        self.watch = watch.Watch()

    def run(self):
        try:
            for ev in self.watch.stream(self.core.list_namespaced_config_map, NS,
                                        resource_version=self.resource_version,
                                        timeout_seconds=WATCH_TIMEOUT):
                meta = ev["raw_object"]["metadata"]
                self.events.append((ev["type"], meta["name"], int(meta["resourceVersion"])))
        except Exception as e:  # the server went away
            self.error = e

    def last_rv(self):
        return self.events[-1][2] if self.events else int(self.resource_version)


def wait_until(pred, what):
    deadline = time.monotonic() + HANG_GUARD
    while time.monotonic() < deadline:
        if pred():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def assert_same_sequence(seen, expected):
    assert [(t, n) for t, n, _ in seen] == [(t, n) for t, n, _ in expected], (
        f"event sequence differs from writes:\nseen     {seen}\nexpected {expected}")
    for (t, n, rv), (_, _, want) in zip(seen, expected):
        if want is not None:
            assert rv == want, f"{t} {n}: event rv {rv}, write acknowledged rv {want}"
    rvs = [rv for _, _, rv in seen]
    assert rvs == sorted(rvs) and len(set(rvs)) == len(rvs), f"rvs not increasing: {rvs}"


def test_watch_resumes_across_restart(server):
    core = server.core()
    start_rv = core.list_namespaced_config_map(NS).metadata.resource_version
    writer = Writer(core)

    w1 = Recorder(core, start_rv)
    w1.start()
    time.sleep(0.5)  # the watch is registered before the first write
    writer.run(15)
    wait_until(lambda: len(w1.events) >= len(writer.expected), "the first watch to catch up")

    assert server.terminate() == 0, f"SIGTERM exit code; log:\n{server.logs()}"
    w1.join(HANG_GUARD)
    assert not w1.is_alive(), "the watch did not end when the server stopped"
    server.start()
    core = server.core()
    writer.core = core

    # Writes while no watch is open must still reach the resumed watch.
    writer.run(5, names=("w-a", "w-e"))
    w2 = Recorder(core, str(w1.last_rv()))
    w2.start()
    time.sleep(0.5)
    writer.run(10)
    wait_until(lambda: len(w1.events) + len(w2.events) >= len(writer.expected),
               "the resumed watch to catch up")
    time.sleep(0.5)  # nothing extra (a repeat) arrives late
    w2.watch.stop()

    assert_same_sequence(w1.events + w2.events, writer.expected)


def written(listed):
    """name -> value of the ConfigMaps the writers made (not the controllers' own, such as
    kube-root-ca.crt, which appears when the leader's controllers have started)."""
    return {i.metadata.name: i.data["v"] for i in listed.items if i.data and "v" in i.data}


def list_then_watch(core, cached_state, cached_rv, on_410):
    """A list-then-watch client: watch from the cached rv; on 410 relist and watch again.
    Returns (state, rv) once a watch has run quietly for a while."""
    state = dict(cached_state)
    rv = cached_rv
    relists = 0
    while True:
        w = watch.Watch()
        try:
            for ev in w.stream(core.list_namespaced_config_map, NS, resource_version=rv,
                               timeout_seconds=3):
                meta = ev["raw_object"]["metadata"]
                value = (ev["raw_object"].get("data") or {}).get("v")
                if value is None:
                    pass  # not a writer's (kube-root-ca.crt)
                elif ev["type"] in ("ADDED", "MODIFIED"):
                    state[meta["name"]] = value
                elif ev["type"] == "DELETED":
                    state.pop(meta["name"], None)
                rv = meta["resourceVersion"]
            return state, rv, relists
        except ApiException as e:
            if e.status != 410:
                raise
            on_410(e)
            relists += 1
            assert relists <= 3, "relisted more than 3 times"
            listed = core.list_namespaced_config_map(NS)
            state = written(listed)
            rv = listed.metadata.resource_version


def test_too_old_resource_version_relists(make_server):
    server = make_server(["--watch-history", "10"])
    core = server.core()
    listed = core.list_namespaced_config_map(NS)
    old_state = written(listed)
    old_rv = listed.metadata.resource_version

    writer = Writer(core)
    writer.run(50, names=tuple(f"old-{i}" for i in range(8)))
    truth = written(core.list_namespaced_config_map(NS))

    errors = []

    def on_410(e):
        # Raised by Watch.stream for an ERROR event has no HTTP headers; an HTTP 410 response
        # has them. Upstream sends the event (kube-rs relists only on that form).
        errors.append((e.status, e.reason, e.headers is None))

    state, rv, relists = list_then_watch(core, old_state, old_rv, on_410)
    assert relists == 1, f"relists: {relists}"
    assert errors and errors[0][0] == 410
    assert errors[0][2], f"410 came as an HTTP status, not as an ERROR event: {errors}"
    assert "Expired" in errors[0][1] or "too old" in errors[0][1], errors
    assert state == truth

    # After the relist, the watch from the new rv sees further changes.
    writer.run(3, names=("old-0", "new-1", "new-2"))
    truth = written(core.list_namespaced_config_map(NS))
    state, _, relists = list_then_watch(core, state, rv, on_410)
    assert relists == 0
    assert state == truth


def test_watch_from_current_rv_is_not_expired(make_server):
    server = make_server(["--watch-history", "10"])
    core = server.core()
    Writer(core).run(30)
    rv = core.list_namespaced_config_map(NS).metadata.resource_version
    w = watch.Watch()
    got = []
    for ev in w.stream(core.list_namespaced_config_map, NS, resource_version=rv,
                       timeout_seconds=1):
        got.append(ev["type"])
    assert got == [], f"events after the current rv: {got}"
