"""The pending trigger: workloads whose pods never start, and pods that could never fit.

Time is time *in the state*, from the PodScheduled condition's transition time, not the pod's
age: a pod that waited an hour for a node and has been pulling its image for five minutes is
five minutes into "starting". Pods gated on purpose (`spec.schedulingGates`, as Kueue does) are
not stuck unless the policy says so; suspended Jobs have no pods at all. A workload triggers only
when none of its pods runs: a Deployment with 3 of 4 replicas running is reported (busy), never
acted on. A pod that no node could ever run (more GPUs than any node has, a label no node
carries, a taint nobody tolerates) triggers at once, with the reason, instead of after a day.

Findings share the idle findings' shape (`IdleFinding`, trigger "pending"), so the same
lifecycle marks, warns and acts on them: IDLE reads "stuck", BUSY "not stuck".
"""

from __future__ import annotations

import datetime
from collections import Counter
from collections.abc import Mapping, Sequence

from janitor.decide.evidence import PodKey
from janitor.decide.idle import Idleness, Judgement
from janitor.decide.model import NamespaceView, NodeInfo, ObjectView, PodView
from janitor.decide.owners import DEFAULT_OWNER_KEYS, find_owner
from janitor.decide.shadow import IdleFinding
from janitor.decide.workloads import CronJobMode, deciding_policy, group_by_workload, workload_view
from janitor.policy.model import Pending, Policy

# Resources whose shortage on *every* node means "never", not "not now".
_IGNORED = frozenset({"pods", "ephemeral-storage"})


def stuck_state(pod: PodView) -> tuple[str, datetime.datetime | None, str]:
    """(state, since, why) of a Pending pod: gated, unschedulable, starting or unknown."""
    st = pod.state
    if st.gated or st.schedule_reason == "SchedulingGated":
        return "gated", st.scheduled_changed, "scheduling gated: queued on purpose"
    if st.scheduled is False:
        return "unschedulable", st.scheduled_changed, f"unschedulable: {st.schedule_message or st.schedule_reason}"
    if st.scheduled is True:
        reasons = "; ".join(f"{c}: {r}" + (f" ({m})" if m else "") for c, r, m in st.waiting)
        return "starting", st.scheduled_changed, f"scheduled but not started: {reasons or 'containers not started'}"
    return "unknown", None, "not scheduled yet (no PodScheduled condition)"


def _misfit(pod: PodView, node: NodeInfo) -> str | None:
    st = pod.state
    for resource, amount in sorted(st.requests.items()):
        if resource in _IGNORED or amount <= 0:
            continue
        has = node.allocatable.get(resource, 0.0)
        if has < amount:
            return f"{resource}: asks {amount:g}, a node has {has:g}"
    for key, value in sorted(st.node_selector.items()):
        if node.labels.get(key) != value:
            return f"nodeSelector {key}={value} matches no node"
    if st.required_affinity and not any(_term(term, node.labels) for term in st.required_affinity):
        return "required node affinity matches no node"
    for key, value, effect in node.taints:
        if effect in ("NoSchedule", "NoExecute") and not _tolerated(key, value, effect, st.tolerations):
            return f"taint {key}={value}:{effect} not tolerated"
    return None


def _term(term: Sequence[tuple[str, str, tuple[str, ...]]], labels: Mapping[str, str]) -> bool:
    for key, op, values in term:
        present = key in labels
        if op == "In" and not (present and labels[key] in values):
            return False
        if op == "NotIn" and present and labels[key] in values:
            return False
        if op == "Exists" and not present:
            return False
        if op == "DoesNotExist" and present:
            return False
        if op in ("Gt", "Lt"):
            try:
                number, limit = int(labels.get(key, "")), int(values[0])
            except (ValueError, IndexError):
                return False
            if (op == "Gt" and not number > limit) or (op == "Lt" and not number < limit):
                return False
    return True


def _tolerated(key: str, value: str, effect: str, tolerations: Sequence[tuple[str, str, str, str]]) -> bool:
    for t_key, t_op, t_value, t_effect in tolerations:
        if t_effect and t_effect != effect:
            continue
        if t_op == "Exists" and (not t_key or t_key == key):
            return True
        if t_key == key and t_value == value:
            return True
    return False


