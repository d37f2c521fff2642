"""One click on a warning's button, handled top-down: read fresh, judge, write, answer, record.

The receivers (janitor/act/slack_inbound.py) hand each genuine payload here. The workload is read
from the apiserver when the click arrives (never from the cache), who pressed is matched against
its owner (and the admins named in `--slack-admin-users`), and `decide.clicks.judge` says what may
change. A keep writes `janitor/keep-until`, a release `janitor/release`, each guarded by the
resourceVersion read and announced by an Event; the message is then edited in place ("Kept until
... by @alice"), a "Why?" is answered in the message's thread, and a refusal is shown only to the
one who pressed. Every click is one audit line and one count in `janitor_slack_clicks_total`.
A release wakes the daemon, which acts on it at once, through the rails, in a cycle of its own.
"""

from __future__ import annotations

import datetime
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from kubernetes.client import ApiClient

from janitor import annotations as ann
from janitor import errors
from janitor.act import kube
from janitor.act.slack import Slack
from janitor.act.slack_messages import slack_date, with_deadline
from janitor.decide import clicks
from janitor.decide.clicks import ButtonValue, Op, Outcome, Presser, Verdict
from janitor.decide.model import ObjectView
from janitor.decide.owners import OwnerKind, find_owner
from janitor.observe import cluster, views
from janitor.observe.claims import CLAIMS
from janitor.policy.model import Policy
from janitor.settings import Settings
from janitor.telemetry import AUDIT, Telemetry

logger = logging.getLogger(__name__)

EVENTS = {Op.KEEP: "KeptFromSlack", Op.RELEASE: "ReleasedFromSlack"}


