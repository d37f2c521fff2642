"""The crash-loop trigger: GPU workloads that hold GPUs while doing nothing but restarting.

A pod counts as crash-looping when it restarted at least `restarts` times and its last exit was
within `window`; a workload triggers only when every one of its GPU pods does (a healthy replica
keeps it). The owner is told the last exit reason and, when the node agent saw OOM kills in the
pod's memory cgroup, what they were: on cgroup v2 the kubelet kills a whole container when one
of its processes passes the memory limit (`memory.oom.group`), unless the node runs with
`singleProcessOOMKill`, where single processes die and the container carries on without any
`OOMKilled` in its status. Same lifecycle as idle and pending findings (trigger "crashLoop").
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping, Sequence

from janitor.decide.evidence import PodKey
from janitor.decide.idle import Idleness, Judgement
from janitor.decide.model import NamespaceView, ObjectView, PodView
from janitor.decide.owners import DEFAULT_OWNER_KEYS, find_owner
from janitor.decide.shadow import IdleFinding
from janitor.decide.workloads import CronJobMode, deciding_policy, group_by_workload, workload_view
from janitor.policy.model import CrashLoop, Policy

GIB = 2**30


def _oom_words(pod: PodView, events: Sequence[str]) -> str:
    if not events and "OOMKilled" not in pod.state.last_exit:
        return ""
    limit = pod.state.limits.get("memory")
    parts = [f"memory limit {limit / GIB:.1f} GiB" if limit else "no memory limit set"]
    if events:
        parts.append(f"node agent: {events[-1]}")
    if any("single processes" in e for e in events):
        parts.append("this node kills single processes (singleProcessOOMKill): the container kept running, so its "
                     "status shows no OOMKilled")
    else:
        parts.append("on cgroup v2 one process over the limit takes the whole container (memory.oom.group) unless "
                     "the node sets singleProcessOOMKill")
    return "; OOM: " + "; ".join(parts)


def _looping(pod: PodView, trigger: CrashLoop, now: datetime.datetime) -> bool:
    at = pod.state.last_exit_at
    return pod.state.restarts >= trigger.restarts and at is not None and now - at <= trigger.window


def crash_findings(
    pods: Sequence[PodView],
    namespaces: Mapping[str, NamespaceView],
    objects_by_uid: Mapping[str, ObjectView],
    policies: Sequence[Policy],
    now: datetime.datetime,
    oom_events: Mapping[str, Sequence[str]] | None = None,
    *,
    cronjob_mode: CronJobMode = CronJobMode.JOB,
    protected_namespaces: Sequence[str] = (),
    owner_keys: Sequence[tuple[str, str]] = DEFAULT_OWNER_KEYS,
) -> list[IdleFinding]:
    """One finding per GPU workload with at least one crash-looping pod."""
    if not any(p.trigger(CrashLoop) for p in policies):
        return []
    groups = group_by_workload(pods, objects_by_uid, lambda pod: pod.gpus > 0 and not pod.deleting and pod.phase in (
        "Running", "Pending") and (pod.ref.namespace or "") not in protected_namespaces, cronjob_mode=cronjob_mode)
    found = []
    for workload, members in groups:
        namespace = workload.ref.namespace or ""
        ns_view = namespaces.get(namespace, NamespaceView(namespace))
        view = workload_view(workload, members, objects_by_uid)
        policy = deciding_policy(policies, CrashLoop, workload, members, ns_view, view)
        if policy is None:
            continue
        trigger = policy.trigger(CrashLoop)
        assert trigger is not None
        looping = [p for p in members if _looping(p, trigger, now)]
        if not looping:
            continue
        judged = []
        for pod in members:
            words = (f"{pod.ref.name}: {pod.state.restarts} restarts, last exit {pod.state.last_exit or 'unknown'}"
                     + (f" at {pod.state.last_exit_at:%Y-%m-%d %H:%M}Z" if pod.state.last_exit_at else "")
                     + _oom_words(pod, (oom_events or {}).get(pod.ref.uid, ())))
            judged.append(Judgement(PodKey(namespace, pod.ref.name),
                                    Idleness.IDLE if pod in looping else Idleness.BUSY, words))
        if len(looping) < len(members):
            idleness, why = Idleness.BUSY, (f"{len(looping)} of {len(members)} GPU pods crash-looping; not acted on "
                                            f"while others run ({judged[0].why})")
        else:
            idleness, why = Idleness.IDLE, (f"crash-looping while holding {sum(p.gpus for p in members)} GPUs: "
                                            + "; ".join(j.why for j in judged[:2]))
        found.append(IdleFinding(policy.name, policy.source, policy.mode, CrashLoop.key, workload.ref, idleness, why,
                                 tuple(judged), sum(p.gpus for p in members), 0.0, workload.managed_by,
                                 find_owner(view, ns_view, owner_keys), condition="crash-looping"))
    return found
