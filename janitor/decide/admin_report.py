"""The admins' report: one message per cycle with everything that needs a person, not a bot.

Admins get one summary, by section, instead of one message per object: pods stuck Terminating
(per node, with what holds them and the remedy), nodes whose agent reports leftover processes,
pods that can never fit, GPU pods without telemetry, GPUs with memory in use and no pod (beside
the node agent's leftovers on the same node), and the tripwire. Its `key` changes only
when what it is about changes (an item added or resolved), not when its times tick on, so the
daemon sends it when something changed and otherwise at a slow pace, never every minute.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

from janitor.decide.model import NodeInfo
from janitor.decide.shadow import IdleFinding
from janitor.decide.terminating import StuckPod

NEVER_FITS = "no node could ever run it"


@dataclass(frozen=True, slots=True)
class AdminReport:
    sections: tuple[tuple[str, tuple[str, ...]], ...]
    ids: tuple[str, ...] = ()  # what the report is about (uids, node names): its identity, not its wording

    @property
    def empty(self) -> bool:
        return not self.sections

    @property
    def key(self) -> str:
        return hashlib.sha1(repr(sorted(self.ids)).encode()).hexdigest()[:16]

    def text(self) -> str:
        return "\n".join(f"{title}:\n" + "\n".join(f"  - {line}" for line in lines) for title, lines in self.sections)


def _hours(seconds: float) -> str:
    return f"{seconds / 3600:.1f} h" if seconds >= 3600 else f"{seconds / 60:.0f} min"


def admin_report(stuck: Sequence[StuckPod], findings: Sequence[IdleFinding], nodes: Sequence[NodeInfo],
                 silent_gpu_pods: Sequence[str], tripwire: str | None,
                 ghost_gpus: Sequence[tuple[str, str, float]] = ()) -> AdminReport:
    sections: list[tuple[str, tuple[str, ...]]] = []
    if stuck:
        sections.append(("Pods stuck Terminating", tuple(
            f"{s.node or '(no node)'}: {s.pod} Terminating since {s.since:%Y-%m-%d %H:%M}Z, "
            f"{_hours(s.overdue.total_seconds())} past its grace; held by {', '.join(s.holds)}"
            + (f". Remedy: {s.remedy}" if s.remedy else "") for s in stuck)))
    leftovers = [n for n in nodes if n.agent and n.agent[0] == "True"]
    if leftovers:
        sections.append(("Nodes with processes of deleted pods stuck in D state", tuple(
            f"{n.name}: {n.agent[1] if n.agent else ''}. Remedy: drain and reboot {n.name}" for n in leftovers)))
    if ghost_gpus:
        by_name = {n.name: n for n in nodes}

        def ghost(node: str, gpu: str, mib: float) -> str:
            seen = by_name.get(node)
            also = (f"; the node agent reports processes of deleted pods stuck there: {seen.agent[1][:200]}"
                    if seen and seen.agent and seen.agent[0] == "True" else "")
            return f"{node} GPU {gpu}: {mib:.0f} MiB in use, no pod on it{also}"

        sections.append(("Ghost GPUs (memory in use, no pod)", tuple(ghost(*g) for g in ghost_gpus)))
    never = [f for f in findings if f.workload is not None and NEVER_FITS in f.why]
    if never:
        sections.append(("Workloads that can never fit", tuple(f"{f.workload} ({f.owner}): {f.why}" for f in never)))
    if silent_gpu_pods:
        sections.append(("GPU pods without GPU telemetry (never judged idle)", tuple(silent_gpu_pods)))
    if tripwire:
        sections.append(("Tripwire", (tripwire,)))
    ids = ([f"stuck:{s.pod.uid}" for s in stuck] + [f"leftovers:{n.name}" for n in leftovers]
           + [f"never:{f.workload.uid}" for f in never if f.workload] + [f"silent:{p}" for p in silent_gpu_pods]
           + (["tripwire"] if tripwire else []) + [f"ghost:{node}/{gpu}" for node, gpu, _ in ghost_gpus])
    return AdminReport(tuple(sections), tuple(ids))
