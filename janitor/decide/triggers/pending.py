"""The pending trigger: workloads whose pods never start, and pods that could never fit.

Time is time *in the state*, from the PodScheduled condition's transition time, not the pod's
age: a pod that waited an hour for a node and has been pulling its image for five minutes is
five minutes into "starting". A pod makes progress while its init containers do: one running is
starting, not stuck, and one completing starts the count again. Pods gated on purpose
(`spec.schedulingGates`, as Kueue does) are not stuck unless the policy says so; suspended Jobs
have no pods at all. A workload triggers only when none of its pods runs: a Deployment with 3 of 4
replicas running is reported (not stuck), never acted on.

A pod that no node could ever run (more GPUs than any node has, a label no node carries, a taint
nobody tolerates) triggers at once, with the reason, instead of after a day. "Ever" means with
every node at its best: schedulable, Ready, and reporting its full capacity. A cordoned node, a
NotReady one, a taint the node lifecycle controller puts on for a condition, or a device plugin
reporting 0 GPUs for a while (allocatable below capacity, or below the GPU count its labels carry)
make a pod *wait*, judged after `after` like any unschedulable pod, and the owner reads which.

"Ever" also means with every node that can be added: where a node autoscaler runs, a pod that fits
no existing node (a GPU pool scaled to zero) waits for one, unless the autoscalers proved that no
node they could add would run it (janitor.decide.autoscaling).
"""

from __future__ import annotations

import datetime
from collections import Counter
from collections.abc import Mapping, Sequence

from janitor.decide import autoscaling
from janitor.decide.model import (
    ContainerKind,
    Finding,
    NodeInfo,
    Observation,
    PodJudgement,
    PodState,
    PodView,
    State,
    TriggerKind,
)
from janitor.decide.reasons import Code, Fact, Reason, why
from janitor.decide.selection import Workload
from janitor.decide.triggers.spec import NodeScope, Reads, Recheck, Role, TriggerSpec, Usage, duration
from janitor.policy.model import Pending, Policy

# Resources whose shortage on *every* node means "never", not "not now".
_IGNORED = frozenset({"pods", "ephemeral-storage"})
_CORDONED = "node.kubernetes.io/unschedulable"
_NOT_READY = frozenset({"node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"})
# Taints Kubernetes itself puts on a node for a condition that passes (the node lifecycle controller,
# the kubelet at registration, the cloud provider until it has initialised the node, an admin's
# out-of-service while the node is down): a pod kept off by one waits, it does not "never fit".
_PASSING_TAINTS = _NOT_READY | {
    _CORDONED, "node.kubernetes.io/memory-pressure", "node.kubernetes.io/disk-pressure",
    "node.kubernetes.io/pid-pressure", "node.kubernetes.io/network-unavailable",
    "node.cloudprovider.kubernetes.io/uninitialized", "node.kubernetes.io/out-of-service",
}


def _progress(st: PodState) -> tuple[str, str, datetime.datetime] | None:
    """The latest step the pod's init phase made: (init container, what it did, when). An init
    container completing is one; a native sidecar's first start is one (its restarts are not)."""
    steps = [(c.name, "completed", c.since) for c in st.containers
             if c.kind is ContainerKind.INIT and c.state == "terminated" and c.exit_code == 0 and c.since]
    steps += [(c.name, "started", c.since) for c in st.containers
              if c.kind is ContainerKind.SIDECAR and c.state == "running" and c.restarts == 0 and c.since]
    return max(steps, key=lambda step: step[2]) if steps else None


def stuck_state(pod: PodView) -> tuple[str, datetime.datetime | None, Reason]:
    """(state, since, why) of a Pending pod: gated, unschedulable, progressing (an init container
    running for the first time), starting or unknown."""
    st = pod.state
    if st.gated or st.schedule_reason == "SchedulingGated":
        return "gated", st.scheduled_changed, why(Code.GATED)
    if st.scheduled is False:
        return "unschedulable", st.scheduled_changed, why(Code.UNSCHEDULABLE,
                                                          message=st.schedule_message or st.schedule_reason)
    if st.scheduled is True:
        running = next((c for c in st.containers
                        if c.kind is ContainerKind.INIT and c.state == "running" and c.restarts == 0), None)
        if running is not None:
            return "progressing", running.since, why(Code.INIT_RUNNING, container=running.name, since=running.since)
        reasons = "; ".join(f"{c}: {r}" + (f" ({m})" if m else "") for c, r, m in st.waiting)
        reason = why(Code.NOT_STARTED_YET, reasons=reasons or "containers not started")
        since, step = st.scheduled_changed, _progress(st)
        if step is not None and (since is None or step[2] > since):
            since, reason = step[2], why(Code.SINCE_INIT, state=reason, container=step[0], done=step[1], at=step[2])
        return "starting", since, reason
    return "unknown", None, why(Code.NOT_SCHEDULED)


