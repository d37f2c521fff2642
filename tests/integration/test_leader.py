"""Leader election on a real Lease: one replica acts, the other takes over, a cut-off leader fences itself.

Aspects covered:
- of two candidates only one holds the lease; when the holder dies (stops renewing) the other
  takes over only after the lease duration of its own observation;
- a leader cut off from the apiserver stops counting as leader (the fence every write checks)
  before the other candidate could take the lease;
- a clean stop hands the lease over at once;
- two `janitor run` processes: only the leader acts (janitor_leader, actions on /metrics); after
  the leader is killed with SIGKILL the other takes over and acts; nothing is done twice.
"""

from __future__ import annotations

import datetime
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request

from kubernetes import client

from devenv import access
from devenv.procs import wait_until
from janitor import annotations as a
from janitor.leader import LeaseElector, LeaseSettings


def settings(namespace: str, identity: str, lease: float = 3.0) -> LeaseSettings:
    return LeaseSettings(namespace, "janitor-test", identity, datetime.timedelta(seconds=lease),
                         datetime.timedelta(seconds=lease * 2 / 3), datetime.timedelta(seconds=0.3))


def test_one_leader_takeover_after_death_and_fencing_when_cut_off(sandbox, namespace: str) -> None:
    api_a, api_b = access.api_client(sandbox.kubeconfig), access.api_client(sandbox.kubeconfig)
    a_, b_ = LeaseElector(api_a, settings(namespace, "a")), LeaseElector(api_b, settings(namespace, "b"))
    assert a_.try_acquire_or_renew() and not b_.try_acquire_or_renew()
    assert a_.try_acquire_or_renew() and not b_.try_acquire_or_renew()

    # a is cut off from the apiserver: its renewals fail from now on.
    a_.leases = client.CoordinationV1Api(client.ApiClient(client.Configuration(host="https://127.0.0.1:9")))
    began = time.monotonic()
    a_.try_acquire_or_renew()
    assert a_.is_leader()  # one failed renewal does not end a's term: the last one is fresh
    while time.monotonic() - began < 10 and not b_.try_acquire_or_renew():
        a_.try_acquire_or_renew()
        time.sleep(0.1)
    taken_at = time.monotonic()
    assert b_.is_leader()
    assert not a_.is_leader()  # the moment b holds the lease, a's fence had already closed
    assert taken_at - began >= 3.0 - 0.5  # not before a whole lease duration of b's own observation
    lease = client.CoordinationV1Api(api_b).read_namespaced_lease("janitor-test", namespace)
    assert lease.spec.holder_identity == "b" and lease.spec.lease_transitions == 1
    assert lease.spec.renew_time.tzinfo is not None

    # A clean stop hands the lease over at once.
    c = LeaseElector(access.api_client(sandbox.kubeconfig), settings(namespace, "c", lease=30.0))
    b_.stop(release=True)
    assert c.try_acquire_or_renew()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _metric(port: int, name: str) -> float:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
            text = resp.read().decode()
    except OSError:
        return -1.0
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name) and not line.startswith("#"):
            total += float(line.rsplit(" ", 1)[1])
    return total


def test_two_janitors_one_acts_the_other_takes_over(sandbox, core: client.CoreV1Api, namespace: str) -> None:
    ports = [_free_port(), _free_port()]
    env = {**os.environ, "KUBECONFIG": str(sandbox.kubeconfig)}
    procs = [subprocess.Popen(
        [sys.executable, "-m", "janitor.cli", "run", "--leader-elect", "--lease-duration", "3", "--interval", "1",
         "--metrics-port", str(port), "--namespaces", namespace, "--state-namespace", namespace,
         "--kinds", "ConfigMap"],
        env={**env, "POD_NAME": f"janitor-{i}"}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for i, port in enumerate(ports)]
    try:
        wait_until(lambda: sorted(_metric(p, "janitor_leader ") for p in ports) == [0.0, 1.0], timeout=60,
                   what="one leader and one standby")
        leader = next(i for i, p in enumerate(ports) if _metric(p, "janitor_leader ") == 1.0)
        core.create_namespaced_config_map(namespace, client.V1ConfigMap(
            metadata=client.V1ObjectMeta(name="first", annotations={a.EXPIRES: "2020-01-01"})))
        wait_until(lambda: "first" not in {c.metadata.name for c in core.list_namespaced_config_map(namespace).items},
                   timeout=30, what="the leader to delete the expired ConfigMap")
        deleted = "janitor_actions_total{action=\"delete\",outcome=\"done\""
        # A cycle's outcomes are counted when it ends, a moment after the delete itself.
        wait_until(lambda: _metric(ports[leader], deleted) == 1.0, timeout=30, what="the leader to count the delete")
        assert _metric(ports[1 - leader], deleted) == 0.0
        assert _metric(ports[1 - leader], "janitor_cycles_total{result=\"success\"}") == 0.0  # standing by

        procs[leader].send_signal(signal.SIGKILL)
        procs[leader].wait()
        core.create_namespaced_config_map(namespace, client.V1ConfigMap(
            metadata=client.V1ObjectMeta(name="second", annotations={a.EXPIRES: "2020-01-01"})))
        wait_until(lambda: _metric(ports[1 - leader], "janitor_leader ") == 1.0, timeout=30,
                   what="the standby to take over")
        wait_until(lambda: "second" not in {c.metadata.name for c in core.list_namespaced_config_map(namespace).items},
                   timeout=30, what="the new leader to delete the second ConfigMap")
        wait_until(lambda: _metric(ports[1 - leader], deleted) == 1.0, timeout=30,
                   what="the new leader to count its delete")
        cycles = "janitor_cycles_total{result=\"success\"}"
        seen = _metric(ports[1 - leader], cycles)
        wait_until(lambda: _metric(ports[1 - leader], cycles) >= seen + 2, timeout=30, what="two more cycles")
        assert _metric(ports[1 - leader], deleted) == 1.0  # the first one was not deleted twice
        events = [e for e in core.list_namespaced_event(namespace).items if e.reason == "ExpiryTimeReached"
                  or e.involved_object.name in ("first", "second")]
        assert sorted(e.involved_object.name for e in events) == ["first", "second"]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.terminate()
                proc.wait(timeout=30)
