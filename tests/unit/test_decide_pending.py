"""The pending trigger: stuck workloads, judged by time in state, and pods that could never fit.

Aspects covered:
- a pending pod's verdict by its state: unschedulable and stuck-starting pods fire after `after`
  in that state (transition times, not the pod's age), quoting the scheduler's message or the
  waiting reason; too short in the state is too young; no PodScheduled condition is unknown;
- a workload is judged as a whole: any pod running keeps it (reported, not stuck), gated pods
  are left alone unless the policy includes them (also when they fit no node yet: their
  constraints are final only once the gate is lifted), an unreadable owner chain is not judged;
- a pod no node could ever run fires at once with the reason (resources, nodeSelector, required
  affinity, untolerated taints); one that fits some node does not; unread nodes give no verdict;
- "ever" means every node at its best: a pod kept off only by a cordon, a NotReady node, a
  condition taint, or a device plugin reporting fewer GPUs than the node's capacity or its GPU
  count label, waits: judged after `after`, and the why says which node could run it once what;
- a pod whose init container runs (for the first time) is starting, not stuck; an init container
  completing, or a native sidecar's first start, restarts the count; a retrying init container
  or a restarting sidecar is no progress;
- through a cycle's plan: an enforcing policy marks a stuck workload and names it stuck Pending;
  the admins' report lists never-fitting workloads by the reason's code, not by its words.
"""

from __future__ import annotations

import datetime
import uuid
from collections.abc import Sequence
from typing import Any

import pytest
from factories import NOW, ago, obj

from janitor.decide import selection
from janitor.decide.lifecycle import Step
from janitor.decide.model import (
    ContainerKind,
    ContainerStatus,
    Finding,
    NamespaceView,
    NodeInfo,
    ObjectRef,
    ObjectView,
    Observation,
    OwnerRef,
    PodState,
    PodView,
    SafetyLedger,
    State,
    TriggerKind,
)
from janitor.decide.plan import plan
from janitor.decide.rails import Rails
from janitor.decide.reasons import Code
from janitor.decide.triggers import pending, registry
from janitor.decide.triggers.pending import never_fits
from janitor.policy.model import Match, Mode, Namespaces, Pending, Policy

M = datetime.timedelta(minutes=1)
NODES = (NodeInfo("gpu-node-1", {"kubernetes.io/hostname": "gpu-node-1", "gpu": "a100"},
                  allocatable={"cpu": 64, "memory": 2**38, "nvidia.com/gpu": 4, "ephemeral-storage": 2**40}),
         NodeInfo("cpu-node-1", {"kubernetes.io/hostname": "cpu-node-1"}, taints=(("dedicated", "cpu", "NoSchedule"),),
                  allocatable={"cpu": 32, "memory": 2**37}))
POLICY = Policy("stuck", (Pending(after=30 * M),), match=Match(namespaces=Namespaces(("*",))))
INCLUDING_GATED = Policy("stuck", (Pending(after=30 * M, include_gated=True),),
                         match=Match(namespaces=Namespaces(("*",))))
SCHEDULER = "0/2 nodes are available: 2 Insufficient cpu."


def pod(name: str, owner: ObjectView | None = None, phase: str = "Pending", **state: Any) -> PodView:
    return PodView(ObjectRef("Pod", "v1", "team-a", name, str(uuid.uuid4())), "1", {},
                   OwnerRef(owner.ref.kind, owner.ref.api_version, owner.ref.name, owner.ref.uid) if owner else None,
                   None, phase, None, 0, state=PodState(**state), created=ago(hours=5))


def unschedulable(minutes: float, **extra: Any) -> dict[str, Any]:
    return {"scheduled": False, "schedule_reason": "Unschedulable", "schedule_message": SCHEDULER,
            "scheduled_changed": NOW - minutes * M, "requests": {"cpu": 8}, **extra}


def starting(minutes: float) -> dict[str, Any]:
    return {"scheduled": True, "scheduled_changed": NOW - minutes * M,
            "waiting": (("app", "ImagePullBackOff", 'Back-off pulling image "registry/x:typo"'),)}


