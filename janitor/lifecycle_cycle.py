"""The imperative half of the idle lifecycle: write marks, send digests, record deliveries, and
re-check a due workload on fresh data right before it is reclaimed.

Order within a cycle is what makes crashes harmless: an intent is written on the workload before
its message goes out, and the delivery (Slack's timestamp) after; a cycle that finds an intent
without a delivery asks Slack before sending again. Every write carries the uid and
resourceVersion of the read that decided it. Unsent digests are not kept in memory: the intents
on the workloads are the queue, so a restart or a leader change loses and repeats nothing.
"""

from __future__ import annotations

import datetime
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from kubernetes.client import ApiClient

from janitor import annotations, errors
from janitor.act import kube
from janitor.act.slack import Digest, Outbox, SendResult, Slack, SlackUnavailable
from janitor.act.slack_messages import render_digest
from janitor.decide import lifecycle
from janitor.decide.idle import Idleness
from janitor.decide.lifecycle import Change, Step
from janitor.decide.model import Action, ObjectView, ResourceKind
from janitor.decide.owners import Owner
from janitor.decide.workloads import starting_pod
from janitor.observe import cluster
from janitor.policy.model import Policy
from janitor.settings import Settings
from janitor.shadow_cycle import ShadowReport

logger = logging.getLogger(__name__)

_EVENTS = {
    Step.MARK: "IdleMarked",
    Step.UNMARK: "IdleUnmarked",
    Step.EXTEND: "IdleDeadlineMoved",
}


@dataclass
class LifecycleOutcome:
    """What the lifecycle did this cycle, for logs, metrics and tests."""

    written: dict[str, int] = field(default_factory=dict)  # step -> successful writes
    failed: list[str] = field(default_factory=list)
    sent: list[SendResult] = field(default_factory=list)
    recovered: int = 0  # sends found on Slack after a crash, recorded without sending again
    unsent: int = 0  # digests left for the next cycle (time budget spent)


def _decided_on(notes: Mapping[str, str]) -> dict[str, str]:
    """The annotations a lifecycle decision reads: if these are unchanged, so is the decision."""
    keys = (*lifecycle.MARK_KEYS, annotations.KEEP_UNTIL, annotations.OPT_OUT, annotations.TTL)
    return {k: notes[k] for k in keys if k in notes}


