"""What a researcher reads in the janitor's Slack DM, rendered from notices.

Aspects covered:
- per notice: the numbers from `why`, the deadline as Slack's date token (epoch + UTC fallback)
  and as "in 23 h", the keep command in a code block, resume commands (DONE and suspend-like
  WARNINGs), the cancelled wording;
- the summary and the plain `text` fallback: counts per kind, GPUs held, the first deadline;
- `relative` and `slack_date` on their own;
- escaping of user-controlled text, but not of the generated date tokens;
- Block Kit limits: sections <= 3000 chars even with a 10,000-char `why`, headers <= 150,
  text < 3000, <= 50 blocks, splitting into numbered parts with every notice exactly once;
- deterministic order (warnings, reminders, done, cancelled; then deadline, then name).
"""

from __future__ import annotations

import datetime
import re

import pytest

from janitor.act.slack_messages import Message, relative, render_digest, slack_date
from janitor.decide.model import ObjectRef
from janitor.decide.notices import Notice, NoticeKind
from janitor.decide.owners import Owner, OwnerKind

UTC = datetime.timezone.utc
NOW = datetime.datetime(2026, 11, 22, 15, 0, tzinfo=UTC)
DEADLINE = datetime.datetime(2026, 11, 23, 14, 0, tzinfo=UTC)  # 23 h after NOW
EPOCH = int(DEADLINE.timestamp())
ALICE = Owner(OwnerKind.EMAIL, "alice@lab.example")
WHY = "GPU utilisation 0.4% (max 2%) over the last 8h; 3 GPUs idle"
KEEP = "kubectl annotate job -n team-a train janitor/keep=true --overwrite"
RESUME = "kubectl scale deployment -n team-a train --replicas=1"
DATE_TOKEN = re.compile(r"<!date\^\d+\^\{date_short_pretty\} at \{time\}\|[0-9: -]+ UTC>")


def notice(kind: NoticeKind = NoticeKind.WARNING, *, name: str = "train", namespace: str | None = "team-a",
           action: str = "delete", why: str = WHY, deadline: datetime.datetime | None = DEADLINE,
           keep: str = KEEP, resume: str = "", gpus: int = 3, workload_kind: str = "Job") -> Notice:
    return Notice(kind=kind, workload=ObjectRef(workload_kind, "batch/v1", namespace, name, f"uid-{name}"),
                  policy="idle-gpu", owner=ALICE, action=action, why=why, now=NOW, deadline=deadline,
                  keep_command=keep, resume_command=resume, gpus=gpus)


def sections(message: Message) -> list[str]:
    return [b["text"]["text"] for b in message.blocks if b["type"] == "section"]


def only_notice_text(n: Notice) -> str:
    """The section a single notice renders to (the blocks after header, summary, divider)."""
    [message] = render_digest([n], NOW)
    assert [b["type"] for b in message.blocks] == ["header", "section", "divider", "section"]
    return message.blocks[3]["text"]["text"]


CASES = {
    "warning-delete": (notice(), [
        "*Warning:*", "*Job team-a/train*", "*deleted*", "policy `idle-gpu`", "3 GPUs",
        "0.4%", "max 2%", "last 8h",
        f"<!date^{EPOCH}^{{date_short_pretty}} at {{time}}|2026-11-23 14:00 UTC>", "(in 23 h)",
        f"*To keep it:*\n```{KEEP}```"], ["resume"]),
    "warning-scale-to-zero-shows-resume": (notice(action="scale-to-zero", resume=RESUME), [
        "*scaled to zero*", f"*After that, resume with:*\n```{RESUME}```", f"```{KEEP}```"], []),
    "warning-delete-hides-resume": (notice(resume=RESUME), ["*deleted*"], [RESUME]),
    "reminder-40-min": (notice(NoticeKind.REMINDER, action="suspend", deadline=NOW + datetime.timedelta(minutes=40)),
                        ["*Reminder:*", "*suspended*", "(in 40 min)", f"```{KEEP}```"], []),
    "reminder-overdue-is-now": (notice(NoticeKind.REMINDER, deadline=NOW - datetime.timedelta(minutes=3)),
                                ["(now)"], ["(in "]),
    "done-scale-to-zero-resume": (notice(NoticeKind.DONE, action="scale-to-zero", deadline=None, keep="",
                                         resume=RESUME),
                                  ["*Done:*", "was *scaled to zero*", "freeing 3 GPUs", "0.4%",
                                   f"*To bring it back:*\n```{RESUME}```"], ["<!date", "keep"]),
    "done-delete-no-resume": (notice(NoticeKind.DONE, deadline=None, keep=""), ["was *deleted*"], ["```"]),
    "cancelled": (notice(NoticeKind.CANCELLED, action="stop", deadline=None, keep=""),
                  ["*Cancelled:*", "no longer marked", "in use again", "will not be stopped", "Nothing to do"],
                  ["```", "<!date"]),
    "cluster-scoped": (notice(namespace=None, name="big-node-pool", workload_kind="NodePool"),
                       ["*NodePool big-node-pool*"], []),
}


