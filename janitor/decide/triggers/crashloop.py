"""The crash-loop trigger: GPU workloads that hold GPUs while doing nothing but restarting.

Kubernetes keeps, per container, a restart count over the container's life and the start and end
of its last run, nothing more. So the trigger judges each container on its own and only from what
that proves: a container is crash-looping when it restarted at least `restarts` times, its last
run both began and ended within `window` (a trainer that ran for days and failed once is not in a
loop, whatever its count from last week), it has not completed since, and it is not running well
again (a run longer than its last run and `RECOVERED_AFTER` ends the loop). Restarts are never summed
across containers, and sidecars are not judged at all: native ones (init containers with
`restartPolicy: Always`) and those the policy names in `ignoreContainers`, since a proxy restarting
says nothing about the trainer beside it. A pod is crash-looping when one of its containers is; a
workload triggers only when every one of its GPU pods is (a healthy replica keeps it).

The owner is told which container, its restarts, its last exit and how long that run lasted, what
it does now, whose restarts were not counted and, when the node agent saw OOM kills in the pod's
memory cgroup (janitor.node_report), what they were: on cgroup v2 the kubelet kills a whole
container when one of its processes passes the memory limit (`memory.oom.group`), unless the node
runs with `singleProcessOOMKill`, where single processes die and the container carries on without
any `OOMKilled` in its status.
"""

from __future__ import annotations

import datetime
from collections.abc import Sequence

from janitor.decide.model import (
    ContainerKind,
    ContainerStatus,
    Finding,
    Observation,
    PodJudgement,
    PodView,
    State,
    TriggerKind,
)
from janitor.decide.reasons import Code, Reason, why
from janitor.decide.selection import Workload
from janitor.decide.triggers.spec import Reads, Recheck, Role, TriggerSpec, Usage, duration
from janitor.node_report import OomReport, OomScope
from janitor.policy.model import CrashLoop, Policy
from janitor.policy.model import Trigger as PolicyTrigger

GIB = 2**30
RECOVERED_AFTER = datetime.timedelta(minutes=10)
"""A container running now has left its loop once this run has lasted longer than its last run
and than this: the kubelet forgets a container's crash back-off after 10 minutes of running
(twice its 5-minute maximum back-off; KEP-4603), so it counts such a run as recovery too."""
# containerd reports a run that never started (a bad command) as starting at the Unix epoch.
_NEVER_STARTED = datetime.datetime(1971, 1, 1, tzinfo=datetime.timezone.utc)


def _oom(pod: PodView, container: ContainerStatus, reports: Sequence[OomReport]) -> Reason | None:
    if not reports and "OOMKilled" not in container.last_exit:
        return None
    limit = pod.state.limits.get("memory")
    single = any(r.scope is OomScope.PROCESS for r in reports)
    explained = ("this node kills single processes (singleProcessOOMKill): the container kept running, so its "
                 "status shows no OOMKilled" if single else
                 "on cgroup v2 one process over the limit takes the whole container (memory.oom.group) unless "
                 "the node sets singleProcessOOMKill")
    return why(Code.OOM, limit=f"memory limit {limit / GIB:.1f} GiB" if limit else "no memory limit set",
               agent=f"; node agent: {reports[-1].words}" if reports else "", explained=explained)


def ignored(container: ContainerStatus, trigger: CrashLoop) -> bool:
    """A sidecar: a native one (an init container with restartPolicy Always) or one the policy names."""
    return container.kind is ContainerKind.SIDECAR or container.name in trigger.ignore_containers


def _last_run(container: ContainerStatus) -> tuple[datetime.datetime, datetime.datetime] | None:
    """(start, end) of the container's last run; a run that never started began when it ended."""
    end = container.last_exit_at
    if end is None:
        return None
    start = container.last_started
    return (start if start is not None and _NEVER_STARTED < start <= end else end), end


def container_verdict(container: ContainerStatus, trigger: CrashLoop, now: datetime.datetime) -> Reason | None:
    """None when this container is crash-looping, else why not (in the container's own numbers)."""
    name, restarts = container.name, container.restarts
    if restarts < trigger.restarts:
        return why(Code.TOO_FEW_RESTARTS, container=name, restarts=restarts, needed=trigger.restarts)
    if container.state == "terminated":
        return why(Code.COMPLETED, container=name, restarts=restarts)
    run = _last_run(container)
    if run is None:
        return why(Code.NO_LAST_EXIT, container=name, restarts=restarts)
    start, end = run
    running = now - container.since if container.state == "running" and container.since is not None else None
    if running is not None and running > max(end - start, RECOVERED_AFTER):
        return why(Code.RECOVERED, container=name, restarts=restarts, running=running, ran=end - start,
                   floor=RECOVERED_AFTER)
    if now - end > trigger.window:
        return why(Code.EXIT_BEFORE_WINDOW, container=name, restarts=restarts, ago=now - end, window=trigger.window)
    if now - start > trigger.window:
        return why(Code.LONG_LAST_RUN, container=name, restarts=restarts, ran=end - start, window=trigger.window)
    return None