def gated() -> dict[str, Any]:
    return {"scheduled": False, "schedule_reason": "SchedulingGated", "gated": True, "scheduled_changed": NOW - 600 * M}


def observe(pods: Sequence[PodView], objects: Sequence[ObjectView] = (), *, nodes: Sequence[NodeInfo] = NODES,
            nodes_known: bool = True, at: datetime.datetime = NOW) -> Observation:
    return Observation(at, objects=tuple(objects), pods=tuple(pods), namespaces={"team-a": NamespaceView("team-a")},
                       nodes=tuple(nodes), nodes_known=nodes_known)


def findings(*pods: PodView, owners: Sequence[ObjectView] = (), policy: Policy = POLICY,
             nodes: Sequence[NodeInfo] = NODES, nodes_known: bool = True) -> list[Finding]:
    observation = observe(pods, owners, nodes=nodes, nodes_known=nodes_known)
    return pending.findings(selection.workloads(observation, Rails()), observation, policy, NOW)


@pytest.mark.parametrize(("state", "verdict", "words"), [
    pytest.param(unschedulable(10), State.TOO_YOUNG,
                 f"unschedulable: {SCHEDULER}, for 10m00s (acted on after 30m00s)", id="unschedulable-10min"),
    pytest.param(unschedulable(45), State.FIRES, f"unschedulable: {SCHEDULER}, for 45m00s", id="unschedulable-45min"),
    pytest.param(starting(5), State.TOO_YOUNG, "ImagePullBackOff", id="starting-5min"),
    pytest.param(starting(120), State.FIRES,
                 'scheduled but not started: app: ImagePullBackOff (Back-off pulling image "registry/x:typo"), '
                 "for 2h00m", id="starting-2h"),
    pytest.param({"scheduled": None}, State.UNKNOWN, "not scheduled yet (no PodScheduled condition)",
                 id="no-condition"),
    pytest.param(gated(), State.CLEAR, "scheduling gated: queued on purpose", id="gated"),
    pytest.param(unschedulable(0, requests={"nvidia.com/gpu": 16}), State.FIRES,
                 "no node could ever run it: nvidia.com/gpu: asks 16, a node has 4", id="never-fits-at-once"),
])
def test_a_pending_jobs_verdict_by_time_in_state(state: dict[str, Any], verdict: State, words: str) -> None:
    job = obj("train", kind="Job")
    [found] = findings(pod("train-a", job, **state), owners=[job])
    assert found.state is verdict, found.why
    assert words in found.why
    assert found.trigger is TriggerKind.PENDING and found.subject == job.ref and found.workload == job.ref
    assert registry.condition(found) == "stuck Pending" and found.policy == "stuck"
    assert [j.pod.name for j in found.pods] == ["train-a"]


def test_time_counts_in_the_state_not_since_creation() -> None:
    # Created five hours ago, waited for a node, and pulling its image for five minutes only.
    job = obj("train", kind="Job", created=ago(hours=5))
    [found] = findings(pod("train-a", job, **starting(5)), owners=[job])
    assert found.state is State.TOO_YOUNG and "for 5m00s (acted on after 30m00s)" in found.why


def test_a_stuck_starting_replica_is_judged_as_its_deployment() -> None:
    deployment = obj("web", kind="Deployment")
    replica = obj("web-5d4f", kind="ReplicaSet", owner=deployment)
    [found] = findings(pod("web-5d4f-x", replica, **starting(120)), owners=[deployment, replica])
    assert found.state is State.FIRES and found.subject == deployment.ref
    assert "ImagePullBackOff" in found.why and "registry/x:typo" in found.why


def test_one_running_pod_keeps_the_workload() -> None:
    deployment = obj("web", kind="Deployment")
    [busy] = findings(pod("web-2", deployment, **unschedulable(600)), pod("web-1", deployment, phase="Running"),
                      owners=[deployment])
    assert busy.state is State.CLEAR and "1 of 2 pods running; not acted on while any runs" in busy.why
    assert findings(pod("web-1", deployment, phase="Running"), owners=[deployment]) == []  # nothing pending


