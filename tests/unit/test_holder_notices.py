"""Owners of deleted pods whose processes hold GPUs: told once, and only on the agent's trusted word.

Aspects covered (a review of the first version found each of them):
- the agent's word is taken as the D-state proofs take it: a message without the agent's run, or
  whose last scan is older than the janitor accepts, tells no one and joins no ghost; nor does an
  entry naming a pod the API lists alive, or on another node;
- `told.json` that cannot be read (a time without its zone, any depth of nesting) raises nothing
  and tells once: the record is written anew;
- a send whose answer did not come is not sent again before the retry time, then only when Slack
  has no message of its intent;
- a holder missing from one cycle (an agent restarting) is not told again when it comes back,
  however long ago it was told;
- sends stop when the budget is spent, and what was sent is recorded.
"""

from __future__ import annotations

import datetime
import json
from typing import Any

from test_node_agent_sight import NOW
from test_node_gpu_holders import GONE, LIVE, held_on

from janitor import node_report
from janitor.act import holder_notices as act
from janitor.act.slack import Digest, SendResult
from janitor.act.slack_messages import MessageContext
from janitor.annotations import Delivery
from janitor.decide.holder_notices import HolderNotice, believed, holder_notices
from janitor.decide.model import NamespaceView, ObjectRef, Observation, PodState, PodView, SafetyLedger
from janitor.decide.owners import Owner, OwnerKind
from janitor.decide.plan import plan
from janitor.observe import views

ALICE = Owner(OwnerKind.EMAIL, "alice@lab.example")
M = datetime.timedelta(minutes=1)


class Store:
    def __init__(self, text: str | None = None) -> None:
        self.text, self.writes = text, 0

    def read(self) -> tuple[str | None, str | None]:
        return self.text, str(self.writes)

    def write(self, text: str, version: str | None) -> str | None:
        self.text, self.writes = text, self.writes + 1
        return str(self.writes)


class Slack:
    def __init__(self, delivers: bool = True) -> None:
        self.sent: list[Digest] = []
        self.delivers = delivers

    def send(self, digest: Digest) -> SendResult:
        self.sent.append(digest)
        if not self.delivers:
            return SendResult(digest, None, "cannot reach Slack: timed out")
        return SendResult(digest, Delivery("D1", f"{len(self.sent)}.0"))


def held(uid: str = GONE, namespace: str = "ml", name: str = "train-7f9") -> node_report.HeldGpu:
    return node_report.HeldGpu(3, "0000:3b:00.0", 4121, "S", NOW - 40 * M, uid, namespace, name, "python")


def notice(uid: str = GONE, node: str = "gpu-7") -> HolderNotice:
    [made] = holder_notices(believed([views.node_info(held_on(node, held(uid)))], [], NOW), {"ml": ALICE})
    return made


def cycle(pods: tuple[PodView, ...] = (), **condition: Any) -> tuple[HolderNotice, ...]:
    observation = Observation(NOW, pods=pods, namespaces={
        "ml": NamespaceView("ml", annotations={"owner": "alice@lab.example"}),
        "finance": NamespaceView("finance", annotations={"owner": "#finance"})},
        nodes=(views.node_info(held_on("gpu-7", *(condition.pop("entries", None) or [held()]), **condition)),))
    return plan(observation, [], SafetyLedger(), NOW).holder_notices


def test_only_a_fresh_report_of_an_agent_that_sees_is_believed() -> None:
    assert len(cycle()) == 1
    assert cycle(run=False) == ()  # an older agent, or a hand-written message: no run, no proof
    assert cycle(scanned=NOW - 40 * 24 * 60 * M) == ()  # an agent fallen silent while its condition stayed True
    assert cycle(scanned=NOW - 3 * M) == ()  # past what a force delete accepts (2 minutes)
    assert cycle(sees=0) == ()  # it sees no other pod's processes


