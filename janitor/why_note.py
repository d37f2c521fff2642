"""The `janitor/why` annotation: a mark's reason as data, for programs that must not parse words.

`janitor/reason` is a sentence for people reading `kubectl describe`. A tool that wants the policy,
the trigger, the numbers, the deadline or how far an owner may keep the workload (the `kubectl
janitor` plugin, a dashboard) would otherwise parse that sentence, and every change of wording would
break it silently. So every mark also carries this small JSON object, written in the same patch as
the mark and kept in step whenever the janitor moves the deadline or warns of another action.

Version 1, one line of JSON (fields are only ever added; a reader ignores those it does not know):

    {"version": 1, "policy": "idle-gpu", "trigger": "idleGpu", "action": "delete", "code": "all-idle",
     "words": "GPU 0 peaked at 0 % over the last 2 h",
     "facts": {"window": "2h", "threshold": 5.0, "signal": "DCGM_FI_DEV_GPU_UTIL", "gpus": 1},
     "markedAt": "2026-11-23T12:00:00Z", "deadline": "2026-11-24T12:00:00Z",
     "keepCap": "2026-11-30T12:00:00Z", "maxExtension": "7d"}

`keepCap` is the latest `janitor/keep-until` the policy honours (markedAt + maxExtension), null when
it honours none. It is at most MAX_BYTES of UTF-8, so an annotation read on every cycle stays
small: the words give way (cut, with an ellipsis), never a fact. Pure, standard library only.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from janitor import annotations as ann

VERSION = 1
MAX_BYTES = 2048
Scalar = str | int | float | bool


@dataclass(frozen=True, slots=True)
class WhyNote:
    """One mark's reason, as the janitor wrote it (see the module docstring for the JSON)."""

    policy: str
    trigger: str  # as policy files name triggers: idleGpu, idleCpu, pending, crashLoop
    action: str  # delete | suspend | scale-to-zero | stop | report
    code: str  # the reason's code (janitor.decide.reasons.Code)
    words: str  # the reason in a researcher's words (janitor.decide.plain)
    facts: Mapping[str, Scalar] = field(default_factory=dict)  # the trigger's window, threshold, ...
    marked_at: datetime.datetime = ann.EARLIEST
    deadline: datetime.datetime = ann.EARLIEST
    keep_cap: datetime.datetime | None = None
    max_extension: str | None = None  # the policy's, as a duration (7d); 0s: no keeping

    @property
    def extension(self) -> datetime.timedelta:
        """The policy's maxExtension as this note counts its cap (zero: no keeping): to the second,
        where `max_extension` is words for people."""
        return self.keep_cap - self.marked_at if self.keep_cap is not None else datetime.timedelta(0)

    def with_changes(self, *, deadline: datetime.datetime | None = None, action: str | None = None,
                     keep_cap: datetime.datetime | None | object = ..., max_extension: str | None | object = ...
                     ) -> WhyNote:
        """The note after the janitor moved the deadline, warned of another action or read another
        cap; everything it said about the evidence stays as it was when the mark was made."""
        changes: dict[str, Any] = {}
        if deadline is not None:
            changes["deadline"] = deadline
        if action is not None:
            changes["action"] = action
        if keep_cap is not ...:
            changes["keep_cap"] = keep_cap
        if max_extension is not ...:
            changes["max_extension"] = max_extension
        return dataclasses.replace(self, **changes) if changes else self

    def encode(self) -> str:
        """One line of JSON within MAX_BYTES: the words are cut until it fits."""
        document = {
            "version": VERSION, "policy": self.policy, "trigger": self.trigger, "action": self.action,
            "code": self.code, "words": self.words, "facts": dict(self.facts),
            "markedAt": ann.format_deadline(self.marked_at), "deadline": ann.format_deadline(self.deadline),
            "keepCap": ann.format_deadline(self.keep_cap) if self.keep_cap is not None else None,
            "maxExtension": self.max_extension,
        }
        text = _dump(document)
        words = self.words
        while len(text.encode()) > MAX_BYTES and words:
            over = len(text.encode()) - MAX_BYTES
            words = words[:max(0, len(words) - max(over, 1) - 1)]
            document["words"] = words + "…"
            text = _dump(document)
        return text

    @classmethod
    def parse(cls, text: str) -> WhyNote | None:
        """The note in `text`; None when it is none (then readers fall back to janitor/reason)."""
        try:
            document = json.loads(text)
        except ValueError:
            return None
        if not isinstance(document, dict):
            return None
        version = document.get("version")
        if not isinstance(version, int) or isinstance(version, bool) or version < VERSION:
            return None
        strings = [document.get(k) for k in ("policy", "trigger", "action", "code", "words")]
        if not all(isinstance(s, str) for s in strings):
            return None
        policy, trigger, action, code, words = (str(s) for s in strings)
        try:
            marked_at = ann.parse_expires(str(document.get("markedAt")))
            deadline = ann.parse_expires(str(document.get("deadline")))
            cap = document.get("keepCap")
            keep_cap = ann.parse_expires(cap) if isinstance(cap, str) else None
        except ValueError:
            return None
        if cap is not None and not isinstance(cap, str):
            return None
        extension = document.get("maxExtension")
        raw = document.get("facts")
        facts = {str(k): v for k, v in raw.items() if isinstance(v, Scalar)} if isinstance(raw, dict) else {}
        return cls(policy, trigger, action, code, words, facts, marked_at, deadline, keep_cap,
                   extension if isinstance(extension, str) else None)


def _dump(document: Mapping[str, Any]) -> str:
    return json.dumps(document, ensure_ascii=False, separators=(",", ":"))


__all__ = ["MAX_BYTES", "VERSION", "WhyNote"]