def test_gated_pods_are_left_alone_unless_the_policy_includes_them() -> None:
    [left] = findings(pod("queued", **gated()))
    assert left.state is State.CLEAR and "queued on purpose" in left.why
    [taken] = findings(pod("queued", **gated()), policy=INCLUDING_GATED)
    assert taken.state is State.FIRES and "for 10h00m" in taken.why


def test_a_gated_pod_is_left_alone_even_when_it_fits_no_node_yet() -> None:
    # Kueue adds its flavor's tolerations and node labels to a pod when it lifts the gate: while
    # gated, the pod's scheduling constraints are not final, so "never fits" cannot be told yet.
    gpu_nodes = (NodeInfo("gpu-node-1", allocatable={"cpu": 64, "nvidia.com/gpu": 4},
                          taints=(("nvidia.com/gpu", "present", "NoSchedule"),)),)
    queued = pod("queued", **gated(), requests={"nvidia.com/gpu": 1})
    assert never_fits(queued, gpu_nodes) is not None  # as it stands now, before admission
    [left] = findings(queued, nodes=gpu_nodes)
    assert left.state is State.CLEAR and "queued on purpose" in left.why
    enforcing = Policy("stuck", (Pending(after=30 * M),), mode=Mode.ENFORCE)
    cycle = plan(observe([queued], nodes=gpu_nodes), [enforcing], SafetyLedger(), NOW)
    assert cycle.changes == ()
    assert "Workloads that can never fit" not in dict(cycle.admin_report.sections)


def test_one_stuck_pod_beside_a_young_one_is_not_yet_stuck() -> None:
    job = obj("train", kind="Job")
    [found] = findings(pod("a", job, **unschedulable(600)), pod("b", job, **unschedulable(5)), owners=[job])
    assert found.state is State.TOO_YOUNG and "1 of 2 pending pods" in found.why


def test_a_pod_whose_owner_cannot_be_read_is_not_judged() -> None:
    job = obj("train", kind="Job")  # not among what was read
    assert findings(pod("train-a", job, **unschedulable(600)), owners=[]) == []


def test_without_the_nodes_read_a_pod_is_judged_by_time_only() -> None:
    huge = pod("huge", **unschedulable(0, requests={"nvidia.com/gpu": 16}))
    [found] = findings(huge, nodes=(), nodes_known=False)
    assert found.state is State.TOO_YOUNG and "no node could ever run it" not in found.why


@pytest.mark.parametrize(("state", "misfit"), [
    pytest.param({"requests": {"cpu": 16}}, None, id="fits-the-gpu-node"),
    pytest.param({"requests": {"cpu": 128}}, "cpu: asks 128, a node has 64", id="more-cpu-than-any-node"),
    pytest.param({"requests": {"ephemeral-storage": 2**50, "pods": 1000}}, None, id="storage-and-pod-count-ignored"),
    pytest.param({"node_selector": {"gpu": "h100"}}, "nodeSelector gpu=h100 matches no node", id="selector-no-node"),
    pytest.param({"node_selector": {"gpu": "a100"}}, None, id="selector-matches"),
    pytest.param({"required_affinity": ((("gpu", "In", ("h100",)),),)}, "required node affinity matches no node",
                 id="affinity-no-node"),
    pytest.param({"required_affinity": ((("gpu", "In", ("h100",)),), (("gpu", "Exists", ()),))}, None,
                 id="affinity-any-term-holds"),
    pytest.param({"node_selector": {"kubernetes.io/hostname": "cpu-node-1"}},
                 "taint dedicated=cpu:NoSchedule not tolerated", id="taint-not-tolerated"),
    pytest.param({"node_selector": {"kubernetes.io/hostname": "cpu-node-1"},
                  "tolerations": (("dedicated", "Equal", "cpu", "NoSchedule"),)}, None, id="taint-tolerated"),
    pytest.param({"node_selector": {"kubernetes.io/hostname": "cpu-node-1"},
                  "tolerations": (("", "Exists", "", ""),)}, None, id="tolerates-everything"),
])
def test_never_fits_reasons(state: dict[str, Any], misfit: str | None) -> None:
    reason = never_fits(pod("p", **state), NODES)
    if misfit is None:
        assert reason is None
    else:
        assert reason is not None and reason.code is Code.NEVER_FITS
        assert str(reason).startswith("no node could ever run it: ") and misfit in str(reason)


