"""The pending trigger: stuck workloads, judged by time in state, and pods that could never fit.

Aspects covered:
- unschedulable and stuck-starting pods trigger after `after` in that state (transition times,
  not age), quoting the scheduler's message or the waiting reason;
- a workload with any pod running is reported busy, never stuck; gated pods are left alone
  unless the policy includes them;
- a pod no node could ever run triggers at once with the reason: resources, nodeSelector,
  required affinity, untolerated taints; one that fits some node does not.
"""

from __future__ import annotations

import datetime
import uuid

from factories import NOW, obj

from janitor.decide.idle import Idleness
from janitor.decide.model import NodeInfo, ObjectRef, OwnerRef, PodState, PodView
from janitor.decide.pending import never_fits, pending_findings
from janitor.policy.model import Match, Namespaces, Pending, Policy

M = datetime.timedelta(minutes=1)
NODES = [NodeInfo("gpu-node-1", {"kubernetes.io/hostname": "gpu-node-1", "gpu": "a100"},
                  allocatable={"cpu": 64, "memory": 2**38, "nvidia.com/gpu": 4}),
         NodeInfo("cpu-node-1", {"kubernetes.io/hostname": "cpu-node-1"}, taints=(("dedicated", "cpu", "NoSchedule"),),
                  allocatable={"cpu": 32, "memory": 2**37})]
POLICY = Policy("stuck", (Pending(after=30 * M),), match=Match(namespaces=Namespaces(("*",))))


def pod(name: str, owner=None, phase: str = "Pending", **state) -> PodView:
    return PodView(ObjectRef("Pod", "v1", "team-a", name, str(uuid.uuid4())), "1", {},
                   OwnerRef(owner.ref.kind, owner.ref.api_version, owner.ref.name, owner.ref.uid) if owner else None,
                   None, phase, None, 0, state=PodState(**state))


def unschedulable(minutes: float, **extra) -> dict:
    return {"scheduled": False, "schedule_reason": "Unschedulable",
            "schedule_message": "0/2 nodes are available: 2 Insufficient cpu.",
            "scheduled_changed": NOW - minutes * M, "requests": {"cpu": 8}, **extra}


def findings(*pods: PodView, owners=(), policies=(POLICY,)):
    return pending_findings(pods, {}, {o.ref.uid: o for o in owners}, list(policies), NODES, NOW)


def test_unschedulable_job_triggers_after_time_in_state_with_the_schedulers_words() -> None:
    job = obj("train", kind="Job")
    [early] = findings(pod("train-a", job, **unschedulable(10)), owners=[job])
    assert early.idleness is Idleness.TOO_YOUNG and early.workload == job.ref
    [late] = findings(pod("train-a", job, **unschedulable(45)), owners=[job])
    assert late.idleness is Idleness.IDLE and "0/2 nodes are available: 2 Insufficient cpu." in late.why
    assert late.trigger == "pending" and late.condition == "stuck Pending"


def test_stuck_starting_quotes_the_waiting_reason() -> None:
    deployment = obj("web", kind="Deployment")
    replica = obj("web-5d4f", kind="ReplicaSet", owner=deployment)
    stuck = pod("web-5d4f-x", replica, scheduled=True, scheduled_changed=NOW - 2 * 60 * M,
                waiting=(("app", "ImagePullBackOff", 'Back-off pulling image "registry/x:typo"'),))
    [found] = findings(stuck, owners=[deployment, replica])
    assert found.idleness is Idleness.IDLE and found.workload == deployment.ref
    assert "ImagePullBackOff" in found.why and "registry/x:typo" in found.why


def test_one_running_pod_keeps_the_workload_and_gated_pods_are_left_alone() -> None:
    deployment = obj("web", kind="Deployment")
    running = pod("web-1", deployment, phase="Running")
    [busy] = findings(pod("web-2", deployment, **unschedulable(600)), running, owners=[deployment])
    assert busy.idleness is Idleness.BUSY and "1 of 2 pods running" in busy.why
    gated = pod("queued", scheduled=False, schedule_reason="SchedulingGated", gated=True,
                scheduled_changed=NOW - 600 * M)
    [left] = findings(gated)
    assert left.idleness is Idleness.BUSY and "queued on purpose" in left.why
    including = Policy("stuck", (Pending(after=30 * M, include_gated=True),), match=Match(namespaces=Namespaces(("*",))))
    [taken] = findings(gated, policies=[including])
    assert taken.idleness is Idleness.IDLE


def test_never_fits_triggers_at_once_with_the_reason() -> None:
    huge = pod("huge", **unschedulable(0, requests={"nvidia.com/gpu": 16}))
    [found] = findings(huge)
    assert found.idleness is Idleness.IDLE and "nvidia.com/gpu: asks 16, a node has 4" in found.why


def test_never_fits_reasons() -> None:
    def fits(**state) -> str | None:
        return never_fits(pod("p", **state), NODES)

    assert fits(requests={"cpu": 16}) is None  # the GPU node has room for it
    assert "asks 128" in fits(requests={"cpu": 128})
    assert "nodeSelector gpu=h100" in fits(node_selector={"gpu": "h100"})
    assert fits(node_selector={"gpu": "a100"}) is None
    assert "affinity" in fits(required_affinity=((("gpu", "In", ("h100",)),),))
    assert fits(required_affinity=((("gpu", "In", ("h100",)),), (("gpu", "Exists", ()),))) is None
    pinned = {"node_selector": {"kubernetes.io/hostname": "cpu-node-1"}}
    assert "taint dedicated=cpu:NoSchedule" in fits(**pinned)
    assert fits(**pinned, tolerations=(("dedicated", "Equal", "cpu", "NoSchedule"),)) is None
    assert fits(**pinned, tolerations=(("", "Exists", "", ""),)) is None
    assert never_fits(pod("p", requests={"cpu": 999}), []) is None  # no nodes known: no verdict