@pytest.mark.parametrize(("n", "present", "absent"), CASES.values(), ids=CASES.keys())
def test_what_a_notice_says(n: Notice, present: list[str], absent: list[str]) -> None:
    text = only_notice_text(n)
    for expected in present:
        assert expected in text
    for unexpected in absent:
        assert unexpected not in text


@pytest.mark.parametrize(
    ("delta", "expected"),
    [(datetime.timedelta(hours=23), "in 23 h"), (datetime.timedelta(hours=22, minutes=40), "in 23 h"),
     (datetime.timedelta(minutes=40), "in 40 min"), (datetime.timedelta(seconds=20), "in 1 min"),
     (datetime.timedelta(minutes=59, seconds=50), "in 1 h"), (datetime.timedelta(minutes=90), "in 1 h 30 min"),
     (datetime.timedelta(days=3, hours=5), "in 3 d"), (datetime.timedelta(0), "now"),
     (datetime.timedelta(hours=-2), "now")],
    ids=["23h", "rounds-hours", "40min", "under-a-minute", "rounds-to-hour", "hour-and-a-half", "days",
         "due", "overdue"],
)
def test_relative(delta: datetime.timedelta, expected: str) -> None:
    assert relative(delta) == expected


@pytest.mark.parametrize(
    "when", [DEADLINE, DEADLINE.astimezone(datetime.timezone(datetime.timedelta(hours=-5))),
             DEADLINE.replace(tzinfo=None)], ids=["utc", "other-zone", "naive-is-utc"])
def test_slack_date_epoch_and_utc_fallback(when: datetime.datetime) -> None:
    assert slack_date(when) == f"<!date^{EPOCH}^{{date_short_pretty}} at {{time}}|2026-11-23 14:00 UTC>"


def test_summary_counts_gpus_and_first_deadline() -> None:
    digest = [notice(name="a", gpus=2), notice(NoticeKind.REMINDER, name="b", gpus=1, action="suspend",
                                               deadline=NOW + datetime.timedelta(hours=2)),
              notice(NoticeKind.DONE, name="c", deadline=None, gpus=4), notice(NoticeKind.CANCELLED, name="d")]
    [message] = render_digest(digest, NOW)
    head, summary = message.blocks[0], message.blocks[1]["text"]["text"]
    assert head["type"] == "header" and head["text"]["type"] == "plain_text"
    assert head["text"]["text"] == "Idle GPUs: 2 workloads will be reclaimed"
    assert "*2 of your workloads hold 3 GPUs idle*: they will be deleted or suspended unless used or kept" in summary
    assert "(in 2 h)" in summary and "1 workload was deleted, freeing 4 GPUs" in summary
    assert "1 workload is no longer marked: nothing will happen to it" in summary
    assert "1 warning · 1 reminder · 1 done · 1 cancelled" in summary
    # The phone notification: the same facts in plain words, with the names.
    assert "2 of your workloads hold 3 GPUs idle" in message.text and "2026-11-22 17:00 UTC (in 2 h)" in message.text
    assert "Job team-a/a" in message.text and "<!date" not in message.text and len(message.text) < 3000


@pytest.mark.parametrize(
    ("digest", "header", "summary"),
    [([notice(NoticeKind.DONE, deadline=None)], "Idle GPUs: 1 workload reclaimed", "1 workload was deleted"),
     ([notice(NoticeKind.CANCELLED), notice(NoticeKind.CANCELLED, name="x")], "Idle GPUs: 2 workloads no longer marked",
      "2 workloads are no longer marked: nothing will happen to them"),
     ([notice(gpus=0)], "Idle GPUs: 1 workload will be reclaimed", "1 of your workloads is idle*: it will be deleted")],
    ids=["only-done", "only-cancelled", "no-gpus"],
)
def test_headline_per_digest(digest: list[Notice], header: str, summary: str) -> None:
    [message] = render_digest(digest, NOW)
    assert message.blocks[0]["text"]["text"] == header and summary in message.blocks[1]["text"]["text"]


