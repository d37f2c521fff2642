"""Which policy governs a workload, per trigger: one copy of the rule every path uses.

For each trigger kind, the first policy in load order that defines it and matches the workload
(every judged pod) decides it; an opted-out workload is skipped by a policy that honours opt-outs.
A workload with no pods (what Kueue admits, a DRA claim) is selected by what it has without pods
(`Governance.of_object`): a pod selector with terms selects none of them.
"""

from __future__ import annotations

from collections.abc import Sequence

from janitor.decide.model import NamespaceView, PodView
from janitor.decide.selection import Workload
from janitor.policy.model import Match, Policy, Trigger


def governing(policies: Sequence[Policy], trigger: type[Trigger], workload: Workload,
              pods: Sequence[PodView]) -> Policy | None:
    """The policy that decides `trigger` (a policy key: IdleGpu, Pending) for this workload, judging
    `pods`: the first in load order that defines it and whose match holds for every one of those
    pods; None when that policy honours an opt-out the workload carries (later policies are not consulted)."""
    return Governance(policies).governing(trigger, workload, pods)


def _in_scope(match: Match, namespace: NamespaceView, kind: str) -> bool:
    """The parts of `match` that do not depend on the pod."""
    return (match.namespaces.matches(namespace.name) and match.namespace_selector.matches(namespace.labels)
            and (not match.kinds or kind in match.kinds))


class Governance:
    """`governing` for one cycle's policies: the policies that define each trigger are listed
    once, and each policy's namespace globs, namespace selector and kinds are decided once per
    namespace and kind; only the pod selector (when it has terms) is matched pod by pod."""

    def __init__(self, policies: Sequence[Policy]) -> None:
        self.policies = tuple(policies)
        self.defining: dict[type[Trigger], tuple[tuple[int, Policy], ...]] = {}
        self.namespaces: dict[str, NamespaceView] = {}
        self.scope: dict[tuple[int, str, str], bool] = {}

    def _in_scope(self, index: int, match: Match, namespace: NamespaceView, kind: str) -> bool:
        known = self.namespaces.setdefault(namespace.name, namespace)
        if known is not namespace and known != namespace:  # another view under the same name: not cached
            return _in_scope(match, namespace, kind)
        key = (index, namespace.name, kind)
        hit = self.scope.get(key)
        if hit is None:
            hit = self.scope[key] = _in_scope(match, namespace, kind)
        return hit

    def governing(self, trigger: type[Trigger], workload: Workload, pods: Sequence[PodView]) -> Policy | None:
        """As `governing`: the first policy defining `trigger` whose match holds for every pod."""
        namespace = workload.namespace
        policy = None
        defining = self.defining.get(trigger)
        if defining is None:
            defining = self.defining[trigger] = tuple(
                (i, p) for i, p in enumerate(self.policies) if p.trigger(trigger) is not None)
        for index, candidate in defining:
            if pods:  # the match of every pod must hold (none to judge: nothing to hold)
                match = candidate.match
                if not self._in_scope(index, match, namespace, workload.kind):
                    continue
                selector = match.pod_selector
                if (selector.match_labels or selector.match_expressions) and not all(
                        selector.matches(pod.labels) for pod in pods):
                    continue
            policy = candidate
            break
        if policy is None or (policy.lifecycle.honour_opt_out and workload.opted_out is not None):
            return None
        return policy


    def of_object(self, trigger: type[Trigger], workload: Workload) -> Policy | None:
        """The first policy defining `trigger` that selects `workload` by what it has without pods
        (namespaces, namespace selector, kinds). A pod selector selects pods: one with terms selects
        a workload if it has pods and every one matches; with none, whether it would is not known, so
        no policy governs it (a later one would bypass an exemption written by pod labels)."""
        for index, candidate in enumerate(self.policies):
            match = candidate.match
            if candidate.trigger(trigger) is None or not self._in_scope(index, match, workload.namespace,
                                                                         workload.kind):
                continue
            selector = match.pod_selector
            if (selector.match_labels or selector.match_expressions) and not workload.pods:
                return None  # whether it would select the pods to come is not known: no later policy either
            if (selector.match_labels or selector.match_expressions) and not all(
                    selector.matches(p.labels) for p in workload.pods):
                continue
            if candidate.lifecycle.honour_opt_out and workload.opted_out is not None:
                return None
            return candidate
        return None
