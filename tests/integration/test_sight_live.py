"""No sight, no change, on the sandbox: pods taken from the janitor's role while it runs its watch cache.

Aspects covered:
- a Job marked and warned, under an enforcing policy; the janitor's ClusterRole loses `pods` (an RBAC
  edit) and its watch cache comes up again under it (a restart, or a watch that reconnects): the
  cycle skips Pods (403) and leaves the mark as it is (no "no longer covered", no "cancelled" note
  to the owner), and says which kind and why; given `pods` back, the same mark stands, with the same
  deadline (nothing marked or warned again).
"""

from __future__ import annotations

import datetime
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client
from runner import Runner
from runner import settings as build
from test_lifecycle import ALICE, alice, create_job, write_policy  # noqa: F401 (alice is a fixture)

from devenv import access
from devenv.procs import wait_until
from janitor import annotations as a
from janitor import rbac
from janitor.decide.lifecycle import LifecycleSettings
from janitor.observe.cache import ClusterCache
from janitor.settings import DEFAULT_KINDS

KINDS = tuple(k for k in DEFAULT_KINDS if k.kind not in ("Service", "Notebook"))


@pytest.fixture
def role(kube: client.ApiClient, core: client.CoreV1Api, namespace: str, tmp_path: Path) -> Iterator[
        tuple[client.ApiClient, str]]:
    """An ApiClient as a janitor ServiceAccount bound to the generated ClusterRole, and the role's name."""
    name = f"janitor-{uuid.uuid4().hex[:6]}"
    with access.bound_account(kube, namespace, "janitor", rbac.cluster_role(KINDS, name=name),
                              tmp_path / "janitor.kubeconfig") as api:
        yield api, name


def without_pods(kube: client.ApiClient, name: str) -> None:
    """The role as an RBAC edit leaves it: everything but pods."""
    body = rbac.cluster_role(tuple(k for k in KINDS if k.kind != "Pod"), name=name)
    body["rules"] = [r for r in body["rules"] if r["resources"] != ["pods"]]
    client.RbacAuthorizationV1Api(kube).replace_cluster_role(name, body)


@pytest.fixture
def caches() -> Iterator[list[ClusterCache]]:
    made: list[ClusterCache] = []
    yield made
    for cache in made:
        cache.stop()


def cached(api: client.ApiClient, settings, caches: list[ClusterCache]) -> Runner:  # noqa: ANN001
    """A janitor with a watch cache of its own, started now: as after a restart under the role of now."""
    runner = Runner(api, settings)
    runner.ports.cache = ClusterCache(api, settings)
    caches.append(runner.ports.cache)
    runner.ports.cache.ensure(pods=True, nodes=False, oom=False)
    return runner


def test_pods_taken_from_the_role_leave_every_mark_as_it_is(
        role, kube, core, namespace, sandbox, tmp_path, slack, alice, caches) -> None:  # noqa: F811
    api, name = role
    create_job(kube, namespace, "train")
    wait_until(lambda: any(p.status.phase == "Running" for p in core.list_namespaced_pod(namespace).items),
               timeout=90, what="the Job's pod Running")
    job = client.BatchV1Api(kube).read_namespaced_job("train", namespace)
    now = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0)
    warned, deadline = now - datetime.timedelta(hours=2), now + datetime.timedelta(hours=20)
    mark = {a.POLICY: "idle-gpu", a.DEADLINE: a.format_expires(deadline), a.MARKED_AT: a.format_expires(warned),
            a.REASON: "idle: GPU 0 peak 0", a.MARKED_UID: job.metadata.uid, a.WARNED_AT: a.format_expires(warned),
            a.WARNED_VIA: f"owner D0ALICE/{warned.timestamp():.6f}",
            a.WARNED_OF: f"delete {a.format_expires(deadline)}", a.WARNED_TO: f"email:{ALICE[0]}"}
    client.BatchV1Api(kube).patch_namespaced_job("train", namespace, {"metadata": {"annotations": mark}})
    settings = build(namespaces=(namespace,), state_namespace=namespace, kinds=KINDS,
                     policy_paths=(str(write_policy(tmp_path / "p.yaml", namespace)),),
                     slack_token=sandbox.slack_token, slack_api_url=sandbox.slack_api_url,
                     lifecycle=LifecycleSettings(pace=datetime.timedelta(0)))

    def notes() -> dict[str, str]:
        return dict(client.BatchV1Api(kube).read_namespaced_job("train", namespace).metadata.annotations or {})

    without_pods(kube, name)
    wait_until(lambda: _forbidden(client.CoreV1Api(api), namespace), timeout=30, what="pods forbidden to the janitor")
    result = cached(api, settings, caches).run_cycle()
    assert any("Pod (forbidden" in n for n in result.plan.notices), result.plan.notices
    [change] = [c for c in result.plan.changes if c.workload.name == "train"]
    assert str(change.step) == "wait" and "Pod could not be read" in str(change.why)
    assert {k: notes().get(k) for k in mark} == mark  # the mark as it was
    assert not slack.requests("chat.postMessage")  # no one was told "nothing will happen to it"

    client.RbacAuthorizationV1Api(kube).replace_cluster_role(name, rbac.cluster_role(KINDS, name=name))
    wait_until(lambda: not _forbidden(client.CoreV1Api(api), namespace), timeout=30, what="pods readable again")
    cached(api, settings, caches).run_cycle()
    assert {k: notes().get(k) for k in (a.MARKED_AT, a.DEADLINE, a.WARNED_AT)} == {
        k: mark[k] for k in (a.MARKED_AT, a.DEADLINE, a.WARNED_AT)}  # not marked or warned anew


def _forbidden(core: client.CoreV1Api, namespace: str) -> bool:
    try:
        core.list_namespaced_pod(namespace, limit=1)
    except client.exceptions.ApiException as e:
        if e.status == 403:
            return True
        raise
    return False