def test_user_text_is_escaped_but_date_tokens_are_not() -> None:
    n = notice(name="a<b>&c", why="util < 5% & mem > 1 GiB <@U123> <!channel>", keep="echo a > b && rm <x>",
               action="scale-to-zero", resume="kubectl scale --replicas=1 <deploy>")
    [message] = render_digest([n], NOW)
    for text in [message.text, *sections(message)]:
        assert "<!channel>" not in text and "<@U123>" not in text
        assert "<" not in DATE_TOKEN.sub("", text) and ">" not in DATE_TOKEN.sub("", text)
    body = sections(message)[1]
    assert "util &lt; 5% &amp; mem &gt; 1 GiB &lt;@U123&gt; &lt;!channel&gt;" in body
    assert "a&lt;b&gt;&amp;c" in body and "```echo a &gt; b &amp;&amp; rm &lt;x&gt;```" in body
    assert f"<!date^{EPOCH}^" in body


def test_a_very_long_why_is_cut_to_the_section_limit() -> None:
    long_why = "GPU utilisation 0.4% over 8h; " + "&" * 10_000
    text = only_notice_text(notice(why=long_why, keep="k" * 5000, resume="r" * 5000, action="suspend"))
    assert len(text) <= 3000 and "GPU utilisation 0.4% over 8h" in text and "…" in text
    assert "&am…" not in text and "&…" not in text  # an entity is never split
    assert "*When:*" in text and "*To keep it:*" in text  # the parts after `why` survive


def check_limits(messages: list[Message]) -> None:
    for m in messages:
        assert len(m.blocks) <= 50 and len(m.text) < 3000
        assert sum(len(s) for s in sections(m)) <= 12_000  # Slack's undocumented msg_blocks_too_long
        assert all(len(s) <= 3000 for s in sections(m))
        assert m.blocks[0]["type"] == "header" and len(m.blocks[0]["text"]["text"]) <= 150


def names_shown(messages: list[Message]) -> list[str]:
    return [name for m in messages for s in sections(m)[1:] for name in re.findall(r"team-a/(w\d+)\*", s)]


@pytest.mark.parametrize(("count", "why"), [(120, WHY), (120, "x" * 10_000), (450, WHY)],
                         ids=["120", "120-long-why", "450-compact"])
def test_splitting_keeps_limits_and_shows_every_notice_once(count: int, why: str) -> None:
    kinds = list(NoticeKind)
    digest = [notice(kinds[i % 4], name=f"w{i:03d}", why=why, gpus=1, action="scale-to-zero", resume=RESUME,
                     deadline=DEADLINE + datetime.timedelta(minutes=i)) for i in range(count)]
    messages = render_digest(digest, NOW)
    check_limits(messages)
    assert len(messages) > 1
    assert len(messages) <= -(-count // (25 if why == WHY else 3))  # sane: parts are well filled
    assert sorted(names_shown(messages)) == sorted(f"w{i:03d}" for i in range(count))
    total, pending = len(messages), sum(n.kind in (NoticeKind.WARNING, NoticeKind.REMINDER) for n in digest)
    for index, m in enumerate(messages, start=1):
        assert m.blocks[0]["text"]["text"].endswith(f"(part {index} of {total})")
        assert f"(part {index} of {total})" in m.text
        summary = sections(m)[0]
        assert f"{pending} of your workloads hold {pending} GPUs idle" in summary  # whole digest, every part
        assert "This part shows" in summary


def test_order_is_kind_then_deadline_then_name() -> None:
    later = DEADLINE + datetime.timedelta(hours=1)
    digest = [notice(NoticeKind.CANCELLED, name="w1"), notice(NoticeKind.DONE, name="w2", deadline=None),
              notice(NoticeKind.REMINDER, name="w3"), notice(name="w4", deadline=later), notice(name="w6"),
              notice(name="w5")]
    messages = render_digest(digest, NOW)
    assert names_shown(messages) == ["w5", "w6", "w4", "w3", "w2", "w1"]
    assert render_digest(list(reversed(digest)), NOW) == messages


def test_nothing_to_say_is_no_message() -> None:
    assert render_digest([], NOW) == []


def test_a_compact_digest_still_says_how_to_keep_each_workload() -> None:
    digest = [notice(name=f"w{i:03d}", keep=f"keep w{i:03d}") for i in range(201)]
    texts = [s for m in render_digest(digest, NOW) for s in sections(m)[1:]]
    assert len(texts) == 201 and all(f"```keep w{i:03d}```" in t for i, t in enumerate(texts))
