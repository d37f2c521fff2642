"""Stuck Pending workloads through the lifecycle, on the sandbox's real scheduler and kwok nodes.

Aspects covered:
- a Job that cannot be scheduled (its node is full) is marked after `after` in that state, its
  owner warned with the scheduler's message, and deleted at the deadline;
- a Deployment whose image cannot be pulled goes the same way, ImagePullBackOff quoted;
- a scheduling-gated pod (Kueue style) is left alone;
- a pod asking for 16 GPUs on 4-GPU nodes is reported as never fitting on the first cycle, to its
  owner and in the admins' report;
- a pod that only a cordoned node, or a node whose device plugin reports 0 of its 4 GPUs, could
  hold waits: not marked on the first cycle, marked after `after`, and its owner (and `janitor
  explain`) reads which node it waits for and why; the admins' report does not call it never fitting;
- a pod whose init container is running is starting, not stuck, past `after`; one whose init
  container keeps failing is stuck;
- with a GPU node group at zero (the scale-from-zero stand-in playing cluster-autoscaler), a GPU
  pod for which a scale-up was triggered is not marked never fitting (its owner reads the scale-up),
  the node appears and the pod runs; a pod cluster-autoscaler keeps saying no group could run is
  marked never fitting and listed in the admins' report; the watch cache reads the same.
"""

from __future__ import annotations

import datetime
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from runner import Runner
from runner import settings as build

from devenv.autoscaler import POOL_LABEL, Mode, ScaleFromZero
from devenv.nodes import WAITING, NodeSpec, node_manifest
from devenv.procs import wait_until
from devenv.slack_standin import SlackStandInControl
from janitor import annotations as a
from janitor.decide.autoscaling import NodeAutoscaling, Said
from janitor.decide.lifecycle import LifecycleSettings
from janitor.observe import observation
from janitor.observe.cache import ClusterCache
from janitor.policy.model import Pending, Policy

ALICE = ("alice@lab.example", "U0ALICE1", "alice")
NODE = "cpu-node-1"


def container(cpu: str = "100m", gpus: int = 0) -> client.V1Container:
    limits = {"nvidia.com/gpu": str(gpus)} if gpus else None
    return client.V1Container(name="main", image="registry.example/train:1",
                              resources=client.V1ResourceRequirements(requests={"cpu": cpu}, limits=limits))


def pinned(cpu: str, labels: dict[str, str], notes: dict[str, str] | None = None,
           restart: str = "Never") -> client.V1PodTemplateSpec:
    return client.V1PodTemplateSpec(
        metadata=client.V1ObjectMeta(labels=labels, annotations=notes),
        spec=client.V1PodSpec(restart_policy=restart, node_selector={"kubernetes.io/hostname": NODE},
                              containers=[container(cpu)]))