def test_never_fits_counts_the_nodes_per_reason_and_needs_nodes() -> None:
    reason = never_fits(pod("p", requests={"nvidia.com/gpu": 1}, node_selector={"gpu": "h100"}), NODES)
    assert str(reason) == ("no node could ever run it: nodeSelector gpu=h100 matches no node (1 node), "
                           "nvidia.com/gpu: asks 1, a node has 0 (1 node)")
    assert never_fits(pod("p", requests={"cpu": 999}), []) is None  # no nodes known: no verdict


# -- through a cycle's plan ---------------------------------------------------------------------------------


def test_an_enforcing_policy_marks_a_stuck_workload_and_a_shadow_one_does_not() -> None:
    job = obj("train", kind="Job")
    stuck = pod("train-a", job, **unschedulable(45))
    enforcing = Policy("stuck", (Pending(after=30 * M),), mode=Mode.ENFORCE)
    [change] = plan(observe([stuck], [job]), [enforcing], SafetyLedger(), NOW).changes
    assert change.step is Step.MARK and change.workload == job.ref and change.policy == "stuck"
    assert str(change.why).startswith("stuck Pending: marked, to delete at ")
    assert f"unschedulable: {SCHEDULER}" in str(change.annotations["janitor/reason"])

    shadow = plan(observe([stuck], [job]), [POLICY], SafetyLedger(), NOW)
    assert shadow.changes == () and shadow.actions == ()
    [found] = [f for f in shadow.findings if f.trigger is TriggerKind.PENDING]
    assert found.state is State.FIRES and found.mode is Mode.SHADOW


def test_the_admins_report_lists_never_fitting_workloads_by_reason_not_by_words() -> None:
    never = obj("huge", kind="Job")
    # The scheduler's own message happens to use the report's words; it is merely stuck.
    echo = obj("echo", kind="Job")
    stuck = obj("slow", kind="Job")
    pods = [pod("huge-a", never, **unschedulable(0, requests={"nvidia.com/gpu": 16})),
            pod("echo-a", echo, **unschedulable(600, schedule_message="no node could ever run it: quota")),
            pod("slow-a", stuck, **unschedulable(600))]
    cycle = plan(observe(pods, [never, echo, stuck]), [POLICY], SafetyLedger(), NOW)
    fired = {f.subject.name for f in cycle.findings if f.trigger is TriggerKind.PENDING and f.state is State.FIRES}
    assert fired == {"huge", "echo", "slow"}
    sections = dict(cycle.admin_report.sections)
    [line] = sections["Workloads that can never fit"]
    assert line.startswith(f"{never.ref} (") and "nvidia.com/gpu: asks 16, a node has 4" in line


def test_the_admins_report_key_follows_the_never_fitting_workloads() -> None:
    never = obj("huge", kind="Job")
    huge = pod("huge-a", never, **unschedulable(0, requests={"nvidia.com/gpu": 16}))
    first = plan(observe([huge], [never]), [POLICY], SafetyLedger(), NOW).admin_report
    later = plan(observe([huge], [never], at=NOW + 5 * M), [POLICY], SafetyLedger(), NOW + 5 * M).admin_report
    assert later.key == first.key and not first.empty
    fitting = pod("huge-a", never, **unschedulable(0, requests={"nvidia.com/gpu": 2}))
    assert plan(observe([fitting], [never]), [POLICY], SafetyLedger(), NOW).admin_report.empty


# -- waiting, not never fitting ------------------------------------------------------------------------------

H = 60 * M
PINNED = {"kubernetes.io/hostname": "gpu-node-9"}


