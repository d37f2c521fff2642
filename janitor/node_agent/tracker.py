"""What the node agent remembers between scans, and what it concludes: pure, no I/O, no clock.

D state is normal for a moment (a disk read), so a task only becomes a *leftover* when it stays
in D over `sustain` consecutive scans (keyed by pid, tid and start time, so a reused PID starts
over) and its pod is gone from the API or Terminating past its grace period. A pod list that
could not be read means "unknown", never "gone": no leftovers that scan. Static pods (32-hex
UIDs) have mirror pods under another UID, so they are never reported as deleted.

What the agent saw of each Terminating pod's tasks is reported per pod (`PodTaskTracker`): alive
while any task of it is in /proc, in any state; gone only on positive evidence, sustained like a
D state: over `sustain` consecutive walks, each begun after a pod list that showed the pod
Terminating (so no container of it could still be starting), each reading every process's
cgroup without finding one of the pod's, with nothing in /proc unreadable (one walk could miss a
process that forked and exited under it; several in a row do not), and each walk one that could
have found it:
- this agent process saw a process of the pod in an earlier walk (so its processes are visible
  to it, whatever the runtime or cgroup layout), or
- the walk found a process of another pod the API lists on this node (not the agent's own: an
  agent without hostPID sees only itself), so it can see pods' processes at all, and no pod list
  this agent read showed the pod Running: a pod the API says ran but no walk found (a sandboxed
  runtime such as Kata beside runc pods, a cgroup layout that names no pod UID) may be running
  out of the agent's sight.
The agent's own pod is alive while the agent runs. Anything short of that leaves the pod
unreported, which proves nothing. How many of the node's other pods the last walk found a
process of (`Sight`) is reported beside: none means the agent cannot show it sees anything.

OOM kills are counted from each pod cgroup's cumulative `oom_kill`; the first reading of a pod
is its baseline, and a drop (a recreated cgroup) starts a new one, so only kills seen happening
are reported.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from janitor.node_agent.cgroups import OomState, pod_of
from janitor.node_agent.procfs import ScanResult, Task
from janitor.node_report import PodTaskState, Sight

TaskKey = tuple[int, int, int]  # (pid, tid, starttime ticks)


@dataclass(frozen=True, slots=True)
class PodOnNode:
    """A pod bound to this node, as the API lists it."""

    uid: str
    namespace: str
    name: str
    deleting_since: datetime.datetime | None = None  # metadata.deletionTimestamp
    grace: datetime.timedelta = datetime.timedelta(seconds=30)  # metadata.deletionGracePeriodSeconds
    mirror_of: str | None = None  # a static pod's mirror: the UID its cgroup carries (kubernetes.io/config.mirror)
    running: bool = False  # the API says it has (or had) processes: Running, or a container ran (may_have_run)

    @property
    def cgroup_uid(self) -> str:
        """The UID in the cgroup path of this pod's tasks."""
        return self.mirror_of or self.uid


@dataclass(frozen=True, slots=True)
class Leftover:
    """A task of a pod that should be gone, stuck in D."""

    pid: int
    tid: int
    comm: str
    wchan: str | None
    pod_uid: str
    container_id: str | None
    pod: PodOnNode | None  # None: the pod is gone from the API
    since: datetime.datetime  # first scan that saw it in D
    scans: int

    def describe(self, now: datetime.datetime) -> str:
        who = (f"pod {self.pod.namespace}/{self.pod.name} (uid {self.pod_uid}), Terminating since "
               f"{self.pod.deleting_since:%Y-%m-%dT%H:%M:%SZ}" if self.pod and self.pod.deleting_since
               else f"deleted pod uid {self.pod_uid}")
        held = int((now - self.since).total_seconds())
        return (f"{who}: process {self.comm!r} pid {self.pid}" + (f" thread {self.tid}" if self.tid != self.pid else "")
                + f" in D state for at least {held}s, wchan {self.wchan or 'unknown'}")


@dataclass(frozen=True, slots=True)
class OomKill:
    pod_uid: str
    new_kills: int
    total: int
    group: bool | None  # True: the whole container was killed (memory.oom.group), False: single processes


@dataclass
class DStateTracker:
    sustain: int = 3
    _seen: dict[TaskKey, tuple[datetime.datetime, int]] = field(default_factory=dict)

    def update(self, tasks: Sequence[Task], pods: Mapping[str, PodOnNode] | None,
               now: datetime.datetime) -> list[Leftover]:
        """Record this scan; return the leftovers as of now (none when `pods` is unknown)."""
        current: dict[TaskKey, tuple[datetime.datetime, int]] = {}
        candidates: list[tuple[Task, TaskKey]] = []
        for task in tasks:
            if task.state != "D":
                continue
            key = (task.pid, task.tid, task.starttime_ticks)
            since, count = self._seen.get(key, (now, 0))
            current[key] = (since, count + 1)
            candidates.append((task, key))
        self._seen = current  # a task that left D (or vanished) starts over
        if pods is None:
            return []
        found: list[Leftover] = []
        for task, key in candidates:
            since, count = current[key]
            ref = pod_of(task.cgroup) if task.cgroup else None
            if count < self.sustain or ref is None or len(ref.uid) == 32:  # not yet, not a pod, static pod
                continue
            pod = pods.get(ref.uid)
            if pod is not None and (pod.deleting_since is None or now < pod.deleting_since + pod.grace):
                continue  # a live pod's D state is its own business (and the kernel's hung-task warning)
            found.append(Leftover(task.pid, task.tid, task.comm, task.wchan, ref.uid, ref.container_id, pod,
                                  since, count))
        return sorted(found, key=lambda f: (f.pod_uid, f.pid, f.tid))