def test_stuck_pending_workloads_go_through_the_lifecycle(
        kube, core: client.CoreV1Api, namespace: str, sandbox, tmp_path, slack: SlackStandInControl) -> None:
    slack.add_user(*ALICE)
    owner = {"janitor/owner": ALICE[0]}
    batch, apps = client.BatchV1Api(kube), client.AppsV1Api(kube)
    core.create_namespaced_pod(namespace, client.V1Pod(
        metadata=client.V1ObjectMeta(name="filler"),
        spec=client.V1PodSpec(node_selector={"kubernetes.io/hostname": NODE}, containers=[container("20")])))
    wait_until(lambda: core.read_namespaced_pod("filler", namespace).status.phase == "Running", timeout=60,
               what="the filler pod Running")
    batch.create_namespaced_job(namespace, client.V1Job(
        metadata=client.V1ObjectMeta(name="queued", annotations=owner),
        spec=client.V1JobSpec(template=pinned("20", {"app": "queued"}))))
    apps.create_namespaced_deployment(namespace, client.V1Deployment(
        metadata=client.V1ObjectMeta(name="pull-stuck", annotations=owner),
        spec=client.V1DeploymentSpec(replicas=1, selector=client.V1LabelSelector(match_labels={"app": "pull-stuck"}),
                                     template=pinned("100m", {"app": "pull-stuck"}, {WAITING: "ImagePullBackOff"},
                                                     "Always"))))
    core.create_namespaced_pod(namespace, client.V1Pod(
        metadata=client.V1ObjectMeta(name="gated", annotations=owner),
        spec=client.V1PodSpec(scheduling_gates=[client.V1PodSchedulingGate(name="kueue.x-k8s.io/admission")],
                              containers=[container()])))
    core.create_namespaced_pod(namespace, client.V1Pod(
        metadata=client.V1ObjectMeta(name="huge", annotations=owner),
        spec=client.V1PodSpec(containers=[container(gpus=16)])))

    def state(name: str) -> str:
        pods = core.list_namespaced_pod(namespace).items
        found = [p for p in pods if p.metadata.name == name or p.metadata.name.startswith(f"{name}-")]
        conditions = {c.type: c for c in (found[0].status.conditions or [])} if found else {}
        waiting = [c.state.waiting.reason for c in (found[0].status.container_statuses or []) if c.state.waiting] \
            if found else []
        return (conditions.get("PodScheduled").reason or "scheduled") if conditions.get("PodScheduled") and \
            conditions["PodScheduled"].status == "False" else (waiting[0] if waiting else "")

    wait_until(lambda: (state("queued"), state("pull-stuck"), state("gated"), state("huge")) ==
               ("Unschedulable", "ImagePullBackOff", "SchedulingGated", "Unschedulable"),
               timeout=60, what="the pods in their stuck states")

    policy = tmp_path / "pending.yaml"
    policy.write_text(f"""policies:
- name: stuck
  mode: enforce
  match: {{namespaces: {{include: ["{namespace}"]}}}}
  triggers: {{pending: {{after: 8s}}}}
  lifecycle: {{warnBefore: 6s, remindEvery: 0s}}
""")
    janitor = Runner(kube, build(
        namespaces=(namespace,), state_namespace=namespace, policy_paths=(str(policy),),
        prometheus_url=sandbox.prometheus_url, slack_token=sandbox.slack_token, slack_api_url=sandbox.slack_api_url,
        lifecycle=LifecycleSettings(pace=datetime.timedelta(0)), admin_channel="#gpu-admins"))

    def notes(kind: str, name: str) -> dict[str, str]:
        if kind == "job":
            return dict(batch.read_namespaced_job(name, namespace).metadata.annotations or {})
        if kind == "deployment":
            return dict(apps.read_namespaced_deployment(name, namespace).metadata.annotations or {})
        return dict(core.read_namespaced_pod(name, namespace).metadata.annotations or {})

    janitor.run_cycle()  # never fitting: marked and its owner told at once
    huge = notes("pod", "huge")
    assert huge[a.POLICY] == "stuck" and "nvidia.com/gpu: asks 16, a node has 4" in huge[a.REASON]
    assert a.POLICY not in notes("job", "queued") and a.POLICY not in notes("deployment", "pull-stuck")
    texts = " ".join(str(r.params) for r in slack.requests("chat.postMessage"))
    assert "huge" in texts and "asks 16" in texts and "stuck Pending" in texts
    [admins] = slack.messages("C0ADMINS")  # and the admins see it in their report
    assert "Workloads that can never fit" in str(admins.blocks) and f"Pod/{namespace}/huge" in str(admins.blocks)

    time.sleep(9)
    second = janitor.run_cycle()  # the never-fitting pod's deadline (6 s after the warning) has passed
    assert {r.action.target.name: str(r.outcome) for r in second.results} == {"huge": "done"}
    queued, pulling = notes("job", "queued"), notes("deployment", "pull-stuck")
    assert "Insufficient cpu" in queued[a.REASON] and "ImagePullBackOff" in pulling[a.REASON]
    assert a.POLICY not in notes("pod", "gated")
    texts = " ".join(str(r.params) for r in slack.requests("chat.postMessage"))
    assert "Insufficient cpu" in texts and "ImagePullBackOff" in texts

    deadline = max(a.parse_expires(n[a.DEADLINE]) for n in (queued, pulling))
    time.sleep(max(0.0, deadline.timestamp() - time.time()) + 1.5)
    result = janitor.run_cycle()
    done = {r.action.target.name: str(r.outcome) for r in result.results}
    assert done == {"queued": "done", "pull-stuck": "done"}, done
    wait_until(lambda: {p.metadata.name for p in core.list_namespaced_pod(namespace).items} == {"filler", "gated"},
               timeout=60, what="the stuck workloads gone, the gated pod and the filler kept")


ONLY = "devenv.janitor.dev/only"  # a taint keeping other tests' pods off a test's own nodes