def gpu_node(**changes: Any) -> NodeInfo:
    """gpu-node-9 with 4 GPUs, as a device plugin reports them when all is well."""
    base: dict[str, Any] = {"labels": dict(PINNED, **{"nvidia.com/gpu.count": "4"}),
                            "allocatable": {"cpu": 64, "nvidia.com/gpu": 4},
                            "capacity": {"cpu": 64, "nvidia.com/gpu": 4}}
    return NodeInfo("gpu-node-9", **(base | changes))


def wants_four(minutes: float) -> PodView:
    return pod("train-a", **unschedulable(minutes, requests={"nvidia.com/gpu": 4, "cpu": 8}, node_selector=PINNED))


@pytest.mark.parametrize(("node", "words"), [
    pytest.param(gpu_node(unschedulable=True, taints=(("node.kubernetes.io/unschedulable", "", "NoSchedule"),)),
                 "gpu-node-9 could run it once the node is uncordoned", id="cordoned"),
    pytest.param(gpu_node(unschedulable=True), "once the node is uncordoned", id="cordoned-before-the-taint"),
    pytest.param(gpu_node(taints=(("node.kubernetes.io/not-ready", "", "NoSchedule"),)),
                 "once the node is Ready again", id="not-ready"),
    pytest.param(gpu_node(taints=(("node.kubernetes.io/unreachable", "", "NoExecute"),)),
                 "once the node is Ready again", id="unreachable"),
    pytest.param(gpu_node(taints=(("node.kubernetes.io/memory-pressure", "", "NoSchedule"),)),
                 "once its node.kubernetes.io/memory-pressure taint is lifted", id="condition-taint"),
    pytest.param(gpu_node(allocatable={"cpu": 64, "nvidia.com/gpu": 0}),
                 "once its device plugin reports all its nvidia.com/gpu again (allocatable 0 of 4)",
                 id="device-plugin-reports-0"),
    pytest.param(gpu_node(allocatable={"cpu": 64}, capacity={"cpu": 64}),
                 "once its device plugin reports all its nvidia.com/gpu again (allocatable 0 of 4)",
                 id="gpus-gone-but-the-label-counts-4"),
    pytest.param(gpu_node(unschedulable=True, allocatable={"cpu": 64, "nvidia.com/gpu": 2}),
                 "once the node is uncordoned and its device plugin reports all its nvidia.com/gpu again "
                 "(allocatable 2 of 4)", id="cordoned-and-short"),
])
def test_a_pod_kept_off_a_node_for_a_while_waits_instead_of_never_fitting(node: NodeInfo, words: str) -> None:
    assert never_fits(wants_four(0), (node, *NODES)) is None
    [young] = findings(wants_four(10), nodes=(node, *NODES))
    assert young.state is State.TOO_YOUNG and words in young.why, young.why
    assert "waiting, not never fitting: gpu-node-9 could run it once" in young.why
    assert "(acted on after 30m00s)" in young.why
    [old] = findings(wants_four(45), nodes=(node, *NODES))
    assert old.state is State.FIRES and words in old.why


def test_never_fits_still_holds_with_every_node_at_its_best() -> None:
    node = gpu_node(unschedulable=True, allocatable={"cpu": 64, "nvidia.com/gpu": 0})
    eight = pod("train-a", **unschedulable(0, requests={"nvidia.com/gpu": 8}, node_selector=PINNED))
    [found] = findings(eight, nodes=(node,))
    assert found.state is State.FIRES and "no node could ever run it: nvidia.com/gpu: asks 8, a node has 4" in found.why
    # CPU and memory are what the node can give after its own reservations: capacity does not count.
    cpu = pod("train-b", **unschedulable(0, requests={"cpu": 64}, node_selector=PINNED))
    [found] = findings(cpu, nodes=(gpu_node(allocatable={"cpu": 63, "nvidia.com/gpu": 4}),))
    assert found.state is State.FIRES and "cpu: asks 64, a node has 63" in found.why
    # A taint an admin set (not one Kubernetes puts on for a condition) is for good.
    tainted = gpu_node(taints=(("dedicated", "team-b", "NoSchedule"),))
    [found] = findings(wants_four(0), nodes=(tainted,))
    assert found.state is State.FIRES and "taint dedicated=team-b:NoSchedule not tolerated" in found.why