def _device(resource: str) -> bool:
    """An extended resource a device plugin reports (nvidia.com/gpu, nvidia.com/mig-3g.40gb, ...)."""
    return "/" in resource and not resource.startswith("kubernetes.io/")


def _at_best(node: NodeInfo, resource: str) -> float:
    """How much of a resource the node has with all its devices reporting: a device plugin that
    restarts reports 0 allocatable for a while; its capacity, or the count GPU feature discovery
    put in the node's labels (nvidia.com/gpu.count), says what comes back."""
    has = node.allocatable.get(resource, 0.0)
    if not _device(resource):
        return has
    try:
        labelled = float(int(node.labels.get(f"{resource}.count", "")))
    except ValueError:
        labelled = 0.0
    return max(has, node.capacity.get(resource, 0.0), labelled)


def _misfit(pod: PodView, node: NodeInfo) -> Reason | None:
    """Why this node could not run the pod even at its best (schedulable, Ready, all devices
    reporting), or None if it could."""
    st = pod.state
    for resource, amount in sorted(st.requests.items()):
        if resource in _IGNORED or amount <= 0:
            continue
        has = _at_best(node, resource)
        if has < amount:
            return why(Code.MISFIT_RESOURCE, resource=resource, amount=amount, has=has)
    for key, value in sorted(st.node_selector.items()):
        if node.labels.get(key) != value:
            return why(Code.MISFIT_SELECTOR, key=key, value=value)
    if st.required_affinity and not any(_term(term, node.labels) for term in st.required_affinity):
        return why(Code.MISFIT_AFFINITY)
    for key, value, effect in node.taints:
        if key in _PASSING_TAINTS:
            continue
        if effect in ("NoSchedule", "NoExecute") and not _tolerated(key, value, effect, st.tolerations):
            return why(Code.MISFIT_TAINT, key=key, value=value, effect=effect)
    return None


def _blockers(pod: PodView, node: NodeInfo) -> tuple[Reason, ...]:
    """What keeps a node that could run the pod at its best from running it now (empty: nothing)."""
    st = pod.state
    found: list[Reason] = []
    untolerated = [key for key, value, effect in node.taints if key in _PASSING_TAINTS
                   and effect in ("NoSchedule", "NoExecute") and not _tolerated(key, value, effect, st.tolerations)]
    if (node.unschedulable and not _tolerated(_CORDONED, "", "NoSchedule", st.tolerations)) or \
            _CORDONED in untolerated:
        found.append(why(Code.ONCE_UNCORDONED))
    if any(key in _NOT_READY for key in untolerated):
        found.append(why(Code.ONCE_READY))
    found += [why(Code.ONCE_UNTAINTED, key=key) for key in dict.fromkeys(untolerated)
              if key != _CORDONED and key not in _NOT_READY]
    for resource, amount in sorted(st.requests.items()):
        has = node.allocatable.get(resource, 0.0)
        if _device(resource) and amount > 0 and has < amount:
            found.append(why(Code.ONCE_DEVICES, resource=resource, has=has, full=_at_best(node, resource)))
    return tuple(found)


def _later(pod: PodView, by_name: Sequence[NodeInfo]) -> tuple[NodeInfo, tuple[Reason, ...], int] | None:
    """The first node (of `by_name`, sorted by name) that could run the pod once what passes, what
    passes there, and how many more could; None when one could run it now or none ever could."""
    later = []
    for node in by_name:
        if _misfit(pod, node) is not None:
            continue
        blockers = _blockers(pod, node)
        if not blockers:
            return None
        later.append((node, blockers))
    if not later:
        return None
    (node, blockers), others = later[0], len(later) - 1
    return node, blockers, others


