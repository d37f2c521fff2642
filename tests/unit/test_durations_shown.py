"""Durations as a user reads them: in words ("1 min", "7 d", "1 h 30 min"), never as a Python
timedelta ("0:01:00", "7 days, 0:00:00"), wherever the janitor shows one.

Aspects covered:
- every reason's sentence (plan, explain, Events, the audit log, janitor/reason) shows each
  duration among its facts in words or as a short age, whichever its template asks for;
- `janitor annotation janitor/ttl=7d` says "7 d";
- the node agent's log says when its next scan is in words.
"""

from __future__ import annotations

import datetime
import logging
import re
import string
from pathlib import Path

import pytest
from kubernetes import client

from janitor import cli, durations
from janitor.decide.reasons import _T, Code, Reason
from janitor.node_agent.agent import AgentSettings, NodeAgent

# What str(timedelta) looks like: "0:01:00", "7 days, 0:00:00", "1 day, 2:03:04.500000".
PYTHON_TIMEDELTA = re.compile(r"\b\d+:\d\d:\d\d\b|\bdays?, ")
ODD = datetime.timedelta(days=7, hours=3, minutes=4, seconds=5)


@pytest.mark.parametrize(("delta", "words"), [
    (datetime.timedelta(minutes=1), "1 min"),
    (datetime.timedelta(days=7), "7 d"),
    (datetime.timedelta(hours=1, minutes=30), "1 h 30 min"),
    (datetime.timedelta(seconds=30), "30 s"),
    (datetime.timedelta(0), "0 s"),
])
def test_durations_in_words(delta: datetime.timedelta, words: str) -> None:
    assert durations.in_words(delta) == words


def _duration_fields(template: str) -> list[str]:
    """The fields of a template a duration could fill: plain ones and `:age` ones."""
    return [name for _, name, spec, _ in string.Formatter().parse(template)
            if name and spec in ("", "age") and not name.isdigit()]


def _filler(spec: str | None) -> object:
    """A value for a field no duration fills: a time, a number, or a tuple to join."""
    if spec == "min":
        return datetime.datetime(2026, 11, 23, 9, tzinfo=datetime.timezone.utc)
    return 1 if spec and spec[-1] in "gf%" else ("x",)


def test_no_reason_shows_a_python_timedelta() -> None:
    """Every template, with a duration in each field one could fill (names and counts get 1)."""
    shown = []
    for code in Code:
        fields = _duration_fields(_T[code])
        if not fields:
            continue
        other = {name: _filler(spec) for _, name, spec, _ in string.Formatter().parse(_T[code])
                 if name and name not in fields}
        said = str(Reason(code, tuple((name, ODD) for name in dict.fromkeys(fields)) + tuple(other.items())))
        shown.append(said)
        assert not PYTHON_TIMEDELTA.search(said), (code, said)
    assert len(shown) > 100 and any("7 d 3 h" in said for said in shown)


def test_the_too_young_reason_says_when_it_is_judged_in_words() -> None:
    said = str(Reason(Code.TOO_YOUNG, (("running", datetime.timedelta(seconds=40)),
                                       ("needed", datetime.timedelta(minutes=1)))))
    assert said.startswith("running for 40 s only; judged after 1 min")


def test_annotation_says_a_ttl_in_words(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["annotation", "janitor/ttl=7d"]) == 0
    out = capsys.readouterr().out
    assert "deleted once older than 7 d (604800 s after creation)" in out
    assert not PYTHON_TIMEDELTA.search(out)


def test_the_node_agents_failed_scan_says_the_next_in_words(tmp_path: Path,
                                                            caplog: pytest.LogCaptureFixture) -> None:
    agent = NodeAgent(client.ApiClient(), AgentSettings("gpu-7", tmp_path / "proc", tmp_path / "cgroup",
                                                        interval=datetime.timedelta(seconds=30)))

    def fails() -> None:
        raise RuntimeError("no /proc")

    agent.scan_once = fails  # type: ignore[method-assign,assignment]
    caplog.set_level(logging.INFO, logger="janitor")
    stops = iter((False, True))
    agent.run_forever(stop=lambda: next(stops, True))
    [line] = [r.getMessage() for r in caplog.records if "scan failed" in r.getMessage()]
    assert line == "node scan failed; next scan in 30 s"
