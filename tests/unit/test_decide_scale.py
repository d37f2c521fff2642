"""Deciding at scale: the per-cycle indexes give the same plan as the plain scans they replace.

A plan is built once per cycle over every object the janitor read, so deciding works on indexes
made once per cycle instead of scanning per pod: each controller's owner chain walked once for all
its pods (selection.workloads), each policy's namespace and kind match decided once per namespace
and kind (decide.governance.Governance), the namespace half of the rails' gate read once per namespace
(selection.Gate), each kind of pending pod fitted against the nodes once (pending.Fits), and the
idle triggers' per-policy constants worked out once (idle.GpuJudge, idle.CpuJudge). These tests
hold them to the plain scans, not to a clock (bench/plan_scale.py measures the time).

Aspects covered:
- on generated clusters (generated.py), every index agrees with the scan it replaces, written here
  as the plain rule: chains resolved pod by pod, the first policy whose match holds for every pod,
  the gate object by object, never-fits and fits-later pod by pod against every node, and a fresh
  idle judge per pod;
- the verdicts of a plan (trigger, policy, subject, state) and the keys of what comes due do not
  depend on the order in which objects, pods, nodes and namespaces were read; other parts of a
  plan do on purpose (the first pod of a workload names its chain, the first case of an owner in
  a cycle gets the message pace);
- what a cache must not conflate: pods whose controllers share a uid but not a kind, namespaces
  of one name with different labels, pods that differ in one scheduling need only.
"""

from __future__ import annotations

import datetime
import random
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import TypeVar

from factories import NOW
from generated import Case, cases
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from janitor.decide import selection
from janitor.decide.governance import Governance
from janitor.decide.model import (
    ActionType,
    NamespaceView,
    NodeInfo,
    ObjectRef,
    ObjectView,
    Observation,
    OwnerRef,
    PodState,
    PodView,
    SafetyLedger,
)
from janitor.decide.owners import DEFAULT_OWNER_KEYS, find_owner
from janitor.decide.plan import decide, plan
from janitor.decide.rails import Rails
from janitor.decide.reasons import Code, Reason, why
from janitor.decide.selection import CronJobMode, Workload
from janitor.decide.triggers import idle, pending, registry
from janitor.policy.model import IdleCpu, IdleGpu, LabelSelector, Match, Operator, Policy, Requirement, Trigger

PROPERTY = settings(max_examples=60, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                           HealthCheck.filter_too_much])
OFFSETS = (datetime.timedelta(0), datetime.timedelta(hours=7), datetime.timedelta(days=9))
T = TypeVar("T")


# -- the plain scans, as the rules read -----------------------------------------------------------------


def plain_workloads(observation: Observation, rails: Rails, cronjob_mode: CronJobMode,
                    owner_keys: Sequence[tuple[str, str]] = DEFAULT_OWNER_KEYS) -> tuple[Workload, ...]:
    """Each pod's chain walked up on its own; pods grouped under its top (an unreadable chain is
    a workload of its own), the group's first pod naming the chain."""
    by_uid = {o.ref.uid: o for o in observation.objects}
    groups: dict[str, tuple[ObjectRef, ObjectView | None, tuple[ObjectRef, ...], str | None, Reason | None,
                            str, bool, list[PodView], ObjectView | None]] = {}
    for pod in observation.pods:
        if selection.is_protected(pod.ref.namespace, rails):
            continue
        current = selection.pod_as_object(pod)
        chain, views, candidate = [pod.ref], [current], True
        unknown: Reason | None = None
        parent = None
        while current.controller is not None:
            owner_ref = current.controller
            candidate = candidate and owner_ref.kind != "DaemonSet"
            owner = by_uid.get(owner_ref.uid)
            if owner is None:
                unknown = why(Code.OWNER_UNREADABLE, owner=f"{owner_ref.kind}/{owner_ref.name}", uid=owner_ref.uid)
                break
            if owner.deleting:
                unknown = why(Code.OWNER_DELETING, owner=str(owner.ref))
                break
            if owner_ref.kind == "CronJob" and current.ref.kind == "Job" and (
                    cronjob_mode is CronJobMode.JOB or owner.suspended):
                parent = owner
                break
            chain.append(owner.ref)
            views.append(owner)
            current = owner
        kind = pod.controller.kind if pod.controller else "Pod"
        if unknown is not None:
            group = (pod.ref, None, (pod.ref,), None, unknown, kind, candidate, [], None)
        elif len(chain) == 1 and pod.deleting:
            group = (pod.ref, None, (pod.ref,), None, why(Code.POD_DELETING), "Pod", True, [], None)
        else:
            marker = next((m for m in (selection.managed_by(v) for v in [*views[1:], *([parent] if parent else [])])
                           if m), None)
            marker = selection.managed_by(pod) or marker
            group = (current.ref, current, tuple(chain), marker, None, current.ref.kind, candidate, [], parent)
        key = group[0].uid if group[4] is None else f"unknown:{pod.ref.uid}"
        groups.setdefault(key, group)[7].append(pod)
    found = []
    for ref, view, chain, marker, unknown, kind, candidate, pods, parent in groups.values():
        namespace = observation.namespace(ref.namespace)
        notes = view.annotations if view is not None else pods[0].annotations
        out = selection.opted_out(notes, None) or (
            selection.opted_out(parent.annotations, None, where=str(parent.ref)) if parent else None) or \
            selection.opted_out({}, namespace)
        found.append(Workload(ref, view, tuple(pods), namespace, kind, chain, marker, unknown, out,
                              find_owner(view, namespace, owner_keys, parent=parent), candidate, parent))
    return tuple(found)