class LifecycleRunner:
    def __init__(self, api: ApiClient, settings: Settings, kinds: Mapping[str, ResourceKind],
                 slack: Slack | None) -> None:
        self.api = api
        self.settings = settings
        self.kinds = kinds
        self.slack = slack
        self.fence: Callable[[], bool] = lambda: True  # False once another replica may be leader
        # uid -> the annotations the plan was made on, plus this cycle's own writes so far
        self._expected: dict[str, dict[str, str]] = {}

    # -- marks, messages, records ---------------------------------------------------------------
    def run(self, plan: lifecycle.LifecyclePlan, done: Sequence[tuple[Change, kube.ActionResult]],
            policies: Sequence[Policy], now: datetime.datetime,
            seen: Mapping[str, Mapping[str, str]]) -> LifecycleOutcome:
        """`seen` are the annotations (by uid) the plan was made on."""
        out = LifecycleOutcome()
        if self.settings.rails.dry_run:
            for change in plan.changes:
                if change.step not in (Step.WAIT, Step.ACT):
                    logger.info("DRY-RUN lifecycle %s %s: %s", change.step, change.workload, change.why)
            return out
        by_policy = {p.name: p for p in policies}
        self._expected = {uid: dict(notes) for uid, notes in seen.items()}
        rv: dict[str, str] = {}
        to_send: list[Change] = []
        for change in plan.changes:
            if change.step is Step.RECOVER:
                again = self._recover(change, by_policy, now, out)
                if again is None:
                    continue
                change = again
            if change.step in (Step.MARK, Step.UNMARK, Step.EXTEND, Step.NOTIFY) and change.annotations:
                if not self._write(change, change.resource_version, rv, out, event=_EVENTS.get(change.step)):
                    continue
            if change.notice is not None and change.step is not Step.ACT:  # "done" only once it is done
                to_send.append(change)
        for change, result in done:
            if result.outcome is kube.Outcome.DONE and change.notice is not None:
                to_send.append(change)
        if not to_send:
            return out
        if self.slack is None:
            logger.warning("%d lifecycle messages not sent: no Slack token configured (--slack-token); "
                           "nothing is reclaimed without a delivered warning", len(to_send))
            return out
        self._send(to_send, by_policy, rv, now, out)
        return out

    def _write(self, change: Change, resource_version: str, rv: dict[str, str], out: LifecycleOutcome,
               *, event: str | None = None, notes: Mapping[str, str | None] | None = None) -> bool:
        """One guarded annotation write. A conflict re-reads the object: if none of the annotations
        the decision read has changed (a controller only updated its status), the same decision
        holds and is written on the fresh resourceVersion; otherwise it waits for the next cycle."""
        ref = change.workload
        if not self.fence():
            out.failed.append(f"{change.step} {ref}: not written, no longer the leader")
            return False
        patch = notes if notes is not None else change.annotations
        current = rv.get(ref.uid, resource_version)
        for attempt in range(2):
            try:
                rv[ref.uid] = kube.annotate(self.api, ref, current, patch, kind=self.kinds[ref.kind],
                                            event=(event, change.why) if event else None)
                break
            except errors.Conflict as e:
                fresh = cluster.read_object(self.api, ref, self.kinds[ref.kind]) if attempt == 0 else None
                expected = self._expected.get(ref.uid)
                if fresh is None or expected is None or _decided_on(fresh.annotations) != _decided_on(expected):
                    return self._failed(change, out, e)
                current = fresh.resource_version
            except errors.KubeError as e:
                return self._failed(change, out, e)
        expected = self._expected.setdefault(ref.uid, {})
        for key, value in patch.items():
            if value is None:
                expected.pop(key, None)
            else:
                expected[key] = value
        out.written[str(change.step)] = out.written.get(str(change.step), 0) + 1
        logger.info("lifecycle %s %s: %s", change.step, ref, change.why,
                    extra={"object": str(ref), "policy": change.policy, "step": str(change.step)})
        return True

    @staticmethod
    def _failed(change: Change, out: LifecycleOutcome, error: errors.KubeError) -> bool:
        logger.warning("lifecycle %s %s not written: %s", change.step, change.workload, error)
        out.failed.append(f"{change.step} {change.workload}: {error}")
        return False

    def _recover(self, change: Change, by_policy: Mapping[str, Policy], now: datetime.datetime,
                 out: LifecycleOutcome) -> Change | None:
        """Record a send Slack already has, or return the change to send again (None: not now)."""
        assert change.intent is not None and change.notice is not None
        if self.slack is None:
            return None
        try:
            found = self.slack.find_sent(change.notice.owner, change.intent.id,
                                         since=change.intent.at - datetime.timedelta(minutes=5))
        except SlackUnavailable as e:
            logger.warning("cannot ask Slack whether the %s for %s arrived: %s; not sending again yet",
                           change.intent.kind, change.workload, e)
            return None
        if found is not None:
            record = lifecycle.delivered(change, found, by_policy.get(change.policy))
            if self._write(change, change.resource_version, {}, out, notes=record):
                out.recovered += 1
            return None
        if now - change.intent.at < self.settings.notice_retry:
            return None  # the last attempt was recent: Slack is not asked to fail again yet
        return lifecycle.resend(change, now)

    def _send(self, changes: Sequence[Change], by_policy: Mapping[str, Policy], rv: dict[str, str],
              now: datetime.datetime, out: LifecycleOutcome) -> None:
        assert self.slack is not None
        grouped: dict[str, tuple[Owner, list[Change]]] = {}
        for change in changes:
            assert change.notice is not None
            grouped.setdefault(str(change.notice.owner), (change.notice.owner, []))[1].append(change)
        outbox = Outbox(self.slack)
        by_intent: dict[str, list[Change]] = {}
        for owner, members in grouped.values():
            notices = tuple(c.notice for c in members if c.notice is not None)
            intent = lifecycle.intent_id(owner, now)
            outbox.add(Digest(owner, notices, intent, tuple(render_digest(notices, now))))
            by_intent[intent] = members
        if not self.fence():  # the intents are on the workloads: the new leader sends (after asking Slack)
            return
        results = outbox.flush(self.settings.send_budget.total_seconds())
        out.unsent += outbox.pending
        for result in results:
            out.sent.append(result)
            if result.delivery is None:
                logger.warning("message to %s not delivered: %s", result.digest.owner, result.error)
                continue
            for change in by_intent[result.digest.intent]:
                # An intent to settle: only marks and notices carry one (an unmark may clear a stale one,
                # and its "cancelled" note must not write warning records back onto the workload).
                if change.step in (Step.MARK, Step.NOTIFY) and change.annotations.get(annotations.NOTICE):
                    self._write(change, change.resource_version, rv, out,
                                notes=lifecycle.delivered(change, result.delivery, by_policy.get(change.policy)))

    # -- the re-check right before acting -------------------------------------------------------
    def recheck(self, action: Action, idle: Callable[[str], ShadowReport], policies: Sequence[Policy],
                objects: Mapping[str, ObjectView], now: datetime.datetime) -> tuple[Action | None, str]:
        """The action again on fresh data, or None and why not: the workload is re-read, its
        pods listed and the evidence queried again, under the policies in force now."""
        kind = self.kinds[action.target.kind]
        fresh = cluster.read_object(self.api, action.target, kind)
        if fresh is None:
            return None, "gone or recreated before acting"
        report = idle(action.target.namespace or "")
        # A stuck-Pending workload is nothing but starting pods; for the other triggers one means "in use".
        if action.evidence.get("trigger") != "pending":
            starting = starting_pod(report.pods, fresh, objects, cronjob_mode=self.settings.cronjob_target)
            if starting is not None:
                return None, f"pod {starting.ref.name} is starting ({starting.phase}): in use again"
        findings = [f for f in report.findings if f.workload is not None and f.workload.uid == fresh.ref.uid]
        if not any(f.idleness is Idleness.IDLE for f in findings):
            why = findings[0].why if findings else "no enforcing policy covers it now"
            return None, f"not idle on a fresh look: {why}"
        plan = lifecycle.plan_lifecycle(findings, {fresh.ref.uid: fresh}, policies, now,
                                        self.settings.lifecycle, report.namespaces, self.settings.owner_keys)
        again = next((c for c in plan.changes if c.step is Step.ACT and c.action is not None), None)
        if again is None or again.action is None or again.action.type is not action.type:
            steps = ", ".join(f"{c.step}: {c.why}" for c in plan.changes) or "nothing"
            return None, f"no longer due on a fresh read ({steps})"
        return again.action, "still idle and due"