def policy_file(tmp_path: Path, namespace: str, after: str) -> Path:
    policy = tmp_path / "pending.yaml"
    policy.write_text(f"""policies:
- name: stuck
  mode: enforce
  match: {{namespaces: {{include: ["{namespace}"]}}}}
  triggers: {{pending: {{after: {after}}}}}
  lifecycle: {{warnBefore: 1h, remindEvery: 0s}}
""")
    return policy


def janitor_for(kube: client.ApiClient, sandbox: Any, namespace: str, policy: Path) -> Runner:
    return Runner(kube, build(
        namespaces=(namespace,), state_namespace=namespace, policy_paths=(str(policy),),
        prometheus_url=sandbox.prometheus_url, slack_token=sandbox.slack_token, slack_api_url=sandbox.slack_api_url,
        lifecycle=LifecycleSettings(pace=datetime.timedelta(0)), admin_channel="#gpu-admins"))


def explain(sandbox: Any, namespace: str, policy: Path, target: str) -> str:
    out = subprocess.run(
        [sys.executable, "-m", "janitor.cli", "explain", target, "--kubeconfig", str(sandbox.kubeconfig),
         "--namespaces", namespace, "--state-namespace", namespace, "--policies", str(policy),
         "--prometheus-url", sandbox.prometheus_url],
        capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout


def marked(core: client.CoreV1Api, namespace: str) -> dict[str, str]:
    """Pod name -> janitor/reason of the pods the janitor marked."""
    return {p.metadata.name: p.metadata.annotations[a.REASON] for p in core.list_namespaced_pod(namespace).items
            if a.POLICY in (p.metadata.annotations or {})}


@pytest.fixture
def own_nodes(core: client.CoreV1Api, namespace: str) -> Iterator[Callable[[str, dict[str, Any]], str]]:
    """Makes kwok nodes only this test's pods go to (tainted ONLY=<namespace>); deleted afterwards."""
    made: list[str] = []

    def make(role: str, changes: dict[str, Any]) -> str:
        name = f"{role}-{uuid.uuid4().hex[:6]}"
        manifest = node_manifest(NodeSpec(name, gpus=4))
        manifest["spec"] = {"taints": [{"key": ONLY, "value": namespace, "effect": "NoSchedule"}],
                            **changes.get("spec", {})}
        manifest["status"] |= changes.get("status", {})
        core.create_node(manifest)
        made.append(name)
        return name

    yield make
    for name in made:
        core.delete_node(name)


def gpu_pod(name: str, node: str, namespace: str) -> client.V1Pod:
    return client.V1Pod(
        metadata=client.V1ObjectMeta(name=name, annotations={"janitor/owner": ALICE[0]}),
        spec=client.V1PodSpec(node_selector={"kubernetes.io/hostname": node},
                              tolerations=[client.V1Toleration(key=ONLY, value=namespace, effect="NoSchedule")],
                              containers=[container(gpus=4)]))


def test_a_pod_kept_off_a_cordoned_node_or_a_silent_device_plugin_waits(
        kube, core: client.CoreV1Api, namespace: str, sandbox, tmp_path: Path, slack: SlackStandInControl,
        own_nodes: Callable[[str, dict[str, Any]], str]) -> None:
    cordoned = own_nodes("cordoned", {"spec": {"unschedulable": True}})
    # Its device plugin restarted: the kubelet reports 0 allocatable GPUs of the 4 it has.
    silent = own_nodes("silent", {"status": {"allocatable": {"cpu": "64", "memory": "512Gi", "pods": "110",
                                                             "nvidia.com/gpu": "0"}}})

    def cordon_tainted() -> bool:  # the node lifecycle controller taints a cordoned node
        return any(t.key == "node.kubernetes.io/unschedulable" for t in core.read_node(cordoned).spec.taints or [])

    def settled(node: str) -> bool:  # Ready, and the controller's not-ready taint of a new node gone
        read = core.read_node(node)
        ready = any(c.type == "Ready" and c.status == "True" for c in read.status.conditions or [])
        return ready and not any(t.key == "node.kubernetes.io/not-ready" for t in read.spec.taints or [])

    wait_until(lambda: settled(cordoned) and settled(silent), timeout=60, what="both nodes Ready")
    wait_until(cordon_tainted, timeout=60, what="the cordoned node tainted unschedulable")
    wait_until(lambda: core.read_node(silent).status.allocatable.get("nvidia.com/gpu") == "0", timeout=30,
               what="the silent node reporting 0 GPUs")
    core.create_namespaced_pod(namespace, gpu_pod("on-cordoned", cordoned, namespace))
    core.create_namespaced_pod(namespace, gpu_pod("on-silent", silent, namespace))

    def unschedulable(name: str) -> bool:
        conditions = core.read_namespaced_pod(name, namespace).status.conditions or []
        return any(c.type == "PodScheduled" and c.reason == "Unschedulable" for c in conditions)

    wait_until(lambda: unschedulable("on-cordoned") and unschedulable("on-silent"), timeout=60,
               what="both pods unschedulable")
    policy = policy_file(tmp_path, namespace, "20s")
    janitor = janitor_for(kube, sandbox, namespace, policy)
    first = time.monotonic()
    janitor.run_cycle()
    assert marked(core, namespace) == {}  # waiting, not never fitting: nothing at once
    assert not any(f"Pod/{namespace}/" in str(m.blocks) for m in slack.messages("C0ADMINS"))  # not never fitting
    shown = explain(sandbox, namespace, policy, f"Pod/{namespace}/on-cordoned")
    assert f"waiting, not never fitting: {cordoned} could run it once the node is uncordoned" in shown, shown
    assert "acted on after 20s" in shown

    time.sleep(max(0.0, first + 21 - time.monotonic()))
    slack.add_user(*ALICE)
    janitor.run_cycle()
    reasons = marked(core, namespace)
    assert set(reasons) == {"on-cordoned", "on-silent"}
    assert f"waiting, not never fitting: {cordoned} could run it once the node is uncordoned" in reasons["on-cordoned"]
    assert (f"{silent} could run it once its device plugin reports all its nvidia.com/gpu again (allocatable 0 of 4)"
            in reasons["on-silent"])
    texts = " ".join(str(r.params) for r in slack.requests("chat.postMessage") if namespace in str(r.params))
    assert "once the node is uncordoned" in texts and "device plugin reports all its nvidia.com/gpu again" in texts
    assert "no node could ever run it" not in texts


def test_a_pod_whose_init_container_runs_is_starting_not_stuck(
        kube, core: client.CoreV1Api, namespace: str, sandbox, tmp_path: Path, slack: SlackStandInControl) -> None:
    slack.add_user(*ALICE)
    for name in ("fetching", "fetch-failing"):
        core.create_namespaced_pod(namespace, client.V1Pod(
            metadata=client.V1ObjectMeta(name=name, annotations={"janitor/owner": ALICE[0],
                                                                 WAITING: "PodInitializing"}),
            spec=client.V1PodSpec(init_containers=[client.V1Container(name="fetch", image="registry.example/fetch:1")],
                                  containers=[container()])))
    wait_until(lambda: all(core.read_namespaced_pod(n, namespace).status.container_statuses
                           for n in ("fetching", "fetch-failing")), timeout=60, what="both pods reported on")
    now = datetime.datetime.now(datetime.timezone.utc)
    stamp = now.strftime("%Y-%m-%dT%H:%M:%SZ")
    waiting = [{"name": "main", "image": "registry.example/train:1", "imageID": "", "ready": False, "started": False,
                "restartCount": 0, "state": {"waiting": {"reason": "PodInitializing"}}}]
    fetch = {"name": "fetch", "image": "registry.example/fetch:1", "imageID": "", "ready": False, "started": False}
    init = {  # as the kubelet reports a download in progress, and one that keeps failing
        "fetching": {**fetch, "restartCount": 0, "started": True, "state": {"running": {"startedAt": stamp}}},
        "fetch-failing": {**fetch, "restartCount": 3, "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                          "lastState": {"terminated": {"exitCode": 1, "reason": "Error", "startedAt": stamp,
                                                       "finishedAt": stamp}}},
    }
    for name, status in init.items():
        core.patch_namespaced_pod_status(name, namespace, {"status": {
            "initContainerStatuses": [status], "containerStatuses": waiting,
            "conditions": [{"type": "Initialized", "status": "False", "reason": "ContainersNotInitialized"}]}})
    policy = policy_file(tmp_path, namespace, "3s")
    time.sleep(4)
    janitor_for(kube, sandbox, namespace, policy).run_cycle()
    reasons = marked(core, namespace)
    assert set(reasons) == {"fetch-failing"}
    assert "fetch: CrashLoopBackOff" in reasons["fetch-failing"]
    shown = explain(sandbox, namespace, policy, f"Pod/{namespace}/fetching")
    assert "fetching: init container fetch running since" in shown and "starting, not stuck" in shown