def plain_governing(policies: Sequence[Policy], kind: type[Trigger], workload: Workload,
                    pods: Sequence[PodView]) -> Policy | None:
    """The first policy defining the trigger whose whole match holds for every pod."""
    namespace = workload.namespace
    policy = next((p for p in policies if p.trigger(kind) is not None and all(
        p.match.matches(namespace=namespace.name, namespace_labels=namespace.labels, kind=workload.kind,
                        pod_labels=pod.labels) for pod in pods)), None)
    if policy is None or (policy.lifecycle.honour_opt_out and workload.opted_out is not None):
        return None
    return policy


def observed(case: Case, offset: datetime.timedelta) -> tuple[Observation, datetime.datetime]:
    now = NOW + offset
    return case.cluster.observe(case.policies, now), now


# -- each index against its scan ------------------------------------------------------------------------


@PROPERTY
@given(case=cases(), offset=st.sampled_from(OFFSETS))
def test_chains_resolved_once_per_controller_group_as_pod_by_pod(case: Case, offset: datetime.timedelta) -> None:
    observation, _ = observed(case, offset)
    for mode in CronJobMode:
        assert selection.workloads(observation, case.settings.rails, cronjob_mode=mode) == \
            plain_workloads(observation, case.settings.rails, mode)


@PROPERTY
@given(case=cases(), offset=st.sampled_from(OFFSETS))
def test_one_governance_per_cycle_chooses_as_matching_every_pod(case: Case, offset: datetime.timedelta) -> None:
    observation, _ = observed(case, offset)
    governance = Governance(case.policies)  # one for the whole cycle, as plan uses it
    for workload in selection.workloads(observation, case.settings.rails):
        for trigger in registry.POD_TRIGGERS:
            assert trigger.pods is not None and trigger.policy is not None
            for pods in (trigger.pods(workload), workload.pods, ()):
                assert governance.governing(trigger.policy, workload, pods) == \
                    plain_governing(case.policies, trigger.policy, workload, pods)


@PROPERTY
@given(case=cases(), offset=st.sampled_from(OFFSETS))
def test_one_gate_per_cycle_leaves_alone_what_a_gate_per_object_does(case: Case, offset: datetime.timedelta) -> None:
    observation, _ = observed(case, offset)
    for rails in (case.settings.rails, replace(case.settings.rails, honour_opt_out=False)):
        gate = selection.Gate(observation, rails)
        for obj in (*observation.objects, *map(selection.pod_as_object, observation.pods)):
            namespace = observation.namespaces.get(selection.namespace_of(obj) or "")
            cron = next((o for o in observation.objects if obj.controller is not None and obj.ref.kind == "Job"
                         and obj.controller.kind == "CronJob" and o.ref.uid == obj.controller.uid), None)
            out = selection.opted_out(obj.annotations, None) or (
                selection.opted_out(cron.annotations, None, where=str(cron.ref)) if cron is not None else None) or \
                selection.opted_out({}, namespace)
            unread = obj.ref.kind == "Job" and obj.controller is not None and obj.controller.kind == "CronJob" \
                and cron is None
            plain = (why(Code.DELETING) if obj.deleting else
                     why(Code.PROTECTED, namespace=selection.namespace_of(obj))
                     if selection.is_protected(selection.namespace_of(obj), rails) else
                     why(Code.OWNER_UNREADABLE, owner=f"CronJob/{obj.controller.name}", uid=obj.controller.uid)
                     if unread and obj.controller is not None else
                     out if out is not None and rails.honour_opt_out else None)
            assert gate(obj) == plain == selection.gate(obj, observation, rails)