def _waits(later: tuple[NodeInfo, tuple[Reason, ...], int] | None, state: Reason) -> Reason | None:
    if later is None:
        return None
    node, blockers, others = later
    more = f" ({others} more node{'s' if others > 1 else ''} likewise)" if others else ""
    return why(Code.FITS_LATER, state=state, node=node.name, once=blockers, more=more)


def fits_later(pod: PodView, nodes: Sequence[NodeInfo], state: Reason) -> Reason | None:
    """When no node can run the pod now but one could at its best: `state`, and which node could
    once what passes. None when some node could run it now (the scheduler's own message says why
    it did not) or none ever could."""
    return _waits(_later(pod, sorted(nodes, key=lambda n: n.name)), state)


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


def never_fits(pod: PodView, nodes: Sequence[NodeInfo]) -> Reason | None:
    """Why no node could ever run this pod, even with every node at its best, or None if one could
    (or no nodes are known)."""
    if not nodes:
        return None
    # Counted by reason, then by its words: only the distinct reasons are rendered, not one per node.
    # A reason is counted by its code and facts (a tuple, hashed and compared in C, where the
    # reason's own hash and equality are Python calls: once per node), the first of each kept.
    misfits: Counter[tuple[Code, tuple[tuple[str, Fact], ...]]] = Counter()
    first: dict[tuple[Code, tuple[tuple[str, Fact], ...]], Reason] = {}
    for node in nodes:
        misfit = _misfit(pod, node)
        if misfit is None:
            return None
        key = (misfit.code, misfit.facts)
        misfits[key] += 1
        first.setdefault(key, misfit)
    reasons: Counter[str] = Counter()
    for key, count in misfits.items():
        reasons[str(first[key])] += count
    shown = ", ".join(f"{text} ({n} node{'s' if n > 1 else ''})" for text, n in reasons.most_common(3))
    # As data too, each distinct misfit with its node count, for words that read the numbers.
    return why(Code.NEVER_FITS, shown=shown, misfits=tuple((first[key], n) for key, n in misfits.most_common()))


Needs = tuple[tuple[tuple[str, float], ...], tuple[tuple[str, str], ...],
              tuple[tuple[tuple[str, str, tuple[str, ...]], ...], ...], tuple[tuple[str, str, str, str], ...]]


def needs(st: PodState) -> Needs:
    """All that `_misfit` and `_blockers` read of a pod: the pods of one template share it."""
    return (tuple(sorted(st.requests.items())), tuple(sorted(st.node_selector.items())), st.required_affinity,
            st.tolerations)


class Fits:
    """Where pods could run, against one cycle's nodes (sorted by name once): never-fits and
    fits-later verdicts per `needs`, so each kind of pod meets every node once a cycle rather
    than every pending pod meeting every node."""

    def __init__(self, nodes: Sequence[NodeInfo]) -> None:
        self.nodes = tuple(nodes)
        self.by_name = tuple(sorted(self.nodes, key=lambda n: n.name))
        self._never: dict[Needs, Reason | None] = {}
        self._later: dict[Needs, tuple[NodeInfo, tuple[Reason, ...], int] | None] = {}

    def never_fits(self, pod: PodView, key: Needs | None = None) -> Reason | None:
        """`never_fits` of the pod; `key`: its `needs`, when the caller has them already. A pod whose
        needs were built with a list somewhere (not hashable) is fitted uncached."""
        key = needs(pod.state) if key is None else key
        try:
            return self._never[key]
        except KeyError:
            found = self._never[key] = never_fits(pod, self.nodes)
            return found
        except TypeError:
            return never_fits(pod, self.nodes)

    def fits_later(self, pod: PodView, state: Reason, key: Needs | None = None) -> Reason | None:
        """`fits_later` of the pod, as `never_fits`."""
        key = needs(pod.state) if key is None else key
        try:
            later = self._later[key]
        except KeyError:
            later = self._later[key] = _later(pod, self.by_name)
        except TypeError:
            later = _later(pod, self.by_name)
        return _waits(later, state)


def pods(workload: Workload) -> tuple[PodView, ...]:
    """The pods `pending` judges: the workload's pending and running pods, if any is pending. (Asked
    of every workload, twice a cycle: most have none pending, and are answered with one loop.)"""
    for p in workload.pods:
        if p.phase == "Pending" and not p.deleting:
            return tuple([p for p in workload.pods if p.phase in ("Pending", "Running") and not p.deleting])
    return ()