def test_a_pod_tolerating_the_cordon_is_not_waiting_for_it() -> None:
    node = gpu_node(unschedulable=True, taints=(("node.kubernetes.io/unschedulable", "", "NoSchedule"),))
    tolerant = pod("train-a", **unschedulable(10, requests={"nvidia.com/gpu": 4}, node_selector=PINNED,
                                              tolerations=(("node.kubernetes.io/unschedulable", "Exists", "",
                                                            "NoSchedule"),)))
    [found] = findings(tolerant, nodes=(node,))
    assert found.state is State.TOO_YOUNG and "uncordoned" not in found.why


def test_when_some_node_fits_now_the_schedulers_words_stand_alone() -> None:
    cordoned = gpu_node(unschedulable=True)
    free = NodeInfo("gpu-node-8", PINNED, allocatable={"nvidia.com/gpu": 4, "cpu": 64})
    [found] = findings(wants_four(10), nodes=(cordoned, free))
    assert found.state is State.TOO_YOUNG and "could run it once" not in found.why


def test_several_waiting_nodes_are_counted() -> None:
    nodes = (gpu_node(unschedulable=True), NodeInfo("gpu-node-a", PINNED, unschedulable=True,
                                                    allocatable={"nvidia.com/gpu": 4, "cpu": 64}))
    [found] = findings(wants_four(10), nodes=nodes)
    assert "gpu-node-9 could run it once the node is uncordoned (1 more node likewise)" in found.why


# -- init containers -----------------------------------------------------------------------------------------


def init(name: str, state: str, minutes_ago: float, restarts: int = 0,
         kind: ContainerKind = ContainerKind.INIT) -> ContainerStatus:
    return ContainerStatus(name, kind, restarts, state, "Completed" if state == "terminated" else "",
                           NOW - minutes_ago * M, 0 if state == "terminated" else None)


def initialising(*containers: ContainerStatus) -> dict[str, Any]:
    return {"scheduled": True, "scheduled_changed": NOW - 5 * H, "containers": containers,
            "waiting": (("main", "PodInitializing", ""),)}


def test_a_pod_whose_init_container_runs_is_starting_not_stuck() -> None:
    job = obj("train", kind="Job")
    [found] = findings(pod("train-a", job, **initialising(init("fetch", "running", 200))), owners=[job])
    assert found.state is State.CLEAR
    assert "train-a: init container fetch running since 2026-11-23 08:40Z: starting, not stuck" in found.why


def test_an_init_container_completing_restarts_the_count() -> None:
    job = obj("train", kind="Job")
    state = initialising(init("fetch", "terminated", 10), init("unpack", "terminated", 5))
    [found] = findings(pod("train-a", job, **state), owners=[job])
    assert found.state is State.TOO_YOUNG
    assert ("scheduled but not started: main: PodInitializing (counted from init container unpack completed at "
            "2026-11-23 11:55Z), for 5m00s (acted on after 30m00s)") in found.why
    stale = initialising(init("fetch", "terminated", 45))
    [found] = findings(pod("train-a", job, **stale), owners=[job])
    assert found.state is State.FIRES and "for 45m00s" in found.why


@pytest.mark.parametrize(("containers", "words"), [
    pytest.param((init("fetch", "running", 2, restarts=3),), "for 5h00m", id="init-container-retrying"),
    pytest.param((init("proxy", "running", 2, restarts=4, kind=ContainerKind.SIDECAR),), "for 5h00m",
                 id="sidecar-restarting"),
    pytest.param((init("proxy", "running", 2, kind=ContainerKind.SIDECAR),),
                 "counted from init container proxy started at 2026-11-23 11:58Z", id="sidecar-first-start"),
])
def test_what_counts_as_progress(containers: tuple[ContainerStatus, ...], words: str) -> None:
    job = obj("train", kind="Job")
    [found] = findings(pod("train-a", job, **initialising(*containers)), owners=[job])
    assert words in found.why, found.why
    assert found.state is (State.TOO_YOUNG if "started at" in words else State.FIRES)