class Clicks:
    """Handles the clicks of one daemon; thread-safe (each click reads and writes on its own)."""

    def __init__(self, api: ApiClient, slack: Slack, settings: Settings, policies: Callable[[], Sequence[Policy]],
                 metrics: Telemetry, wake: Callable[[], None],
                 clock: Callable[[], datetime.datetime] = lambda: datetime.datetime.now(datetime.timezone.utc)) -> None:
        self._api, self._slack, self._settings = api, slack, settings
        self._policies, self._metrics, self._wake, self._clock = policies, metrics, wake, clock
        # The kinds a warning can name: those of --kinds, and DRA claims (an orphanedClaim policy's).
        self._kinds = {k.kind: k for k in (CLAIMS, *settings.cluster.kinds)}

    def refused(self, why: str) -> None:
        """A request that was not a genuine click (forged, stale signature, replayed)."""
        self._metrics.clicks.labels(button="unknown", outcome=why).inc()
        AUDIT.warning("Slack request refused: %s", why, extra={"audit": True, "click": True, "outcome": why})

    def handle(self, payload: Mapping[str, Any]) -> None:
        if payload.get("type") != "block_actions":
            return
        user = str((payload.get("user") or {}).get("id") or "")
        container = payload.get("container") or {}
        channel = str(container.get("channel_id") or (payload.get("channel") or {}).get("id") or "")
        ts = str(container.get("message_ts") or "")
        message = payload.get("message") or {}
        for action in payload.get("actions") or ():
            button = clicks.BUTTONS.get(str(action.get("action_id")))
            value = ButtonValue.decode(str(action.get("value") or ""))
            if button is None or value is None:
                continue  # not the janitor's button
            verdict = self._judge(button, value, user)
            self._answer(verdict, value, user, channel, ts, message, str(action.get("block_id") or ""))
            self._record(verdict, value, user)
            if verdict.op is Op.RELEASE and verdict.outcome is Outcome.DONE:
                self._wake()

    def _judge(self, button: tuple[Op, int], value: ButtonValue, user: str) -> Verdict:
        op, days = button
        kind = self._kinds.get(value.kind)
        if kind is None:
            return Verdict(op, Outcome.STALE, f"{value}: the janitor no longer looks after {value.kind}s.")
        try:
            view = cluster.read_by_name(self._api, kind, value.namespace, value.name)
            raw, _ = cluster.read_item(self._api, views.NAMESPACES, None, value.namespace) if value.namespace \
                else (None, "")
        except errors.KubeError as err:
            return Verdict(op, Outcome.FAILED, f"{value} could not be read ({err}); nothing changed, try again.")
        namespace = views.namespace_view(raw) if raw is not None else None
        try:
            parent = self._cronjob_of(view)
        except errors.KubeError as err:
            return Verdict(op, Outcome.FAILED, f"{value}'s CronJob could not be read ({err}); nothing changed, try "
                                               "again.")
        owner = find_owner(view, namespace, self._settings.cluster.owner_keys, parent=parent)
        theirs = self._slack.is_owner(owner, user)
        channel = owner.kind is OwnerKind.CHANNEL
        presser = Presser(user, theirs and not channel, user in self._settings.slack.admin_users, theirs and channel)
        mark = ann.read_mark(view.annotations, view.foreign_marks) if view is not None else None
        policy = next((p for p in self._policies() if mark is not None and p.name == mark.policy), None)
        verdict = clicks.judge(op, days, value, view, presser, owner, policy, self._clock(),
                               members_release=self._settings.slack.members_release)
        if not verdict.annotations or view is None:
            return verdict
        try:
            kube.annotate(self._api, view.ref, view.resource_version, verdict.annotations, kind=kind,
                          event=(EVENTS[op], f"{verdict.said} (Slack)".replace("<@", "@").replace(">", "")))
        except errors.Conflict:
            return Verdict(op, Outcome.FAILED, f"{value} changed while this was being done; nothing changed, "
                                               "press again.")
        except errors.KubeError as err:
            return Verdict(op, Outcome.FAILED, f"{value} could not be changed ({err}); nothing changed.")
        return verdict

    def _cronjob_of(self, view: ObjectView | None) -> ObjectView | None:
        """The CronJob of a Job: its owner annotation names the Job's owner too (the lifecycle warned them)."""
        controller = view.controller if view is not None else None
        kind = self._kinds.get("CronJob")
        if view is None or controller is None or controller.kind != "CronJob" or view.ref.kind != "Job" or kind is None:
            return None
        found = cluster.read_by_name(self._api, kind, view.ref.namespace, controller.name)
        return found if found is not None and found.ref.uid == controller.uid else None

    def _answer(self, verdict: Verdict, value: ButtonValue, user: str, channel: str, ts: str,
                message: Mapping[str, Any], block_id: str) -> None:
        if verdict.outcome is not Outcome.DONE:
            self._slack.tell(channel, user, verdict.said)
        elif verdict.op is Op.WHY:
            self._slack.reply(channel, ts, f"*Why {value}:* {verdict.said}")
        else:
            said = verdict.said
            if verdict.until is not None:  # the reader's own time zone: "kept until Thu 18:00 by @alice"
                capped = " (the policy's cap)" if verdict.capped else ""
                said = f"Kept until {slack_date(verdict.until)}{capped} by <@{user}>"
            blocks = [dict(b) for b in message.get("blocks") or ()]
            if verdict.deadline is not None:  # what the message says happens when, as it is now
                blocks = with_deadline(blocks, block_id, verdict.deadline, self._clock())
            done = {"type": "context", "block_id": block_id,
                    "elements": [{"type": "mrkdwn", "text": f":white_check_mark: {said}"}]}
            blocks = [done if b.get("block_id") == block_id and b.get("type") == "actions" else b for b in blocks]
            self._slack.update(channel, ts, blocks, str(message.get("text") or verdict.said))

    def _record(self, verdict: Verdict, value: ButtonValue, user: str) -> None:
        self._metrics.clicks.labels(button=str(verdict.op), outcome=str(verdict.outcome)).inc()
        AUDIT.info("Slack %s on %s by %s: %s", verdict.op, value, user, verdict.outcome,
                   extra={"audit": True, "click": True, "button": str(verdict.op), "object": str(value),
                          "uid": value.uid, "user": user, "outcome": str(verdict.outcome), "said": verdict.said,
                          "until": ann.format_expires(verdict.until) if verdict.until else None})
