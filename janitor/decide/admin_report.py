"""The admins' report: one message with everything that needs a person, not a bot.

Admins get one summary, by section, instead of one message per object: pods stuck Terminating
(per node, with what holds them and the remedy), nodes whose agent reports leftover processes,
nodes whose agent sees no other pod's processes (it then finds no leftover and proves nothing),
workloads that can never fit, GPU pods without telemetry, GPUs with memory in use and no pod
(joined, by PCI bus id, with the process of a deleted pod the node agent found holding it, and
beside its leftovers on the same node), GPUs held by processes of deleted pods, the tripwire,
and kube-janitor running beside. Its `key` changes only when what it is about changes (an item added or resolved), not
when its times tick on, so the daemon sends it when something changed and otherwise at a slow pace, never every minute.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from janitor.annotations import ACKNOWLEDGE_TRIPWIRE, Undone
from janitor.decide.claims import State as ClaimState
from janitor.decide.claims import Verdict
from janitor.decide.evidence import GhostGpu
from janitor.decide.model import Finding, NodeInfo, ObjectRef, PodView, State, TriggerKind
from janitor.decide.neighbours import beside_line
from janitor.decide.owners import Owner, OwnerKind
from janitor.decide.rails import Held, HoldReason
from janitor.decide.reasons import Code, Reason, why
from janitor.node_report import HeldGpu, bus_key


@dataclass(frozen=True, slots=True)
class AdminReport:
    sections: tuple[tuple[str, tuple[str, ...]], ...] = ()
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


def never_fits(finding: Finding) -> bool:
    """A pending finding that fires because a pod could never run anywhere."""
    return (finding.trigger is TriggerKind.PENDING and finding.state is State.FIRES
            and any(Code.NEVER_FITS in j.why.codes() for j in finding.pods))


def _held(held: Sequence[Held], state: tuple[str, str]) -> tuple[list[str], list[str]]:
    """(lines, ids): what the rails hold back, by reason, each with what resumes it. A dry run is
    what the admin asked for, so it is not news."""
    by_reason: dict[HoldReason, list[Held]] = {}
    for h in held:
        if h.reason is not HoldReason.DRY_RUN:
            by_reason.setdefault(h.reason, []).append(h)
    namespace, name = state
    resume = {
        HoldReason.CAP: "they go through as the rolling hour and day free up; to let more through, raise "
                        "--max-deletions-per-hour, --max-deletions-per-day or their per-namespace kin",
        HoldReason.TRIPWIRE: "check they are wanted (`janitor plan`), then resume with: kubectl -n "
                             f"{namespace} annotate configmap {name} {ACKNOWLEDGE_TRIPWIRE}=<now, UTC> --overwrite",
        HoldReason.CLOCK_SKEW: "they resume once the janitor's clock agrees with the apiserver's (check NTP)",
        HoldReason.LEDGER: f"look at configmap {namespace}/{name}; deleting it resumes (the caps start afresh)",
    }
    lines = [f"{len(hs)} deletions held by the {'deletion caps' if reason is HoldReason.CAP else reason} "
             f"({hs[0].why}): {resume.get(reason, '')}" for reason, hs in sorted(by_reason.items())]
    return lines, [f"held:{reason}" for reason in sorted(by_reason)]


def _holder(h: HeldGpu, owners: Mapping[str, Owner]) -> str:
    pod = f"{h.namespace}/{h.name}" if h.name else f"uid {h.pod_uid} (never seen listed)"
    owner = owners.get(h.namespace) if h.namespace else None
    return (f"held by pid {h.pid} ({h.comm or 'unnamed'}, state {h.state}) of deleted or long-Terminating pod {pod}"
            + (f" ({owner})" if owner is not None else "") + f" since {h.since:%Y-%m-%d %H:%M}Z")


def _gpus(nodes: Sequence[NodeInfo], ghosts: Sequence[GhostGpu], owners: Mapping[str, Owner],
          held: Sequence[tuple[str, HeldGpu]]) -> tuple[list[str], list[str], list[str]]:
    """(ghost lines, lines of GPUs held with no ghost beside them, ids). A ghost GPU (memory in use,
    no pod) is joined with the holders believed on the same node and PCI bus id
    (decide.holder_notices.believed); the driver's and DCGM's spellings of a bus id differ, so they
    are compared as numbers."""
    by_name = {n.name: n for n in nodes}
    joined: set[tuple[str, int, int]] = set()
    ghost_lines = []
    for g in ghosts:
        key = bus_key(g.bus_id) if g.bus_id else None
        mine = [h for node, h in held if node == g.node and key is not None and bus_key(h.bus_id) == key]
        joined |= {(g.node, h.minor, h.pid) for h in mine}
        seen = by_name.get(g.node)
        stuck = seen.agent.message.summary[:200] if seen and seen.agent and seen.agent.status is True else ""
        also = f"; the node agent reports processes of deleted pods stuck there: {stuck}" if stuck else ""
        who = "; ".join(_holder(h, owners) for h in mine) if mine else "no pod on it"
        ghost_lines.append(f"{g.node} GPU {g.gpu}: {g.mib:.0f} MiB in use, {who}{also}")
    alone = [f"{node} GPU minor {h.minor}" + (f" (bus {h.bus_id})" if h.bus_id else "") + f": {_holder(h, owners)}"
             for node, h in held if (node, h.minor, h.pid) not in joined]
    return ghost_lines, alone, [f"held-gpu:{node}/{h.minor}/{h.pid}" for node, h in held]


def _claim(v: Verdict, owners: Mapping[str, Owner], holding_pods: Mapping[str, str]) -> str:
    """One claim's line: what it holds, since when, whose namespace, and what frees it. Nothing is
    done to it: what consumes a claim may be outside the janitor's sight (a driver, a workload). A
    claim reserved for a deleted pod whose process still holds a GPU is not offered for deletion:
    its reservation is what keeps that device from the next pod until the process is gone."""
    c = v.claim
    owner = owners.get(c.ref.namespace)
    whose = f"; namespace owner {owner}" if owner is not None and owner.kind is not OwnerKind.UNKNOWN else ""
    written = f", unchanged since {c.status_written:%Y-%m-%d %H:%M}Z" if c.status_written else ""
    node = next((holding_pods[g.uid] for g in v.gone if g.uid in holding_pods), None)
    if node is not None:
        return (f"{c.ref}: {v.words}{written}{whose}. A process of that pod still holds a GPU on {node} (below): "
                "free it first; until then the reservation keeps the device from other pods")
    stuck = (" (the resourceclaim controller did not drop the reservation: check kube-controller-manager)"
             if v.state is ClaimState.STALE_CONSUMER else "")
    return (f"{c.ref}: {v.words}{written}{stuck}{whose}"
            f". If nothing uses it: kubectl -n {c.ref.namespace} delete resourceclaim {c.ref.name}")


def admin_report(findings: Sequence[Finding], nodes: Sequence[NodeInfo], silent_gpu_pods: Sequence[PodView],
                 tripwire: str | None, ghost_gpus: Sequence[GhostGpu] = (), held: Sequence[Held] = (),
                 state: tuple[str, str] = ("kube-idle-janitor", "janitor-state"),
                 beside: Sequence[ObjectRef] = (), undone: Sequence[tuple[ObjectRef, Undone]] = (),
                 sight_lost: Reason | None = None, owners: Mapping[str, Owner] | None = None,
                 gpu_holders: Sequence[tuple[str, HeldGpu]] = (), claims: Sequence[Verdict] = ()) -> AdminReport:
    """`gpu_holders`: the (node, holder) pairs believed; `owners`: the owner of each namespace a
    holder's pod or a claim was in (its workload is gone); `claims`: the DRA claims holding devices
    with no live consumer (decide.claims.lingering)."""
    sections: list[tuple[str, tuple[str, ...]]] = []
    if sight_lost is not None:
        lost = f"{sight_lost}: the janitor marks, warns, cancels and reclaims nothing until it can read it again"
        sections.append(("No sight, no change", (lost + " (check its ClusterRole)",)))
    if beside:
        sections.append(("Other cleaners acting on the same objects", (beside_line(beside),)))
    held_lines, held_ids = _held(held, state)
    if held_lines:
        sections.append(("Deletions held back", tuple(held_lines)))
    stuck = sorted((f for f in findings if f.stuck is not None), key=lambda f: (f.stuck.node or "" if f.stuck else "",
                                                                              str(f.subject)))
    if stuck:
        sections.append(("Pods stuck Terminating", tuple(
            f"{s.node or '(no node)'}: {f.subject} Terminating since {s.since:%Y-%m-%d %H:%M}Z, "
            f"{_hours(s.overdue.total_seconds())} past its grace; held by {', '.join(str(h) for h in s.holds)}"
            + (f". Remedy: {s.remedy}" if s.remedy else "") for f in stuck if (s := f.stuck) is not None)))
    leftovers = [n for n in nodes if n.agent is not None and n.agent.status is True]
    if leftovers:
        sections.append(("Nodes with processes of deleted pods stuck in D state", tuple(
            f"{n.name}: {n.agent.message.summary if n.agent else ''}. Remedy: drain and reboot {n.name}"
            for n in leftovers)))
    blind = [(n.name, sight) for n in nodes
             if n.agent is not None and (sight := n.agent.message.sight) is not None and not sight.proven]
    if blind:
        sections.append(("Node agents that cannot see pods' processes", tuple(
            f"{name}: {sight.visible} of the {sight.listed} other pods listed there seen; it finds no process stuck "
            f"in D state and proves no pod gone: "
            + str(why(Code.AGENT_BLIND_CAUSES if sight.listed else Code.AGENT_BLIND_ALONE)) for name, sight in blind)))
    ghost_lines, held_gpus, held_gpu_ids = _gpus(nodes, ghost_gpus, owners or {}, gpu_holders)
    if ghost_lines:
        sections.append(("Ghost GPUs (memory in use, no pod)", tuple(ghost_lines)))
    if held_gpus:
        sections.append(("GPUs held by processes of deleted pods", tuple(held_gpus)))
    if claims:
        holding_pods = {h.pod_uid: node for node, h in gpu_holders}
        sections.append(("Device claims held with no consumer",
                         tuple(_claim(v, owners or {}, holding_pods) for v in claims)))
    never = [f for f in findings if f.known and never_fits(f)]
    if never:
        sections.append(("Workloads that can never fit", tuple(f"{f.subject} ({f.owner}): {f.why}" for f in never)))
    silent = sorted(f"{p.ref.namespace}/{p.ref.name} on {p.node}" for p in silent_gpu_pods)
    if silent:
        sections.append(("GPU pods without GPU telemetry (never judged idle)", tuple(silent)))
    if undone:
        sections.append(("Reclaims another controller undid", tuple(
            f"{ref}: its {u.action} by policy {u.policy} was undone by {u.by or 'someone the apiserver does not name'} "
            f"(found {u.at:%Y-%m-%d %H:%M}Z, {u.times} time{'s' if u.times > 1 else ''}); change it where it is "
            "kept (Git, the autoscaler's minimum), or give the policy lifecycle.reclaimManaged"
            for ref, u in undone)))
    if tripwire:
        sections.append(("Tripwire", (tripwire,)))
    ids = ([f"stuck:{f.subject.uid}" for f in stuck] + [f"leftovers:{n.name}" for n in leftovers]
           + [f"blind:{name}" for name, _ in blind]
           + [f"never:{f.subject.uid}" for f in never] + [f"silent:{p}" for p in silent]
           + (["tripwire"] if tripwire else []) + [f"ghost:{g.node}/{g.gpu}" for g in ghost_gpus] + held_ids
           + held_gpu_ids
           + [f"claim:{v.claim.ref.uid}" for v in claims]
           + [f"beside:{r.uid}" for r in beside] + [f"undone:{r.uid}:{u.times}" for r, u in undone]
           + (["sight-lost"] if sight_lost is not None else []))
    return AdminReport(tuple(sections), tuple(ids))