def pool_pod(name: str, group: str, namespace: str) -> client.V1Pod:
    """A 4-GPU pod for a node group that has no node yet."""
    return client.V1Pod(
        metadata=client.V1ObjectMeta(name=name, annotations={"janitor/owner": ALICE[0]}),
        spec=client.V1PodSpec(node_selector={POOL_LABEL: group},
                              tolerations=[client.V1Toleration(key=ONLY, value=namespace, effect="NoSchedule")],
                              containers=[container(gpus=4)]))


def test_a_gpu_pod_waiting_for_a_node_group_at_zero_is_not_never_fitting(
        kube, core: client.CoreV1Api, namespace: str, sandbox, tmp_path: Path, slack: SlackStandInControl) -> None:
    slack.add_user(*ALICE)
    only = [{"key": ONLY, "value": namespace, "effect": "NoSchedule"}]
    coming, refused = f"gpu-pool-{uuid.uuid4().hex[:5]}", f"gpu-none-{uuid.uuid4().hex[:5]}"
    with ScaleFromZero(core, namespace, coming, delay=40, taints=only) as scaler, \
            ScaleFromZero(core, namespace, refused, mode=Mode.NEVER, status_configmap=False) as refuser:
        core.create_namespaced_pod(namespace, pool_pod("waits", coming, namespace))
        core.create_namespaced_pod(namespace, pool_pod("never", refused, namespace))
        wait_until(lambda: scaler.events and refuser.events, timeout=60,
                   what="cluster-autoscaler's stand-in speaking about both pods")
        policy = policy_file(tmp_path, namespace, "1h")
        janitor_for(kube, sandbox, namespace, policy).run_cycle()
        reasons = marked(core, namespace)
        assert "waits" not in reasons, reasons["waits"]  # a node is coming: not never fitting
        assert set(reasons) == {"never"}
        assert "no node could ever run it" in reasons["never"]
        assert ("cluster-autoscaler can add no node that could (1 node(s) didn't match Pod's node "
                "affinity/selector") in reasons["never"]
        [admins] = [m for m in slack.messages("C0ADMINS") if namespace in str(m.blocks)]
        assert f"Pod/{namespace}/never" in str(admins.blocks) and f"Pod/{namespace}/waits" not in str(admins.blocks)
        shown = explain(sandbox, namespace, policy, f"Pod/{namespace}/waits")
        assert "waiting for a node, not never fitting" in shown, shown
        assert f"cluster-autoscaler triggered a scale-up of {coming} 0->1 (max: 4)" in shown
        # What the autoscaler said about the pod, not merely that one runs:
        assert "cluster-autoscaler's status ConfigMap kube-system/cluster-autoscaler-status" not in shown

        # The watch cache reads the same: the autoscaler's words per pod and its status ConfigMap.
        cache = ClusterCache(kube, build(namespaces=(namespace,), state_namespace=namespace))
        try:
            seen = observation.read_cached(cache, cache.settings, [Policy("stuck", (Pending(),))], None,
                                           datetime.datetime.now(datetime.timezone.utc), first_sync=60)
            # ... and says as much, live, to a re-check reading one namespace's Events.
            now = cache.autoscaling_now(NodeAutoscaling.AUTO)
            assert now is not None and set(now.signs) == set(seen.autoscaling.signs), now
            assert "autoscaler Events on pods" in now.signs
        finally:
            cache.stop()
        said = {p.ref.name: {n.said for n in seen.autoscaler.get(p.ref.uid, ())} for p in seen.pods}
        assert said == {"waits": {Said.COMING}, "never": {Said.NEVER}}, said
        assert "cluster-autoscaler's status ConfigMap kube-system/cluster-autoscaler-status" in seen.autoscaling.signs

        wait_until(lambda: core.read_namespaced_pod("waits", namespace).status.phase == "Running", timeout=120,
                   what="the node added and the waiting pod running on it")
        assert core.read_namespaced_pod("waits", namespace).spec.node_name in scaler.nodes
        janitor_for(kube, sandbox, namespace, policy).run_cycle()
        assert set(marked(core, namespace)) == {"never"}