def _mentioned(uid: str, texts: frozenset[str]) -> bool:
    """Whether any cgroup path holds this UID in any spelling: a layout `pod_of` does not know
    must never make a live pod look gone."""
    spellings = {uid, uid.replace("-", "_")}
    return any(s in text for text in texts for s in spellings)


@dataclass
class PodTaskTracker:
    """Per Terminating pod of this node: alive, stuck in D or gone, as the scans saw it; and how
    many of the node's other pods the last walk saw (`sight`)."""

    sustain: int = 3  # consecutive walks without a task of the pod before it is gone
    own: frozenset[str] = frozenset()  # the agent's own pod (its UID): seeing it proves nothing
    sight: Sight | None = None  # the last walk's, with a pod list; None: nothing to say
    _deleting: frozenset[str] = frozenset()  # pods Terminating in the last pod list read
    _absent: dict[str, int] = field(default_factory=dict)  # uid -> walks in a row that found no task of it
    _seen: set[str] = field(default_factory=set)  # cgroup uids of listed pods a walk found a process of
    _ran: set[str] = field(default_factory=set)  # uids of pods a pod list showed Running

    def update(self, scan: ScanResult | None, pods: Mapping[str, PodOnNode] | None,
               leftovers: Sequence[Leftover]) -> dict[str, PodTaskState]:
        """This scan's states. `scan` None: the /proc walk is unusable (then nothing is alive or
        gone); `pods` None: the pods could not be listed (then nothing is reported at all). Either,
        or a walk that could not read everything, starts every pod's count of absent walks over."""
        states = {f.pod_uid: PodTaskState.D_STATE for f in leftovers}
        absent: dict[str, int] = {}
        self.sight = None
        if pods is None:
            self._absent = absent
            return states
        deleting = {uid: pod for uid, pod in pods.items() if pod.deleting_since is not None}
        before, self._deleting = self._deleting, frozenset(deleting)
        self._ran = (self._ran & set(pods)) | {uid for uid, pod in pods.items() if pod.running}  # any list, ever
        if scan is not None:
            found = self._found(scan, pods)
            others = {uid for uid, pod in pods.items() if not self._is_own(pod)}
            self.sight = Sight(len(others & found), len(others))
            self._seen = (self._seen | {pods[uid].cgroup_uid for uid in found}) & {p.cgroup_uid for p in pods.values()}
            whole = scan.unreadable == 0 and scan.processes > 0
            for uid, pod in deleting.items():
                if uid in states:
                    continue
                if uid in found or self._is_own(pod):
                    states[uid] = PodTaskState.ALIVE  # the agent's own pod: it runs there, whatever /proc shows
                elif whole and uid in before and self._visible(pod):
                    absent[uid] = self._absent.get(uid, 0) + 1
                    if absent[uid] >= self.sustain:
                        states[uid] = PodTaskState.GONE
        self._absent = absent
        return states

    def _is_own(self, pod: PodOnNode) -> bool:
        return pod.uid in self.own or pod.cgroup_uid in self.own

    @staticmethod
    def _found(scan: ScanResult, pods: Mapping[str, PodOnNode]) -> set[str]:
        """The listed pods of which the walk found a process, in any state."""
        texts = scan.cgroups | {task.cgroup for task in scan.found if task.cgroup}
        present = {ref.uid for text in texts if (ref := pod_of(text)) is not None}
        return {uid for uid, pod in pods.items() if pod.cgroup_uid in present or _mentioned(pod.cgroup_uid, texts)}

    def _visible(self, pod: PodOnNode) -> bool:
        """Whether this walk could have found a process of `pod`: see the module docstring."""
        if pod.cgroup_uid in self._seen:
            return True
        return self.sight is not None and self.sight.proven and pod.uid not in self._ran


@dataclass
class OomTracker:
    _last: dict[str, OomState] = field(default_factory=dict)

    def update(self, states: Mapping[str, OomState]) -> list[OomKill]:
        """New kills per pod since the previous reading; pods no longer read are forgotten.

        Whether the whole container went: `oom_group_kill` rose (kernels since ~5.17), else the
        container cgroups' `memory.oom.group` setting, else unknown."""
        kills: list[OomKill] = []
        for uid, state in sorted(states.items()):
            before = self._last.get(uid)
            if before is None or state.oom_kill <= before.oom_kill:
                continue
            group = state.group_mode
            if state.oom_group_kill is not None and before.oom_group_kill is not None:
                group = state.oom_group_kill > before.oom_group_kill
            kills.append(OomKill(uid, state.oom_kill - before.oom_kill, state.oom_kill, group))
        self._last = dict(states)
        return kills
