"""The `janitor/why` annotation: a mark's reason as data, read back without parsing words.

Aspects covered:
- a note survives encode -> parse unchanged, with every field of version 1 under its JSON name;
- it stays within MAX_BYTES however long the words are (they are cut, marked with an ellipsis),
  also for words in non-ASCII characters (the bound is bytes of UTF-8);
- what is not a note (not JSON, another shape, a time that does not parse) reads as None, so a
  reader falls back to janitor/reason; unknown fields and facts that are not scalars are ignored;
- `with_changes` moves the deadline, the action and the cap without touching the rest;
- the key is one of the mark's, so `janitor unmark` and the unmark paths remove it.
"""

from __future__ import annotations

import dataclasses
import datetime
import json

import pytest

from janitor import annotations as ann
from janitor.why_note import MAX_BYTES, VERSION, WhyNote

UTC = datetime.timezone.utc
MARKED = datetime.datetime(2026, 11, 23, 12, 0, tzinfo=UTC)
NOTE = WhyNote(policy="idle-gpu", trigger="idleGpu", action="delete", code="all-idle",
               words="GPU 0 peaked at 0 % over the last 2 h",
               facts={"window": "2h", "threshold": 5.0, "signal": "DCGM_FI_DEV_GPU_UTIL", "gpus": 1},
               marked_at=MARKED, deadline=MARKED + datetime.timedelta(hours=24),
               keep_cap=MARKED + datetime.timedelta(days=7), max_extension="7d")


def test_the_key_is_part_of_the_mark() -> None:
    assert ann.WHY == "janitor/why"
    assert ann.WHY in ann.MARK_KEYS and ann.WHY in ann.JANITOR_ONLY_KEYS


def test_a_note_reads_back_as_it_was_written() -> None:
    text = NOTE.encode()
    assert WhyNote.parse(text) == NOTE
    assert json.loads(text) == {
        "version": VERSION, "policy": "idle-gpu", "trigger": "idleGpu", "action": "delete", "code": "all-idle",
        "words": "GPU 0 peaked at 0 % over the last 2 h",
        "facts": {"window": "2h", "threshold": 5.0, "signal": "DCGM_FI_DEV_GPU_UTIL", "gpus": 1},
        "markedAt": "2026-11-23T12:00:00Z", "deadline": "2026-11-24T12:00:00Z",
        "keepCap": "2026-11-30T12:00:00Z", "maxExtension": "7d"}


@pytest.mark.parametrize("words", ["idle " * 2000, "空闲的GPU " * 1000], ids=["ascii", "non-ascii"])
def test_long_words_are_cut_to_fit(words: str) -> None:
    text = dataclasses.replace(NOTE, words=words).encode()
    assert len(text.encode()) <= MAX_BYTES
    read = WhyNote.parse(text)
    assert read is not None and read.words.endswith("…") and words.startswith(read.words[:-1])
    assert read.deadline == NOTE.deadline and read.facts == NOTE.facts  # only the words give way


def test_no_cap_is_written_as_null() -> None:
    note = WhyNote(NOTE.policy, NOTE.trigger, NOTE.action, NOTE.code, NOTE.words, {}, NOTE.marked_at,
                   NOTE.deadline, None, None)
    assert json.loads(note.encode())["keepCap"] is None
    assert WhyNote.parse(note.encode()) == note


@pytest.mark.parametrize("text", [
    "", "idle", "[]", "{}", '{"version": 1}',
    json.dumps({**json.loads(NOTE.encode()), "deadline": "tomorrow"}),
    json.dumps({**json.loads(NOTE.encode()), "markedAt": None}),
    json.dumps({**json.loads(NOTE.encode()), "policy": 7}),
    json.dumps({**json.loads(NOTE.encode()), "version": 0}),
    json.dumps({**json.loads(NOTE.encode()), "version": "1"}),
])
def test_what_is_not_a_note_reads_as_none(text: str) -> None:
    assert WhyNote.parse(text) is None


def test_unknown_fields_and_odd_facts_are_ignored() -> None:
    newer = {**json.loads(NOTE.encode()), "version": 2, "future": {"x": 1},
             "facts": {"window": "2h", "nested": {"a": 1}, "list": [1], "gpus": 1}}
    read = WhyNote.parse(json.dumps(newer))
    assert read is not None and read.facts == {"window": "2h", "gpus": 1} and read.policy == "idle-gpu"


def test_with_changes_moves_deadline_action_and_cap_only() -> None:
    later = NOTE.deadline + datetime.timedelta(hours=5)
    moved = NOTE.with_changes(deadline=later, action="suspend", keep_cap=None, max_extension="0s")
    assert (moved.deadline, moved.action, moved.keep_cap, moved.max_extension) == (later, "suspend", None, "0s")
    assert (moved.words, moved.facts, moved.marked_at, moved.policy) == (NOTE.words, NOTE.facts, NOTE.marked_at,
                                                                         NOTE.policy)
    assert NOTE.with_changes() == NOTE