@PROPERTY
@given(case=cases(), offset=st.sampled_from(OFFSETS), data=st.data())
def test_pods_fitted_once_per_kind_as_each_against_every_node(case: Case, offset: datetime.timedelta,
                                                              data: st.DataObject) -> None:
    observation, _ = observed(case, offset)
    nodes = data.draw(st.permutations(observation.nodes))
    fits = pending.Fits(nodes)
    for pod in observation.pods:
        state = why(Code.UNSCHEDULABLE, message=pod.ref.name)
        assert fits.never_fits(pod) == pending.never_fits(pod, nodes)
        assert fits.fits_later(pod, state) == pending.fits_later(pod, nodes, state)


@PROPERTY
@given(case=cases(), offset=st.sampled_from(OFFSETS))
def test_idle_judges_shared_by_a_policys_pods_judge_as_fresh_ones(case: Case, offset: datetime.timedelta) -> None:
    observation, now = observed(case, offset)
    for policy in case.policies:
        gpu, cpu = policy.trigger(IdleGpu), policy.trigger(IdleCpu)
        if gpu is not None:
            evidence = observation.evidence.gpu.get((str(gpu.signal), gpu.window))
            shared = idle.GpuJudge(evidence, gpu, now)
            for pod in observation.pods:
                assert shared(pod) == idle.GpuJudge(evidence, gpu, now)(pod)
        if cpu is not None:
            usage = observation.evidence.cpu.get((cpu.window, tuple(sorted(cpu.ignore_containers))))
            shared_cpu = idle.CpuJudge(usage, cpu, now)
            for pod in observation.pods:
                assert shared_cpu(pod) == idle.CpuJudge(usage, cpu, now)(pod)


# -- the order things were read in ------------------------------------------------------------------------


def mixed(items: Sequence[T], rng: random.Random) -> tuple[T, ...]:
    out = list(items)
    rng.shuffle(out)
    return tuple(out)


def shuffled(observation: Observation, rng: random.Random) -> Observation:
    names = mixed(list(observation.namespaces), rng)
    return replace(observation, objects=mixed(observation.objects, rng), pods=mixed(observation.pods, rng),
                   nodes=mixed(observation.nodes, rng), namespaces={n: observation.namespaces[n] for n in names})


def verdicts(observation: Observation, case: Case, now: datetime.datetime) -> tuple[Counter[object], ...]:
    result = plan(observation, case.policies, SafetyLedger(), now, settings=case.settings)
    due = decide(observation, case.policies, now, case.settings).due
    return (Counter((f.trigger, f.policy, f.subject.uid, f.state, f.known) for f in result.findings),
            Counter(a.key for a in due), Counter(a.key for a in result.actions if a.type is ActionType.REPORT))


@PROPERTY
@given(case=cases(), offset=st.sampled_from(OFFSETS), rng=st.randoms(use_true_random=False))
def test_verdicts_do_not_depend_on_the_order_things_were_read(case: Case, offset: datetime.timedelta,
                                                              rng: random.Random) -> None:
    observation, now = observed(case, offset)
    assert verdicts(shuffled(observation, rng), case, now) == verdicts(observation, case, now)


# -- what a cache must not conflate ---------------------------------------------------------------------


def _pod(name: str, controller: OwnerRef | None, *, ns: str = "team-a", labels: Mapping[str, str] | None = None,
         state: PodState = PodState(), phase: str = "Running") -> PodView:
    return PodView(ObjectRef("Pod", "v1", ns, name, f"uid-{name}"), "1", dict(labels or {}), controller, "n1", phase,
                   NOW, 1, state=state)


def test_controllers_sharing_a_uid_but_not_a_kind_are_walked_apart() -> None:
    rs = ObjectView(ObjectRef("ReplicaSet", "apps/v1", "team-a", "web-1", "shared"), "1", NOW)
    pods = (_pod("a", OwnerRef("ReplicaSet", "apps/v1", "web-1", "shared")),
            _pod("b", OwnerRef("DaemonSet", "apps/v1", "web-1", "shared")),  # joins a's workload, as a's
            _pod("c", OwnerRef("ReplicaSet", "apps/v1", "other", "gone")),
            _pod("d", OwnerRef("DaemonSet", "apps/v1", "other", "gone")))
    observation = Observation(NOW, (rs,), pods)
    found = selection.workloads(observation, Rails())
    assert found == plain_workloads(observation, Rails(), CronJobMode.JOB)
    assert [(w.pods, w.candidate, w.kind) for w in found] == [
        (pods[:2], True, "ReplicaSet"), (pods[2:3], True, "ReplicaSet"), (pods[3:], False, "DaemonSet")]
    assert "ReplicaSet/other" in str(found[1].unknown) and "DaemonSet/other" in str(found[2].unknown)


