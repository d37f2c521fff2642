"""The crash-loop trigger: GPU workloads that hold GPUs while doing nothing but restarting.

A pod counts as crash-looping when it restarted at least `restarts` times and its last exit was
within `window`; a workload triggers only when every one of its GPU pods does (a healthy replica
keeps it). The owner is told the last exit reason and, when the node agent saw OOM kills in the
pod's memory cgroup (janitor.node_report), what they were: on cgroup v2 the kubelet kills a whole
container when one of its processes passes the memory limit (`memory.oom.group`), unless the node
runs with `singleProcessOOMKill`, where single processes die and the container carries on without
any `OOMKilled` in its status.
"""

from __future__ import annotations

import datetime
from collections.abc import Sequence

from janitor.decide.model import Finding, Observation, PodJudgement, PodView, State, TriggerKind
from janitor.decide.reasons import Code, Reason, why
from janitor.decide.selection import Workload
from janitor.node_report import OomReport, OomScope
from janitor.policy.model import CrashLoop, Policy

GIB = 2**30


def _oom(pod: PodView, reports: Sequence[OomReport]) -> Reason | None:
    if not reports and "OOMKilled" not in pod.state.last_exit:
        return None
    limit = pod.state.limits.get("memory")
    single = any(r.scope is OomScope.PROCESS for r in reports)
    explained = ("this node kills single processes (singleProcessOOMKill): the container kept running, so its "
                 "status shows no OOMKilled" if single else
                 "on cgroup v2 one process over the limit takes the whole container (memory.oom.group) unless "
                 "the node sets singleProcessOOMKill")
    return why(Code.OOM, limit=f"memory limit {limit / GIB:.1f} GiB" if limit else "no memory limit set",
               agent=f"; node agent: {reports[-1].words}" if reports else "", explained=explained)


def _looping(pod: PodView, trigger: CrashLoop, now: datetime.datetime) -> bool:
    at = pod.state.last_exit_at
    return pod.state.restarts >= trigger.restarts and at is not None and now - at <= trigger.window


def pods(workload: Workload) -> tuple[PodView, ...]:
    """The pods `crashLoop` judges: the workload's GPU pods that are running or starting."""
    return tuple(p for p in workload.pods if p.gpus > 0 and not p.deleting and p.phase in ("Running", "Pending"))


def findings(workloads: Sequence[Workload], observation: Observation, policy: Policy,
             now: datetime.datetime) -> list[Finding]:
    """One finding per known GPU workload with at least one crash-looping pod."""
    trigger = policy.trigger(CrashLoop)
    assert trigger is not None
    found = []
    for workload in workloads:
        members = pods(workload)
        looping = [p for p in members if _looping(p, trigger, now)]
        if not looping or not workload.known:
            continue
        judged = []
        for pod in members:
            words = why(Code.RESTARTS, pod=pod.ref.name, restarts=pod.state.restarts,
                        last_exit=pod.state.last_exit or "unknown",
                        at=f" at {pod.state.last_exit_at:%Y-%m-%d %H:%M}Z" if pod.state.last_exit_at else "",
                        oom=_oom(pod, observation.oom.get(pod.ref.uid, ())))
            judged.append(PodJudgement(pod.ref, State.FIRES if pod in looping else State.CLEAR, words))
        gpus = sum(p.gpus for p in members)
        if len(looping) < len(members):
            state, reason = State.CLEAR, why(Code.SOME_LOOPING, looping=len(looping), total=len(members),
                                             first=judged[0].why)
        else:
            state, reason = State.FIRES, why(Code.ALL_LOOPING, gpus=gpus, shown=tuple(j.why for j in judged[:2]))
        found.append(Finding(TriggerKind.CRASH_LOOP, policy.name, policy.mode, workload.ref, state, reason,
                             source=policy.source, pods=tuple(judged), gpus=gpus,
                             owner=workload.owner, managed_by=workload.managed_by))
    return found
