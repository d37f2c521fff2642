"""What the owner of a deleted pod is told when the node agent finds its processes holding GPUs.

The agent's word is taken only as the D-state proofs take it (decide.triggers.terminating): a
condition True with the agent's run and proven sight, its last scan at most `MAX_REPORT_AGE`
from when the nodes were read; and never about a pod the API lists alive, or on another node
(`believed`: a forged or confused entry tells no one, and the admin report leaves it out too).
One notice per node and pod (its processes and GPUs together), to the owner its namespace names
(the pod's workload is gone with it, so only the namespace can say). The notice's `key` is what
the janitor remembers having told (`act.holder_notices`), so the owner hears of it once, not
every cycle. A pod whose namespace is unknown (the agent never saw it listed) or names no owner is
told to nobody but the admins, whose report lists it (decide.admin_report). Pure.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from janitor.decide.model import NodeInfo, PodView
from janitor.decide.owners import Owner, OwnerKind
from janitor.decide.triggers.terminating import MAX_REPORT_AGE
from janitor.node_report import HeldGpu


@dataclass(frozen=True, slots=True)
class HolderNotice:
    key: str  # node/pod uid: told once
    node: str
    namespace: str
    pod: str
    pod_uid: str
    owner: Owner
    held: tuple[HeldGpu, ...]  # its processes' GPUs on that node, by minor

    def words(self, admin_channel: str | None = None) -> str:
        """The message's words: what still holds which GPU, since when, and what happens next."""
        gpus = "; ".join(f"GPU minor {h.minor}" + (f" (bus {h.bus_id})" if h.bus_id else "")
                         + f" by pid {h.pid} ({h.comm or 'unnamed'}, state {h.state}) since "
                         f"{h.since:%Y-%m-%d %H:%M}Z" for h in self.held)
        admins = f"the admins ({admin_channel})" if admin_channel else "the admins"
        return (f"Your pod {self.namespace}/{self.pod} was deleted, but processes of it still hold GPUs on node "
                f"{self.node}: {gpus}. No one else can use them meanwhile. The janitor kills nothing: {admins} "
                "see it in their report and will free them (end the processes, or reboot the node). If you can "
                "still reach what it started (a shell, a launcher, a parent process), stop it.")


def believed(nodes: Sequence[NodeInfo], pods: Sequence[PodView],
             read: datetime.datetime) -> tuple[tuple[str, HeldGpu], ...]:
    """The (node, holder) pairs the node agents report that the janitor takes as true, as of `read`
    (when the nodes were read): see the module docstring."""
    by_uid = {p.ref.uid: p for p in pods}
    found: list[tuple[str, HeldGpu]] = []
    for node in nodes:
        condition = node.gpu_holders
        if condition is None or condition.status is not True:
            continue
        run, sight = condition.message.agent, condition.message.sight
        if run is None or sight is None or not sight.proven or abs(read - run.scanned) > MAX_REPORT_AGE:
            continue
        for h in condition.message.held:
            pod = by_uid.get(h.pod_uid)
            if pod is None or (pod.deleting and pod.node == node.name):
                found.append((node.name, h))
    return tuple(found)


def holder_notices(held: Sequence[tuple[str, HeldGpu]], owners: Mapping[str, Owner]) -> tuple[HolderNotice, ...]:
    """The notices due to owners for the holders believed now (`believed`)."""
    grouped: dict[tuple[str, str], list[HeldGpu]] = {}
    for node_name, h in held:
        grouped.setdefault((node_name, h.pod_uid), []).append(h)
    notices = []
    for (node_name, uid), of_pod in sorted(grouped.items()):
        first = of_pod[0]
        owner = owners.get(first.namespace) if first.namespace else None
        if owner is None or owner.kind is OwnerKind.UNKNOWN:
            continue
        notices.append(HolderNotice(f"{node_name}/{uid}", node_name, first.namespace, first.name, uid, owner,
                                    tuple(sorted(of_pod, key=lambda h: (h.minor, h.pid)))))
    return tuple(notices)