@dataclass(frozen=True)
class Unmarked:
    ref: str
    policy: str
    result: str  # "removed", "would remove" or why not


def unmark(api: ApiClient, settings: Settings, *, policy: str | None = None, dry_run: bool = False) -> list[Unmarked]:
    """Remove the janitor's own marks (all, or one policy's): for uninstalling, and for mistakes.

    Only marks are touched (`janitor/policy` present); a user's own `janitor/expires` and their
    `janitor/keep-until` stay. Each write is guarded by the resourceVersion it was read at."""
    snapshot = cluster.read_snapshot(api, settings.kinds, page_size=settings.page_size,
                                     namespaces=settings.namespaces)
    kinds = {k.kind: k for k in settings.kinds}
    done: list[Unmarked] = []
    for obj in snapshot.objects:
        mark = obj.annotations.get(annotations.POLICY)
        if mark is None or (policy is not None and mark != policy):
            continue
        notes = {k: None for k in lifecycle.MARK_KEYS if k in obj.annotations}
        if dry_run:
            done.append(Unmarked(str(obj.ref), mark, "would remove"))
            continue
        try:
            kube.annotate(api, obj.ref, obj.resource_version, notes, kind=kinds[obj.ref.kind],
                          event=("IdleUnmarked", f"mark of policy {mark} removed by `janitor unmark`"))
        except errors.KubeError as e:
            done.append(Unmarked(str(obj.ref), mark, f"not removed: {e}"))
            continue
        done.append(Unmarked(str(obj.ref), mark, "removed"))
    return done
