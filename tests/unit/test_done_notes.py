"""The "done" note of a lifecycle action: kept before the change, and sent only on evidence it held.

The executor keeps the note before it acts (act/executor.py) and forgets it when the change did
not happen; a note left in notes.json is weighed again by a later cycle (act/notes.py,
act/lifecycle.py). These tests follow a note through the ways an action can end badly.

Aspects covered:
- a DELETE or a suspend that reached the apiserver and may have been applied, its answer lost
  (a timeout, a reset, a 5xx): the note is kept, for the next cycle's evidence to decide;
- a "done: deleted" note whose DELETE failed, and whose forget was lost (the lease lapsed, the
  store failed, the janitor died), is never sent once the mark goes without the delete: neither
  when the lifecycle unmarks the busy workload nor when an admin runs `janitor unmark`.
"""

from __future__ import annotations

import datetime
from typing import Any

import pytest
from factories import NOW, ago
from test_act_executor import World, reclaim
from test_act_lifecycle import ALICE, Cluster, Slack, decide, marked
from test_act_notes import Store, cycle

from janitor import annotations as a
from janitor import errors
from janitor.act import kube
from janitor.act.kube import Outcome
from janitor.decide.consent import intent_id
from janitor.decide.lifecycle import Step
from janitor.decide.model import ActionType, ResourceKind, State

JOBS = ResourceKind("batch", "v1", "Job", "jobs")
H = datetime.timedelta(hours=1)


@pytest.mark.parametrize("kind", [ActionType.DELETE, ActionType.SUSPEND])
def test_a_done_note_is_kept_when_the_write_may_have_happened(monkeypatch: pytest.MonkeyPatch,
                                                               kind: ActionType) -> None:
    """The write reaches the apiserver and is applied; its answer never comes (a read timeout:
    a ServerError, so the outcome is FAILED). Forgetting the note would leave the owner untold;
    kept, the next cycle sends it only on evidence."""
    applied: list[str] = []

    def call(api: Any, method: str, path: str, *, body: Any = None, content_type: str = "",
             dry_run: bool = False, doing: str = "", field_manager: str = "") -> dict[str, Any]:
        probe = dry_run or "All" in ((body or {}).get("dryRun") or [])
        if method in ("DELETE", "PATCH") and not probe:
            applied.append(f"{method} {path}")  # the apiserver did it ...
            raise errors.ServerError("read timed out", status=None, doing=doing)  # ... the answer never came
        return {}

    monkeypatch.setattr(kube, "_call", call)
    act, change = reclaim("train", kind)
    world = World(act, changes=(change,))
    world.cluster.apply = lambda x: kube.apply(None, x, kind=JOBS)  # type: ignore[method-assign]
    assert world.run() == [("train", Outcome.FAILED)]
    assert applied, "the write reached the apiserver"
    assert len(world.store.ledger.deletions) == 1  # the ledger kept its record
    assert [k[0] for k in world.notes.kept] == ["train"], "the 'done' note was forgotten after an ambiguous failure"


@pytest.mark.parametrize("unmarked_by", ["lifecycle", "janitor unmark"])
def test_a_done_note_whose_delete_did_not_happen_is_not_sent_after_an_unmark(unmarked_by: str) -> None:
    cluster = Cluster()
    cluster.add("train", marked("train", ago(hours=30), ago(hours=30)))
    store = Store(cluster)
    # The deadline cycle, as the executor runs it: the note kept, the DELETE fails (a 5xx), the note
    # forgotten in memory only; then the lease lapses, so the notes are not stored at the end and the
    # forget is never written (likewise when that write fails, or the janitor dies).
    box = store.box()
    act = decide(cluster).only(Step.ACT)
    assert act.notice is not None
    intent = intent_id(ALICE, NOW)
    assert box.expect(act.notice, intent, cluster.notes("train")[a.MARKED_AT], NOW) == ""
    box.forget(act.workload, intent)
    # Between cycles or in the next one, the mark goes without the delete having happened.
    if unmarked_by == "janitor unmark":
        cluster.update("train", dict.fromkeys(a.mark_keys_on(cluster.notes("train"))))  # as janitor/unmark.py writes
    # else: busy again, so the next cycle's lifecycle unmarks it (and says "cancelled")
    up = Slack(cluster)
    cycle(cluster, up, store, now=NOW + H, states={"train": State.CLEAR})
    assert "uid-train" in cluster.objects  # the Job was never deleted
    said = " ".join(m.text for d in up.sent for m in d.messages)
    assert "deleted" not in said, said