def test_namespaces_of_one_name_with_other_labels_are_matched_apart() -> None:
    policies = (Policy("gpu-tier", (IdleGpu(),), match=Match(namespace_selector=LabelSelector((("tier", "gpu"),)))),
                Policy("jupyter", (IdleGpu(),), match=Match(pod_selector=LabelSelector(
                    match_expressions=(Requirement("app", Operator.IN, ("jupyter",)),)))))
    governance = Governance(policies)
    pods = (_pod("p", None, labels={"app": "jupyter"}),)
    for labels, expected in (({"tier": "gpu"}, "gpu-tier"), ({"tier": "cpu"}, "jupyter"), ({}, "jupyter")):
        workload = Workload(pods[0].ref, None, pods, NamespaceView("team-a", labels), "Pod")
        chosen = governance.governing(IdleGpu, workload, pods)
        assert chosen is not None and chosen.name == expected
        assert chosen == plain_governing(policies, IdleGpu, workload, pods)


def test_pods_that_differ_in_any_scheduling_need_are_fitted_apart() -> None:
    nodes = (NodeInfo("n1", {"pool": "a"}, (("gpu", "true", "NoSchedule"),), {"nvidia.com/gpu": 8.0}),
             NodeInfo("n2", {"pool": "b"}, (), {"nvidia.com/gpu": 8.0}, unschedulable=True))
    tolerates = (("gpu", "Exists", "", "NoSchedule"),)
    needs = (PodState(), PodState(requests={"nvidia.com/gpu": 1.0}),
             PodState(requests={"nvidia.com/gpu": 1.0}, tolerations=tolerates),
             PodState(requests={"nvidia.com/gpu": 16.0}), PodState(node_selector={"pool": "a"}),
             PodState(node_selector={"pool": "a"}, tolerations=tolerates),
             PodState(required_affinity=((("pool", "In", ("b",)),),)),
             PodState(required_affinity=((("pool", "In", ("c",)),),)))
    fits = pending.Fits(nodes)
    verdicts = []
    for i, state in enumerate(needs * 2):  # each kind of pod twice: the second is answered from the first
        waiting = _pod(f"p{i}", None, phase="Pending", state=state)
        scheduler = why(Code.UNSCHEDULABLE, message=f"p{i}")
        assert fits.never_fits(waiting) == pending.never_fits(waiting, nodes)
        assert fits.fits_later(waiting, scheduler) == pending.fits_later(waiting, nodes, scheduler)
        verdicts.append((fits.never_fits(waiting) is None, fits.fits_later(waiting, scheduler) is None))
    assert verdicts[:len(needs)] == [(True, False), (True, False), (True, True), (False, True), (False, True),
                                     (True, True), (True, False), (False, True)]
    listed = _pod("listed", None, phase="Pending", state=PodState(tolerations=[list(tolerates[0])]))  # type: ignore[list-item]
    assert fits.never_fits(listed) == pending.never_fits(listed, nodes)  # not hashable: fitted uncached


def test_many_pods_of_one_controller_make_one_workload_in_pod_order() -> None:
    deploy = ObjectView(ObjectRef("Deployment", "apps/v1", "team-a", "web", "d"), "1", NOW)
    rs = ObjectView(ObjectRef("ReplicaSet", "apps/v1", "team-a", "web-1", "r"), "1", NOW,
                    controller=OwnerRef("Deployment", "apps/v1", "web", "d"))
    pods = tuple(_pod(f"web-1-{i}", OwnerRef("ReplicaSet", "apps/v1", "web-1", "r"),
                      labels={"app.kubernetes.io/managed-by": "Helm"} if i == 3 else None) for i in range(500))
    [workload] = selection.workloads(Observation(NOW, (deploy, rs), pods), Rails())
    assert workload.ref == deploy.ref and workload.pods == pods
    assert workload.chain == (pods[0].ref, rs.ref, deploy.ref) and workload.managed_by is None  # the first pod's
