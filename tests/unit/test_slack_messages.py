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
- deterministic order (warnings, reminders, done, cancelled; then deadline, then name);
- the "Why:" line in plain words from the reason's code and facts (janitor.decide.plain): GPU idle
  with one pod and several, CPU idle, stuck Pending, crash-looping, in use again, and the reason's
  sentence for anything else;
- every message names its cluster (header and fallback text) and ends with where to ask and the
  researcher guide, only the parts configured, nothing dangling when none is; the extra block
  and its characters count against the limits (also for generated clusters' notices, a property).
"""

from __future__ import annotations

import datetime
import re
from dataclasses import replace

import pytest
from generated import Case, cases
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from janitor.act.slack_messages import Message, MessageContext, relative, render_digest, slack_date
from janitor.decide.model import ObjectRef, SafetyLedger
from janitor.decide.notices import Notice, NoticeKind
from janitor.decide.owners import Owner, OwnerKind
from janitor.decide.plan import plan
from janitor.decide.reasons import Code, Reason, why

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
           action: str = "delete", why: str | Reason = WHY, deadline: datetime.datetime | None = DEADLINE,
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
                  ["*Cancelled:*", "no longer marked", "*Why:*", "will not be stopped", "Nothing to do"],
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


def contexts(message: Message) -> list[str]:
    return [e["text"] for b in message.blocks if b["type"] == "context" for e in b["elements"]]


def check_limits(messages: list[Message]) -> None:
    for m in messages:
        assert len(m.blocks) <= 50 and len(m.text) < 3000
        # Slack's undocumented msg_blocks_too_long counts every block's text
        assert sum(len(s) for s in sections(m) + contexts(m)) + len(m.blocks[0]["text"]["text"]) <= 12_000
        assert all(len(s) <= 3000 for s in sections(m) + contexts(m))
        assert m.blocks[0]["type"] == "header" and len(m.blocks[0]["text"]["text"]) <= 150


def names_shown(messages: list[Message]) -> list[str]:
    return [name for m in messages for s in sections(m)[1:] for name in re.findall(r"team-a/(w\d+)\*", s)]


@pytest.mark.parametrize(("count", "why"), [(120, WHY), (120, "x" * 10_000), (450, WHY)],
                         ids=["120", "120-long-why", "450-compact"])
def test_splitting_keeps_limits_and_shows_every_notice_once(count: int, why: str) -> None:
    kinds = list(NoticeKind)
    digest = [notice(kinds[i % 4], name=f"w{i:03d}", why=why, gpus=1, action="scale-to-zero", resume=RESUME,
                     deadline=DEADLINE + datetime.timedelta(minutes=i)) for i in range(count)]
    messages = render_digest(digest, NOW, context=EVERYWHERE)
    check_limits(messages)
    assert all(m.blocks[-1]["type"] == "context" and "mn2" in m.blocks[0]["text"]["text"] for m in messages)
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


# -- the why in plain words -----------------------------------------------------------------------------------

H = datetime.timedelta(hours=1)
GPU_UTIL = "DCGM_FI_DEV_GPU_UTIL"


def gpu_idle(*peaks: float, window: datetime.timedelta = 4 * H) -> Reason:
    """As the idle-GPU trigger writes it (tests/unit/test_plain.py reads the trigger's own)."""
    detail = ", ".join(f"GPU {i} peak {p:g}" for i, p in enumerate(peaks))
    return why(Code.GPU_IDLE, detail=detail, signal=GPU_UTIL, threshold=5.0, window=window,
               peaks=tuple((str(i), p) for i, p in enumerate(peaks)))


def all_idle(*pods: Reason) -> Reason:
    shown = tuple(why(Code.POD, pod=f"nb-{i}", why=p) for i, p in enumerate(pods[:3]))
    return why(Code.ALL_IDLE, total=len(pods), shown=shown, more="; ..." if len(pods) > 3 else "")


STUCK = why(Code.NONE_RUNS, total=1, first=why(Code.POD, pod="train-0", why=why(
    Code.STUCK_FOR, state=why(Code.UNSCHEDULABLE, message="0/3 nodes are available: 3 Insufficient nvidia.com/gpu."),
    stuck=3 * 24 * H + 20 * datetime.timedelta(minutes=1))))
LOOPING = why(Code.ALL_LOOPING, gpus=4, shown=(why(
    Code.RESTARTS, pod="train-0", container="train", restarts=12, last_exit="OOMKilled, exit code 137",
    at=NOW, ran=datetime.timedelta(seconds=40), now=why(Code.NOW_WAITING, reason="CrashLoopBackOff"),
    oom=why(Code.OOM, limit="memory limit 8.0 GiB", agent="", explained="..."), ignored=None),))
BUSY = why(Code.IN_USE, trigger="idleGpu", policy="idle-gpu", why=why(
    Code.PODS_IN_USE, busy=1, total=1, pod="nb-0", why=why(Code.GPU_BUSY, detail="GPU 0 peak 97", signal=GPU_UTIL,
                                                           threshold=5.0, window=2 * H, peaks=(("0", 97.0),))))

PLAIN = {
    "gpu-one-pod": (notice(why=all_idle(gpu_idle(0))), "GPU 0 peaked at 0 % over the last 4 h"),
    "gpu-pods": (notice(why=all_idle(gpu_idle(0), gpu_idle(1), gpu_idle(0))),
                 "all 3 pods idle: GPU peaks 0 %, 1 %, 0 % over the last 4 h"),
    "cpu": (notice(why=all_idle(why(Code.CPU_IDLE, peak=0.02, limit="0.1 cores", window=2 * H)), gpus=0),
            "CPU peaked at 0.02 cores over the last 2 h"),
    "pending": (notice(why=STUCK), "Pending for 3 d: the scheduler finds no node for it "
                                   "(0/3 nodes are available: 3 Insufficient nvidia.com/gpu.)"),
    "crash-loop": (notice(why=LOOPING), "crash-looping while holding 4 GPUs: container train restarted 12 times; "
                                        "its last run ended after 40 s (OOMKilled, exit code 137); now waiting "
                                        "(CrashLoopBackOff); it ran out of memory (memory limit 8.0 GiB); ..."),
    "done": (notice(NoticeKind.DONE, why=all_idle(gpu_idle(0, 2)), deadline=None, keep=""),
             "its 2 GPUs peaked at 0 % and 2 % over the last 4 h"),
    "cancelled-in-use": (notice(NoticeKind.CANCELLED, why=BUSY, deadline=None, keep=""),
                         "in use again: GPU 0 peaked at 97 % over the last 2 h"),
    "fallback": (notice(NoticeKind.CANCELLED, why=why(Code.NO_LONGER_COVERED, policy="idle-gpu"), deadline=None,
                        keep=""),
                 "no longer covered: policy idle-gpu is gone, in shadow mode or no longer matches, or the workload "
                 "has no running pods"),
}


@pytest.mark.parametrize(("n", "words"), PLAIN.values(), ids=PLAIN.keys())
def test_the_why_is_in_plain_words(n: Notice, words: str) -> None:
    text = only_notice_text(n)
    [line] = [line for line in text.split("\n") if line.startswith("*Why:*")]
    assert line == f"*Why:* {words}"
    assert GPU_UTIL not in text and "DCGM" not in text


# -- the cluster, where to ask, the guide ---------------------------------------------------------------------

GUIDE = "https://wiki.lab.example/gpu-janitor?page=researchers&lang=en"
EVERYWHERE = MessageContext(cluster="mn2", admin_channel="#gpu-admins", guide_url=GUIDE)


@pytest.mark.parametrize(("context", "footer"), [
    (EVERYWHERE, "Questions? Ask in #gpu-admins · Researcher guide: "
                 "<https://wiki.lab.example/gpu-janitor?page=researchers&amp;lang=en>"),
    (MessageContext(cluster="mn2", admin_channel="gpu-admins"), "Questions? Ask in #gpu-admins"),
    (MessageContext(cluster="mn2", admin_channel="C0ADMINS"), "Questions? Ask in <#C0ADMINS>"),
    (MessageContext(cluster="mn2", guide_url=GUIDE),
     "Researcher guide: <https://wiki.lab.example/gpu-janitor?page=researchers&amp;lang=en>"),
    (MessageContext(cluster="mn2"), None),
], ids=["all", "channel-name-without-hash", "channel-id", "guide-only", "cluster-only"])
def test_every_message_names_the_cluster_and_where_to_ask(context: MessageContext, footer: str | None) -> None:
    digest = [notice(name="a", gpus=1), notice(NoticeKind.DONE, name="b", deadline=None),
              notice(NoticeKind.CANCELLED, name="c")]
    for notices in ([digest[0]], [digest[1]], [digest[2]], digest):
        [message] = render_digest(notices, NOW, context=context)
        assert message.blocks[0]["text"]["text"].startswith(("Idle GPUs on mn2: ", "GPU janitor on mn2: "))
        assert message.text.startswith("GPU janitor on mn2: ")
        if footer is None:
            assert message.blocks[-1]["type"] == "section" and contexts(message) == []
        else:
            assert message.blocks[-1] == {"type": "context", "elements": [{"type": "mrkdwn", "text": footer}]}
    [message] = render_digest([digest[0]], NOW, context=context)
    assert message.blocks[0]["text"]["text"] == "Idle GPUs on mn2: 1 workload will be reclaimed"


def test_nothing_dangles_when_nothing_is_configured() -> None:
    [message] = render_digest([notice()], NOW, context=MessageContext())
    assert [message] == render_digest([notice()], NOW)
    assert message.blocks[0]["text"]["text"] == "Idle GPUs: 1 workload will be reclaimed"
    assert message.text.startswith("GPU janitor: ") and " on " not in message.text.split(":")[0]
    assert [b["type"] for b in message.blocks] == ["header", "section", "divider", "section"]
    text = str(message.blocks)
    assert "Questions" not in text and "guide" not in text and "None" not in text


def test_the_cluster_name_and_the_links_are_text_not_markup() -> None:
    context = MessageContext(cluster="mn2 <!channel> & co", admin_channel="#gpu <@U1>",
                             guide_url="https://wiki.example/a>b")
    [message] = render_digest([notice()], NOW, context=context)
    assert "<!channel>" not in message.text and "mn2 &lt;!channel&gt; &amp; co" in message.text
    assert message.blocks[0]["text"]["text"].startswith("Idle GPUs on mn2 <!channel> & co: ")  # plain_text
    [footer] = contexts(message)
    assert "<@U1>" not in footer and "&lt;@U1&gt;" in footer and "<https://wiki.example/a&gt;b>" in footer


def test_long_names_still_fit() -> None:
    context = MessageContext(cluster="c" * 500, admin_channel="#" + "a" * 500,
                             guide_url="https://x.example/" + "g" * 3000)
    messages = render_digest([notice(name=f"w{i:03d}", why="x" * 10_000) for i in range(60)], NOW, context=context)
    check_limits(messages)
    assert len(messages) > 1 and all(contexts(m) for m in messages)


@st.composite
def message_contexts(draw: st.DrawFn) -> MessageContext:
    names = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=200)
    return MessageContext(cluster=draw(st.none() | names), admin_channel=draw(st.none() | st.just("#gpu-admins")),
                          guide_url=draw(st.none() | names.map(lambda t: "https://guide.example/" + t)))


@settings(max_examples=40, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much])
@given(case=cases("idle", "due", "any"), context=message_contexts(), copies=st.sampled_from((1, 1, 7, 260)),
       offset=st.sampled_from((0 * H, 7 * H, 30 * H)))