def never_fits(pod: PodView, nodes: Sequence[NodeInfo]) -> str | None:
    """Why no node could ever run this pod, or None if one could (or no nodes are known)."""
    if not nodes:
        return None
    reasons: Counter[str] = Counter()
    for node in nodes:
        why = _misfit(pod, node)
        if why is None:
            return None
        reasons[why] += 1
    shown = ", ".join(f"{why} ({n} node{'s' if n > 1 else ''})" for why, n in reasons.most_common(3))
    return f"no node could ever run it: {shown}"


def pending_findings(
    pods: Sequence[PodView],
    namespaces: Mapping[str, NamespaceView],
    objects_by_uid: Mapping[str, ObjectView],
    policies: Sequence[Policy],
    nodes: Sequence[NodeInfo],
    now: datetime.datetime,
    *,
    cronjob_mode: CronJobMode = CronJobMode.JOB,
    protected_namespaces: Sequence[str] = (),
    owner_keys: Sequence[tuple[str, str]] = DEFAULT_OWNER_KEYS,
) -> list[IdleFinding]:
    """One finding per workload with a Pending pod, under the first matching `pending` policy."""
    if not any(p.trigger(Pending) for p in policies):
        return []
    groups = group_by_workload(pods, objects_by_uid, lambda pod: pod.phase in ("Pending", "Running") and not
                               pod.deleting and (pod.ref.namespace or "") not in protected_namespaces,
                               cronjob_mode=cronjob_mode)
    found = []
    for workload, members in groups:
        waiting = [p for p in members if p.phase == "Pending"]
        if not waiting:
            continue
        namespace = workload.ref.namespace or ""
        ns_view = namespaces.get(namespace, NamespaceView(namespace))
        view = workload_view(workload, members, objects_by_uid)
        policy = deciding_policy(policies, Pending, workload, members, ns_view, view)
        if policy is None:
            continue
        trigger = policy.trigger(Pending)
        assert trigger is not None
        idleness, why, judged = _judge(members, waiting, trigger, nodes, now)
        found.append(IdleFinding(
            policy.name, policy.source, policy.mode, Pending.key, workload.ref, idleness, why, judged,
            sum(p.gpus for p in members), 0.0, workload.managed_by, find_owner(view, ns_view, owner_keys),
            condition="stuck Pending"))
    return found


def _judge(members: Sequence[PodView], waiting: Sequence[PodView], trigger: Pending, nodes: Sequence[NodeInfo],
           now: datetime.datetime) -> tuple[Idleness, str, tuple[Judgement, ...]]:
    judged: list[Judgement] = []
    verdicts: list[tuple[Idleness, str]] = []
    for pod in waiting:
        key = PodKey(pod.ref.namespace or "", pod.ref.name)
        misfit = never_fits(pod, nodes)
        state, since, why = stuck_state(pod)
        if misfit:
            verdict = (Idleness.IDLE, f"{pod.ref.name}: {misfit}")
        elif state == "gated" and not trigger.include_gated:
            verdict = (Idleness.BUSY, f"{pod.ref.name}: {why}")
        elif since is None:
            verdict = (Idleness.UNKNOWN, f"{pod.ref.name}: {why}")
        elif now - since < trigger.after:
            verdict = (Idleness.TOO_YOUNG, f"{pod.ref.name}: {why}, for {_ago(now - since)} (acted on after "
                                           f"{_ago(trigger.after)})")
        else:
            verdict = (Idleness.IDLE, f"{pod.ref.name}: {why}, for {_ago(now - since)}")
        verdicts.append(verdict)
        judged.append(Judgement(key, *verdict))
    running = [p for p in members if p.phase == "Running"]
    if running:
        return (Idleness.BUSY, f"{len(running)} of {len(members)} pods running; not acted on while any runs "
                               f"({verdicts[0][1]})", tuple(judged))
    for idleness in (Idleness.BUSY, Idleness.UNKNOWN, Idleness.TOO_YOUNG):
        hit = [w for v, w in verdicts if v is idleness]
        if hit:
            return idleness, f"{len(hit)} of {len(waiting)} pending pods: {hit[0]}", tuple(judged)
    return Idleness.IDLE, f"none of its {len(members)} pods runs: {verdicts[0][1]}", tuple(judged)


def _ago(delta: datetime.timedelta) -> str:
    seconds = int(delta.total_seconds())
    if seconds >= 86400:
        return f"{seconds // 86400}d{seconds % 86400 // 3600}h"
    if seconds >= 3600:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    return f"{seconds // 60}m{seconds % 60:02d}s"