def test_an_entry_naming_a_pod_listed_alive_or_on_another_node_is_not_believed() -> None:
    def listed(node: str, deleting: bool) -> PodView:
        return PodView(ObjectRef("Pod", "v1", "finance", "ledger-0", LIVE), "7", {}, None, node, "Running", None, 0,
                       state=PodState(), deleting=deleting)

    entry = [held(LIVE, "finance", "ledger-0")]
    assert cycle((listed("gpu-7", deleting=False),), entries=entry) == ()
    assert cycle((listed("gpu-3", deleting=True),), entries=entry) == ()
    [told] = cycle((listed("gpu-7", deleting=True),), entries=entry)  # Terminating there: believed
    assert (told.owner.kind, told.owner.value) == (OwnerKind.CHANNEL, "#finance")


def test_an_unreadable_record_raises_nothing_and_tells_once() -> None:
    for bad in (json.dumps({"gpu-1/old": {"told": "2024-01-01T00:00:00", "tried": "2024-01-01T00:00:00",
                                         "seen": "2024-01-01T00:00:00"}}),
                json.dumps({"gpu-1/old": "2024-01-01T00:00:00"}), "[" * 200_000, "{"):
        store, slack = Store(bad), Slack()
        for minute in range(2):
            act.tell([notice()], store, slack, NOW + minute * M, MessageContext())
        assert len(slack.sent) == 1 and store.writes == 1


def test_a_send_whose_answer_was_lost_waits_and_is_looked_for_before_it_is_sent_again() -> None:
    store, lost = Store(), Slack(delivers=False)
    for minute in range(3):
        act.tell([notice()], store, lost, NOW + minute * M, MessageContext(), retry=5 * M)
    assert len(lost.sent) == 1  # tried once; not again within the retry time
    asked: list[tuple[str, datetime.datetime]] = []

    def on_slack(owner: Owner, sent: str, since: datetime.datetime) -> Delivery | None:
        asked.append((sent, since))
        return Delivery("D1", "1.0")  # it was posted after all

    slack = Slack()
    act.tell([notice()], store, slack, NOW + 6 * M, MessageContext(), retry=5 * M, find=on_slack)
    assert slack.sent == [] and asked == [(act.intent(notice()), NOW - 5 * M)]
    act.tell([notice()], store, slack, NOW + 60 * M, MessageContext(), retry=5 * M, find=on_slack)
    assert slack.sent == [] and len(asked) == 1  # recorded as told


def test_a_holder_missing_from_one_cycle_is_not_told_again() -> None:
    a, b = notice(), notice(LIVE, node="gpu-8")
    long_ago = NOW - 31 * 24 * 60 * M
    store = Store(json.dumps({a.key: {"told": long_ago.isoformat(), "tried": long_ago.isoformat(),
                                      "seen": (NOW - 60 * M).isoformat()}}))
    slack = Slack()
    act.tell([b], store, slack, NOW, MessageContext())  # gpu-7's agent restarting: its holder not reported
    act.tell([a, b], store, slack, NOW + M, MessageContext())
    assert [d.intent for d in slack.sent] == [act.intent(b)]
    kept = json.loads(store.text or "{}")
    assert set(kept) == {a.key, b.key}
    act.tell([b], store, slack, NOW + 31 * 24 * 60 * M, MessageContext())  # a not reported for 30 days: forgotten
    assert set(json.loads(store.text or "{}")) == {b.key}


class SlowSlack(Slack):
    """Each send takes 15 s of its clock."""

    def __init__(self) -> None:
        super().__init__()
        self.seconds = 0.0

    def send(self, digest: Digest) -> SendResult:
        self.seconds += 15
        return super().send(digest)


def test_sends_stop_when_the_budget_is_spent_and_what_was_sent_is_recorded() -> None:
    notices = [notice(f"{i:08d}-0000-4000-8000-000000000000", node=f"gpu-{i}") for i in range(5)]
    store, slack = Store(), SlowSlack()
    assert act.tell(notices, store, slack, NOW, MessageContext(), budget=20, clock=lambda: slack.seconds) == 2
    assert set(json.loads(store.text or "{}")) == {n.key for n in notices[:2]}