def test_generated_notices_keep_the_limits_and_name_the_cluster(case: Case, context: MessageContext, copies: int,
                                                                offset: datetime.timedelta) -> None:
    """The notices a generated cluster's plan gives (the triggers' own reasons), many times over."""
    now = NOW + offset
    planned = plan(case.cluster.observe(case.policies, now), case.policies, SafetyLedger(), now,
                   settings=case.settings)
    found = [c.notice for c in planned.changes if c.notice is not None]
    digest = [replace(n, workload=replace(n.workload, name=f"{n.workload.name}-{i}", uid=f"{n.workload.uid}-{i}"))
              for n in found for i in range(copies)]
    messages = render_digest(digest, now, context=context)
    assert bool(messages) == bool(digest)
    check_limits(messages)
    for m in messages:
        for section in sections(m)[1:]:
            assert "*Why:* " in section
        cluster = " ".join((context.cluster or "").split())  # blank: none
        if cluster:
            assert f" on {cluster[:10]}" in m.blocks[0]["text"]["text"] and m.text.startswith("GPU janitor on ")
        else:
            assert " on " not in m.blocks[0]["text"]["text"] and m.text.startswith("GPU janitor")
        if context.admin_channel or context.guide_url:
            assert m.blocks[-1]["type"] == "context"
