"""What the owner of a deleted pod is told when the node agent finds its processes holding GPUs.

One notice per node and pod (its processes and GPUs together), to the owner its namespace names
(the pod's workload is gone with it, so only the namespace can say). The notice's `key` is what
the janitor remembers having told (`act.holder_notices`), so the owner hears of it once, not
every cycle. A pod whose namespace is unknown (the agent never saw it listed) or names no owner is
told to nobody but the admins, whose report lists it (decide.admin_report). Pure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from janitor.decide.model import NodeInfo
from janitor.decide.owners import Owner, OwnerKind
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


def holder_notices(nodes: Sequence[NodeInfo], owners: Mapping[str, Owner]) -> tuple[HolderNotice, ...]:
    """The notices due to owners for what the node agents report now (True conditions only)."""
    grouped: dict[tuple[str, str], list[HeldGpu]] = {}
    for node in nodes:
        if node.gpu_holders is None or node.gpu_holders.status is not True:
            continue
        for h in node.gpu_holders.message.held:
            grouped.setdefault((node.name, h.pod_uid), []).append(h)
    notices = []
    for (node_name, uid), held in sorted(grouped.items()):
        first = held[0]
        owner = owners.get(first.namespace) if first.namespace else None
        if owner is None or owner.kind is OwnerKind.UNKNOWN:
            continue
        notices.append(HolderNotice(f"{node_name}/{uid}", node_name, first.namespace, first.name, uid, owner,
                                    tuple(sorted(held, key=lambda h: (h.minor, h.pid)))))
    return tuple(notices)
