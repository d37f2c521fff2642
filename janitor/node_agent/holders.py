"""GPUs held by processes of pods that should be gone: who to read, and what to conclude. Pure.

A process is a suspect when its cgroup names a pod (`cgroups.pod_of`) that the API no longer
lists on this node, or lists Terminating past its grace period. Only suspects' open files and
mappings are read (`devices.holdings`): a live pod's holders are never read, never reported. Not
a suspect, whatever it holds:
- a process in no pod's cgroup (the host's: nvidia-persistenced holds every GPU by design), or in
  a cgroup whose layout names no pod this agent can read (unknown is not gone);
- a static pod's (32-hex UID: its mirror pod carries another UID), or the agent's own;
- a process of a pod the API lists under that UID and that is not Terminating past its grace (a
  pod is found by its own UID only: any pod may carry a `kubernetes.io/config.mirror` annotation
  naming another's);
- any process, when the node's pods could not be listed (then nothing is gone).

A suspect holding a GPU becomes a *holder* once it has done so over `sustain` consecutive scans
(keyed by pid, start time and minor, so a reused PID starts over), like a D-state task: a pod's
processes may take a moment to exit after the API lets it go. What is read of a process's files
counts only if it is still the process the walk saw (the same start time): its PID may have gone
to another pod's process meanwhile. A holder is reported per GPU with
its pod's namespace and name as the agent last saw them listed (the pod is usually gone from
the API by then; names of pods never seen listed are unknown, and said so).
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from janitor.node_agent.cgroups import PodRef, pod_of
from janitor.node_agent.devices import Gpu, Holding
from janitor.node_agent.tracker import PodOnNode

HolderKey = tuple[int, int, int]  # (pid, starttime ticks, minor)


@dataclass(frozen=True, slots=True)
class Suspect:
    """A process whose pod should be gone: gone from the API (`pod` None) or Terminating past grace."""

    pid: int
    starttime_ticks: int  # of its main thread, as the walk saw it (-1: not seen)
    pod_uid: str
    pod: PodOnNode | None


@dataclass(frozen=True, slots=True)
class GpuHolder:
    """One GPU held by one process of a pod that should be gone, sustained over `scans` scans."""

    gpu: Gpu
    pid: int
    comm: str
    state: str
    how: str  # "fd", "map" or "fd+map"
    pod_uid: str
    namespace: str  # "" when the agent never saw the pod listed
    name: str
    terminating: bool  # listed Terminating past its grace (else gone from the API)
    since: datetime.datetime  # the first scan that saw it hold this GPU
    scans: int

    def describe(self, now: datetime.datetime) -> str:
        pod = f"pod {self.namespace}/{self.name}" if self.name else "a pod"
        whose = f"{pod} (uid {self.pod_uid}, {'Terminating past its grace' if self.terminating else 'deleted'})"
        gpu = f"GPU minor {self.gpu.minor}" + (f" (bus {self.gpu.bus_id}, {self.gpu.uuid})" if self.gpu.bus_id else "")
        held = int((now - self.since).total_seconds())
        return (f"{gpu} held by process {self.comm!r} pid {self.pid} (state {self.state}, through {self.how}) of "
                f"{whose} for at least {held}s")


def suspects(owners: Sequence[tuple[int, int, str]], pods: Mapping[str, PodOnNode] | None, own: frozenset[str],
             now: datetime.datetime) -> list[Suspect]:
    """The processes whose open files and mappings are read this scan (see the module docstring)."""
    if pods is None:
        return []
    refs: dict[str, PodRef | None] = {}
    found: list[Suspect] = []
    for pid, started, text in owners:
        if text not in refs:
            refs[text] = pod_of(text)
        ref = refs[text]
        if ref is None or len(ref.uid) == 32 or ref.uid in own or started < 0:
            continue
        pod = pods.get(ref.uid)
        if pod is not None and (pod.deleting_since is None or now < pod.deleting_since + pod.grace):
            continue
        found.append(Suspect(pid, started, ref.uid, pod))
    return found


@dataclass
class HolderTracker:
    """Holders sustained over scans, and the names of the pods this node's lists showed."""

    sustain: int = 3
    _seen: dict[HolderKey, tuple[datetime.datetime, int]] = field(default_factory=dict)
    _names: dict[str, tuple[str, str]] = field(default_factory=dict)  # pod uid -> (namespace, name)
    _listed: frozenset[str] = frozenset()  # uids of the pods the last list showed

    def listed(self, pods: Mapping[str, PodOnNode]) -> None:
        """Remember the names of the pods a list showed: a pod's name outlives it while a suspect
        process of it remains."""
        for pod in pods.values():
            self._names[pod.uid] = (pod.namespace, pod.name)
        self._listed = frozenset(pods)

    def update(self, found: Sequence[Suspect], held: Sequence[Holding], gpus: Mapping[int, Gpu],
               now: datetime.datetime) -> list[GpuHolder]:
        """Record this scan's holdings of the `found` suspects; the holders as of now. A holding
        not seen this scan (ended, its process gone, or not read) starts its count over."""
        of = {s.pid: s for s in found}
        current: dict[HolderKey, tuple[datetime.datetime, int]] = {}
        holders: list[GpuHolder] = []
        for h in held:
            suspect = of.get(h.pid)
            if suspect is None or h.starttime_ticks != suspect.starttime_ticks:
                continue  # another process under its PID since the walk
            for minor in sorted(h.minors):
                key = (h.pid, h.starttime_ticks, minor)
                since, count = self._seen.get(key, (now, 0))
                current[key] = (since, count + 1)
                if count + 1 < self.sustain:
                    continue
                namespace, name = self._names.get(suspect.pod_uid, ("", ""))
                holders.append(GpuHolder(gpus.get(minor, Gpu(minor)), h.pid, h.comm, h.state, h.how,
                                         suspect.pod_uid, namespace, name, suspect.pod is not None, since, count + 1))
        self._seen = current
        keep = self._listed | {s.pod_uid for s in found}
        self._names = {uid: names for uid, names in self._names.items() if uid in keep}
        return sorted(holders, key=lambda x: (x.gpu.minor, x.pod_uid, x.pid))