def recently_restarted(pod: PodView, window: datetime.timedelta, now: datetime.datetime) -> bool:
    """Some container of the pod (a sidecar too) restarted within `window`: worth a verdict in words.
    (A loop, not any(): asked of every GPU pod.)"""
    for c in pod.state.containers:
        if c.restarts > 0 and c.last_exit_at is not None and now - c.last_exit_at <= window:
            return True
    return False


def _ignored_words(pod: PodView, trigger: CrashLoop) -> Reason | None:
    names = tuple(f"{c.name} ({c.restarts} restart{'s' if c.restarts > 1 else ''})" for c in pod.state.containers
                  if ignored(c, trigger) and c.restarts > 0)
    return why(Code.SIDECARS_IGNORED, names=names) if names else None


def judge_pod(pod: PodView, trigger: CrashLoop, reports: Sequence[OomReport],
              now: datetime.datetime) -> tuple[bool, Reason]:
    """Whether the pod is crash-looping (one of its judged containers is), and why, in words."""
    judged = sorted((c for c in pod.state.containers if not ignored(c, trigger)), key=lambda c: -c.restarts)
    skipped = _ignored_words(pod, trigger)
    verdicts = [(c, container_verdict(c, trigger, now)) for c in judged]
    looping = [c for c, verdict in verdicts if verdict is None]
    if looping:
        c = looping[0]
        run = _last_run(c)
        assert run is not None
        state = (why(Code.NOW_RUNNING, since=c.since) if c.state == "running" and c.since is not None
                 else why(Code.NOW_WAITING, reason=c.reason or c.state or "not reported"))
        return True, why(Code.RESTARTS, pod=pod.ref.name, container=c.name, restarts=c.restarts,
                         last_exit=c.last_exit or "unknown", at=run[1], ran=run[1] - run[0], now=state,
                         oom=_oom(pod, c, reports), ignored=skipped)
    closest = verdicts[0][1] if verdicts else why(Code.TOO_FEW_RESTARTS, container="(none reported)", restarts=0,
                                                  needed=trigger.restarts)
    return False, why(Code.NOT_LOOPING, pod=pod.ref.name, why=closest, ignored=skipped)


def pods(workload: Workload) -> tuple[PodView, ...]:
    """The pods `crashLoop` judges: the workload's GPU pods that are running or starting."""
    return tuple([p for p in workload.pods if p.gpus > 0 and not p.deleting and p.phase in ("Running", "Pending")])


def findings(workloads: Sequence[Workload], observation: Observation, policy: Policy,
             now: datetime.datetime) -> list[Finding]:
    """One finding per known GPU workload with a crash-looping pod, or with a container (a sidecar
    too) that restarted within the window: then it says in words why that is no crash loop."""
    trigger = policy.trigger(CrashLoop)
    assert trigger is not None
    found = []
    for workload in workloads:
        if not workload.known:
            continue
        members = pods(workload)
        for p in members:
            if recently_restarted(p, trigger.window, now):
                break
        else:  # no container restarted within the window: nothing to say
            continue
        judged = []
        for pod in members:
            looping, words = judge_pod(pod, trigger, observation.oom.get(pod.ref.uid, ()), now)
            judged.append(PodJudgement(pod.ref, State.FIRES if looping else State.CLEAR, words))
        firing = [j for j in judged if j.state is State.FIRES]
        gpus = sum(p.gpus for p in members)
        if not firing:
            first = next(j for j, p in zip(judged, members, strict=True) if recently_restarted(p, trigger.window, now))
            state, reason = State.CLEAR, why(Code.NONE_LOOPING, total=len(members), first=first.why)
        elif len(firing) < len(members):
            state, reason = State.CLEAR, why(Code.SOME_LOOPING, looping=len(firing), total=len(members),
                                             first=judged[0].why)
        else:
            state, reason = State.FIRES, why(Code.ALL_LOOPING, gpus=gpus, shown=tuple(j.why for j in judged[:2]))
        found.append(Finding(TriggerKind.CRASH_LOOP, policy.name, policy.mode, workload.ref, state, reason,
                             source=policy.source, pods=tuple(judged), gpus=gpus,
                             owner=workload.owner, managed_by=workload.managed_by))
    return found


def _describe(t: PolicyTrigger) -> str:
    assert isinstance(t, CrashLoop)
    sidecars = f", ignoring {', '.join(t.ignore_containers)}" if t.ignore_containers else ""
    return (f"crashLoop: a container with >= {t.restarts} restarts whose last run began and ended within "
            f"{duration(t.window)}, holding GPUs{sidecars}")


TRIGGER = TriggerSpec(TriggerKind.CRASH_LOOP, Role.MARKS, Usage.VETOED, findings, policy=CrashLoop, pods=pods,
                      reads=lambda _: Reads(oom=True), recheck=Recheck(pods=True, usage=True, oom=True),
                      condition="crash-looping",
                      facts=lambda t: {"restarts": t.restarts, "window": duration(t.window)}
                      if isinstance(t, CrashLoop) else {}, describe=_describe)
