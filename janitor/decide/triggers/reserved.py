"""The reservedQuota trigger: quota a Kueue Workload holds while none of its pods runs or waits.

A ClusterQueue counts the quota of every Workload whose QuotaReserved (or Admitted) condition is
True. Kueue's own faults can leave it so after the pods are gone: a Workload evicted for
PodsReadyTimeout kept Admitted, QuotaReserved and Evicted all True with no pod, and its GPUs
counted for hours (kueue#14811, ../shared/reference/cluster-facts.md §3.5). Other researchers'
jobs queue behind quota that nothing uses, and no other tool looks.

Its subjects are the objects a Kueue Workload is read for (`observe.kueue` attaches it as the
view's `queued`), whether pods made them a workload or not: a Job whose pods Kueue stopped has none
(`selection.podless`). Its verdict:

- *clear* while any of its pods runs or waits (any phase but Succeeded or Failed, Terminating too:
  Kueue counts such pods' quota), or while the Workload holds none, or is deactivated already;
- *unknown* when the Workload's conditions cannot be read, when its owner chain cannot be, and
  while a pod of its namespace whose owners cannot be read runs or waits (it may be its);
- *fires* once quota has been held for `after` with none of that (the later transition of the two
  conditions is when; a restart of Kueue that rewrites them only makes it later).

What follows is the lifecycle's: a report, a warning, and under an enforcing suspend policy the
Workload deactivated (`spec.active: false`, policy.endings), re-checked on a fresh read first.
Pure.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping, Sequence

from janitor.decide import selection
from janitor.decide.governance import Governance
from janitor.decide.model import Finding, ObjectView, Observation, PodView, State, TriggerKind
from janitor.decide.owners import DEFAULT_OWNER_KEYS
from janitor.decide.reasons import Code, Reason, why
from janitor.decide.selection import CronJobMode, Workload
from janitor.decide.triggers.spec import Cycle, Recheck, Role, TriggerSpec, Usage, duration
from janitor.policy.model import Policy, ReservedQuota
from janitor.policy.model import Trigger as PolicyTrigger
from janitor.why_note import Scalar

DONE = frozenset({"Succeeded", "Failed"})


def working(pods: Sequence[PodView]) -> list[PodView]:
    """The pods that run or wait: every phase but the two final ones, Terminating ones too."""
    return [p for p in pods if p.phase not in DONE]


def subjects(workloads: Sequence[Workload], observation: Observation, gate: selection.Gate,
             by_uid: Mapping[str, ObjectView], *, cronjob_mode: CronJobMode = CronJobMode.JOB,
             owner_keys: Sequence[tuple[str, str]] = DEFAULT_OWNER_KEYS) -> tuple[Workload, ...]:
    """The workloads whose Kueue Workload was read: the pods' workload where it has pods, else the
    object alone (`selection.podless`). Objects being deleted or in protected namespaces are none."""
    known = {w.ref.uid: w for w in workloads if w.known}
    found: list[Workload] = []
    for view in observation.objects:
        queued = view.queued
        if queued is None or not queued.found or view.deleting or gate.protects(view.ref.namespace):
            continue
        found.append(known.get(view.ref.uid) or selection.podless(view, observation, by_uid,
                                                                  cronjob_mode=cronjob_mode, owner_keys=owner_keys))
    return tuple(found)


def governed(subjects_: Sequence[Workload], policies: Sequence[Policy]) -> list[tuple[Policy, list[Workload]]]:
    """Each subject under the first policy with reservedQuota that selects it (`Governance.of_object`)."""
    governance = Governance(policies)
    by_policy: dict[str, tuple[Policy, list[Workload]]] = {}
    for w in subjects_:
        policy = governance.of_object(ReservedQuota, w)
        if policy is not None:
            by_policy.setdefault(policy.name, (policy, []))[1].append(w)
    return list(by_policy.values())


def _untraced(workloads: Sequence[Workload]) -> dict[str, PodView]:
    """Per namespace, a pod that runs or waits whose owner chain cannot be read."""
    found: dict[str, PodView] = {}
    for w in workloads:
        if w.unknown is not None:
            for p in working(w.pods):
                found.setdefault(p.ref.namespace or "", p)
    return found


def judge(w: Workload, trigger: ReservedQuota, now: datetime.datetime,
          untraced: Mapping[str, PodView]) -> tuple[State, Reason]:
    """One workload's verdict (see the module's words)."""
    if w.unknown is not None:
        return State.UNKNOWN, why(Code.WORKLOAD_UNKNOWN, why=w.unknown)
    queued = w.view.queued if w.view is not None else None
    if queued is None or not queued.found:
        problem = queued.problem if queued is not None and queued.problem else "its Workload was not read"
        return State.UNKNOWN, why(Code.QUOTA_UNREAD, problem=problem)
    if queued.status_problem:
        return State.UNKNOWN, why(Code.QUOTA_UNREAD, problem=queued.status_problem)
    busy = working(w.pods)
    if busy:
        return State.CLEAR, why(Code.QUOTA_PODS, count=len(busy), pod=busy[0].ref.name, phase=_phase(busy[0]))
    if queued.active is False:
        return State.CLEAR, why(Code.KUEUE_INACTIVE, workload=queued.name, action="suspend")
    if queued.finished:
        return State.CLEAR, why(Code.QUOTA_FINISHED, workload=queued.name)
    since = queued.reserved_since
    if since is None:
        return State.CLEAR, why(Code.QUOTA_NOT_HELD, workload=queued.name)
    if queued.elsewhere:
        return State.UNKNOWN, why(Code.QUOTA_UNREAD, problem=queued.elsewhere)
    if not (queued.evicted or (w.view is not None and w.view.suspended)):
        # Running as far as Kueue and its spec say: a pod deleted (preempted, its node gone) is
        # replaced after a backoff, a JobSet restarts its Jobs; what kueue#14811 leaves is evicted or
        # suspended.
        return State.CLEAR, why(Code.QUOTA_RUNNING, workload=queued.name, kind=w.ref.kind)
    stray = untraced.get(w.ref.namespace or "")
    if stray is not None:
        return State.UNKNOWN, why(Code.QUOTA_UNREAD, problem=f"pod {stray.ref.name} of its namespace runs or waits "
                                  "and its owners cannot be read: it may be this workload's")
    ended = [(_ended(p), p) for p in w.pods]
    unsaid = next((p for at, p in ended if at is None), None)
    if unsaid is not None:
        return State.UNKNOWN, why(Code.QUOTA_UNREAD, problem=f"when its pod {unsaid.ref.name} stopped is not reported")
    # No pod has run or waited since the latest of: the reservation, Kueue's eviction or pods no
    # longer ready, and the end of its last pod (a Job's next pod may be a backoff away).
    quiet_since = max([since, *(t for t in (queued.stopped_at,) if t is not None),
                       *(at for at, _ in ended if at is not None)])
    held, quiet = max(now - since, _ZERO), max(now - quiet_since, _ZERO)
    if quiet < trigger.after:
        return State.TOO_YOUNG, why(Code.QUOTA_HELD_SHORT, workload=queued.name, since=quiet_since, held=quiet,
                                    after=trigger.after)
    return State.FIRES, why(Code.QUOTA_HELD, workload=queued.name, since=since, held=held, quiet=quiet,
                            evicted=", and Kueue evicted it without releasing it" if queued.evicted else "")


_ZERO = datetime.timedelta(0)


def _ended(pod: PodView) -> datetime.datetime | None:
    """When a finished pod stopped: its containers' last finish, else its start or creation for one
    that never ran a container (rejected, evicted before starting); None when nothing says."""
    ends = [t for c in pod.state.containers for t in (c.since if c.state == "terminated" else None, c.last_exit_at)
            if t is not None]
    return max(ends) if ends else (None if pod.state.containers else pod.started or pod.created)


def _phase(pod: PodView) -> str:
    return f"{pod.phase}, Terminating" if pod.deleting else pod.phase


def findings(workloads: Sequence[Workload], observation: Observation, policy: Policy,
             now: datetime.datetime, *, untraced: Mapping[str, PodView] | None = None) -> list[Finding]:
    """One finding per workload the policy governs for reservedQuota (`subjects`, `governed`).
    `untraced`: the untraced pods per namespace (`_untraced` of every workload of the cycle)."""
    trigger = policy.trigger(ReservedQuota)
    assert trigger is not None
    strays = untraced if untraced is not None else _untraced(workloads)
    found = []
    for w in workloads:
        state, reason = judge(w, trigger, now, strays)
        queued = w.view.queued if w.view is not None else None
        gpus = queued.gpus if queued is not None else 0
        found.append(Finding(TriggerKind.RESERVED_QUOTA, policy.name, policy.mode, w.ref, state, reason,
                             source=policy.source, known=w.known, gpus=gpus,
                             reclaim_gpu_hours=gpus * trigger.after.total_seconds() / 3600
                             if state is State.FIRES else 0.0, owner=w.owner, managed_by=w.managed_by))
    return found


def judged(cycle: Cycle) -> tuple[list[Finding], tuple[Workload, ...]]:
    """The cycle's reservedQuota findings, and the workloads with no pods they judged (for the
    lifecycle, which knows pods' workloads already)."""
    if not any(p.trigger(ReservedQuota) is not None for p in cycle.policies):
        return [], ()
    workloads = cycle.workloads
    every = subjects(workloads, cycle.observation, cycle.gate, cycle.by_uid, cronjob_mode=cycle.cronjob_mode,
                     owner_keys=cycle.owner_keys)
    strays = _untraced(workloads)
    found = [f for policy, members in governed(every, cycle.policies)
             for f in findings(members, cycle.observation, policy, cycle.now, untraced=strays)]
    listed = {w.ref.uid for w in workloads}
    return found, tuple(w for w in every if w.ref.uid not in listed)


def _facts(trigger: PolicyTrigger) -> dict[str, Scalar]:
    return {"after": duration(trigger.after)} if isinstance(trigger, ReservedQuota) else {}


def _describe(trigger: PolicyTrigger) -> str:
    assert isinstance(trigger, ReservedQuota)
    return (f"reservedQuota: a Kueue Workload holding quota for {duration(trigger.after)} while none of its pods "
            "runs or waits")


# No pods of its own to judge (`pods` None: `judged` finds its subjects). The re-check reads the object's
# pods and its Kueue Workload again; use on any signal of a pod that came back still vetoes.
TRIGGER = TriggerSpec(TriggerKind.RESERVED_QUOTA, Role.MARKS, Usage.VETOED, findings, policy=ReservedQuota,
                      recheck=Recheck(pods=True, usage=True, kueue=True), condition="holding Kueue quota with no pods",
                      facts=_facts, describe=_describe, subjects=judged)
