"""One cycle's decision: from a snapshot of the cluster to the actions to take, and why.

`plan` only combines: it gates objects the janitor must not touch (being deleted, protected
namespaces, opted out), asks each trigger for its verdicts, keeps one deletion per object, and
hands the deletions to the rails. It reads no clock: the caller passes its own time, and the
apiserver's time from the snapshot is what deadlines are compared with.
"""

from __future__ import annotations

import datetime
from collections.abc import Sequence

from janitor import annotations
from janitor.decide import expiry
from janitor.decide.model import (
    Action,
    ActionType,
    ClusterSnapshot,
    ObjectView,
    Outcome,
    Plan,
    SafetyLedger,
    Verdict,
)
from janitor.decide.rails import Rails, apply_rails, clock_skew


def gate(obj: ObjectView, rails: Rails) -> Verdict | None:
    """Why the janitor must leave `obj` alone whatever its annotations say, if it must."""
    if obj.deleting:
        return Verdict(obj.ref, "rails", Outcome.SKIP, "already being deleted")
    namespace = obj.ref.name if obj.ref.kind == "Namespace" else obj.ref.namespace
    if namespace in rails.protected_namespaces:
        return Verdict(obj.ref, "rails", Outcome.SKIP, f"namespace {namespace} is protected")
    opted_out = obj.annotations.get(annotations.OPT_OUT, "").strip().lower() == "true"
    if opted_out and rails.honour_opt_out:
        return Verdict(obj.ref, "rails", Outcome.SKIP, f"opted out ({annotations.OPT_OUT}: true)")
    return None


def _deadline_order(pair: tuple[Action, Verdict]) -> tuple[datetime.datetime, str]:
    action, verdict = pair
    return verdict.deadline or datetime.datetime.max.replace(tzinfo=datetime.timezone.utc), str(action.target)


def plan(
    snapshot: ClusterSnapshot, ledger: SafetyLedger, rails: Rails, *, local_now: datetime.datetime,
    reclaims: Sequence[Action] = (),
) -> Plan:
    """`reclaims` are the idle lifecycle's due actions (decide/lifecycle.py): they go through the
    same rails as the expiry deletions, after them, and count against the same caps."""
    now = snapshot.apiserver_time or local_now
    by_uid = {o.ref.uid: o for o in snapshot.objects}
    verdicts: list[Verdict] = []
    reports: list[Action] = []
    deletions: dict[str, tuple[Action, Verdict]] = {}
    for obj in snapshot.objects:
        skipped = gate(obj, rails)
        if skipped is not None:
            verdicts.append(skipped)
            continue
        for verdict, action in expiry.evaluate(obj, now, by_uid):
            verdicts.append(verdict)
            if action is None:
                continue
            if action.type is ActionType.REPORT:
                reports.append(action)
            elif obj.ref.uid not in deletions or _deadline_order((action, verdict)) < _deadline_order(
                deletions[obj.ref.uid]
            ):
                deletions[obj.ref.uid] = (action, verdict)  # one deletion per object: the earliest rule

    candidates = [action for action, _ in sorted(deletions.values(), key=_deadline_order)]
    candidates += [a for a in reclaims if a.target.uid not in deletions]
    railed = apply_rails(candidates, ledger, rails, now=now, skew=clock_skew(local_now, snapshot.apiserver_time))
    notices = list(railed.notices)
    if snapshot.skipped_kinds:
        notices.append(
            "not listed: " + ", ".join(f"{s.kind} ({s.reason})" for s in snapshot.skipped_kinds)
        )
    return Plan(
        now=now,
        actions=tuple(_dedupe(reports)) + railed.allowed,
        held=railed.held,
        verdicts=tuple(verdicts),
        ledger=railed.ledger,
        notices=tuple(notices),
        tripped_now=railed.tripped_now,
    )


def _dedupe(reports: list[Action]) -> list[Action]:
    """Several pods inheriting one template produce one report on their controller."""
    merged: dict[str, Action] = {}
    for action in reports:
        previous = merged.get(action.target.uid)
        if previous is None:
            merged[action.target.uid] = action
        elif action.report_key and previous.report_key and action.report_key not in previous.report_key:
            lines = set(previous.report_key.splitlines()) | set(action.report_key.splitlines())
            merged[action.target.uid] = Action(
                previous.type, previous.target, previous.resource_version, previous.rule, previous.reason,
                f"{previous.why} {action.why}", previous.evidence, "\n".join(sorted(lines)),
            )
    return list(merged.values())