def _judge_pod(pod: PodView, trigger: Pending, fits: Fits | None, observation: Observation,
               now: datetime.datetime) -> PodJudgement:
    state, since, reason = stuck_state(pod)
    if state == "gated" and not trigger.include_gated:
        # Queued on purpose: its queue (Kueue) may still add the tolerations and node selectors of
        # the flavour it admits it to, so whether it could ever fit is not known yet either.
        return PodJudgement(pod.ref, State.CLEAR, why(Code.POD, pod=pod.ref.name, why=reason))
    if state == "progressing":
        return PodJudgement(pod.ref, State.CLEAR, why(Code.POD, pod=pod.ref.name, why=reason))
    key = needs(pod.state) if fits is not None else None  # each pod's needs made once, for both questions
    misfit = fits.never_fits(pod, key) if fits is not None else None
    if misfit and pod.node is None:  # not bound: a node that can be added may still come for it
        never, said = autoscaling.judge(misfit, reason, observation.autoscaler.get(pod.ref.uid, ()),
                                        observation.autoscaling, now)
        misfit, reason = (said, reason) if never else (None, said)
    if misfit:
        return PodJudgement(pod.ref, State.FIRES, why(Code.POD, pod=pod.ref.name, why=misfit))
    if state == "unschedulable" and fits is not None:
        reason = fits.fits_later(pod, reason, key) or reason
    if since is None:
        return PodJudgement(pod.ref, State.UNKNOWN, why(Code.POD, pod=pod.ref.name, why=reason))
    if now - since < trigger.after:
        return PodJudgement(pod.ref, State.TOO_YOUNG, why(Code.POD, pod=pod.ref.name, why=why(
            Code.STUCK_TOO_SHORT, state=reason, stuck=now - since, after=trigger.after)))
    return PodJudgement(pod.ref, State.FIRES, why(Code.POD, pod=pod.ref.name, why=why(
        Code.STUCK_FOR, state=reason, stuck=now - since)))


def _judge(members: Sequence[PodView], trigger: Pending, fits: Fits | None, observation: Observation,
           now: datetime.datetime) -> tuple[State, Reason, tuple[PodJudgement, ...]]:
    waiting = [p for p in members if p.phase == "Pending"]
    judged = tuple(_judge_pod(p, trigger, fits, observation, now) for p in waiting)
    running = [p for p in members if p.phase == "Running"]
    if running:
        return State.CLEAR, why(Code.SOME_RUNNING, running=len(running), total=len(members),
                                first=judged[0].why), judged
    for state in (State.CLEAR, State.UNKNOWN, State.TOO_YOUNG):
        hit = [j for j in judged if j.state is state]
        if hit:
            return state, why(Code.SOME_PENDING, count=len(hit), waiting=len(waiting), first=hit[0].why), judged
    return State.FIRES, why(Code.NONE_RUNS, total=len(members), first=judged[0].why), judged


def findings(workloads: Sequence[Workload], observation: Observation, policy: Policy,
             now: datetime.datetime) -> list[Finding]:
    """One finding per known workload with a pending pod."""
    trigger = policy.trigger(Pending)
    assert trigger is not None
    fits = Fits(observation.nodes) if observation.nodes_known else None  # unread nodes: no verdict
    found = []
    for workload in workloads:
        members = pods(workload)
        if not members or not workload.known:
            continue
        state, reason, judged = _judge(members, trigger, fits, observation, now)
        found.append(Finding(TriggerKind.PENDING, policy.name, policy.mode, workload.ref, state, reason,
                             source=policy.source, pods=judged, gpus=sum(p.gpus for p in members),
                             owner=workload.owner, managed_by=workload.managed_by))
    return found


# Whether any node could hold the pod, and what node autoscalers say: a scale-up triggered since
# the cycle's read stops the action.
TRIGGER = TriggerSpec(TriggerKind.PENDING, Role.MARKS, Usage.VETOED, findings, policy=Pending, pods=pods,
                      reads=lambda _: Reads(nodes=True, autoscalers=True),
                      recheck=Recheck(pods=True, usage=True, nodes=NodeScope.ALL, autoscalers=True),
                      condition="stuck Pending",
                      facts=lambda t: {"after": duration(t.after)} if isinstance(t, Pending) else {},
                      describe=lambda t: f"pending: after {duration(t.after)} in that state"
                      f"{' (gated pods too)' if t.include_gated else ''}" if isinstance(t, Pending) else str(t))
