"""The warning a researcher clicked, as it reads after the click: the deadline in force.

A real Slack client talks to the in-process stand-in, and the clicks' handler to a small apiserver
that serves one marked Job (tests/unit/test_cli_keep.py's).

Aspects covered:
- after Keep, the edited message's *When:* line of that workload, and the summary's first
  deadline, name the deadline in force (the keep), not the one the warning first gave; the
  "Kept until" line under it agrees; the other workload of the digest keeps its own deadline;
- a Keep in a later part of a digest sent in parts never moves that part's first deadline (the
  whole digest's) later than the one in force; whichever workload of whichever part is kept, and
  to whatever deadline, no part's summary then shows a first deadline later than the one in force.
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Iterator

import pytest
from slack_sdk import WebClient
from test_cli_keep import Apiserver, mark

from devenv.slack_interactive import block_actions
from devenv.slack_standin import SlackStandIn, SlackUser
from janitor import annotations as a
from janitor import kubeapi
from janitor.act.slack import Slack
from janitor.act.slack_messages import MessageContext, render_digest, with_deadline
from janitor.clicks import Clicks
from janitor.decide.model import ObjectRef
from janitor.decide.notices import Notice, NoticeKind
from janitor.decide.owners import Owner, OwnerKind
from janitor.decide.reasons import Code, why
from janitor.policy.model import IdleGpu, Lifecycle, Match, Mode, Namespaces, Policy
from janitor.settings import Settings, SlackSettings
from janitor.telemetry import Telemetry

H, DAY = datetime.timedelta(hours=1), datetime.timedelta(days=1)
ALICE = Owner(OwnerKind.EMAIL, "alice@lab.example", "annotation janitor/owner")
POLICY = Policy("idle-gpu", (IdleGpu(),), match=Match(namespaces=Namespaces(("team-a",))), mode=Mode.ENFORCE,
                lifecycle=Lifecycle(max_extension=7 * DAY))


@pytest.fixture
def apiserver() -> Iterator[Apiserver]:
    made = Apiserver()
    yield made
    made.stop()


def dates(text: str) -> list[int]:
    """The times a text shows through Slack's date markup, as epoch seconds."""
    return [int(s) for s in re.findall(r"<!date\^(\d+)\^", text)]


def notice(ref: ObjectRef, now: datetime.datetime, marked: datetime.datetime, deadline: datetime.datetime) -> Notice:
    return Notice(NoticeKind.WARNING, ref, "idle-gpu", ALICE, "delete", why(Code.FREE_TEXT, text="idle"), now,
                  deadline, keep_command="kubectl janitor keep job/x 2d", gpus=1, marked_at=marked,
                  cap=marked + 7 * DAY)


def test_after_keep_the_message_shows_the_deadline_in_force(apiserver: Apiserver, tmp_path) -> None:
    now = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0)
    marked = now - 2 * H
    deadline = marked + DAY  # as mark() writes it: in 22 hours
    apiserver.annotations = {**mark(marked), a.OWNER: ALICE.value}
    train = ObjectRef("Job", "batch/v1", "team-a", "train", "uid-train")
    other = ObjectRef("Job", "batch/v1", "team-a", "other", "uid-other")
    later = now + 30 * H
    [message] = render_digest([notice(train, now, marked, deadline), notice(other, now, marked, later)], now,
                              context=MessageContext(buttons=True))
    config = tmp_path / "kubeconfig"
    config.write_text(f"apiVersion: v1\nkind: Config\ncurrent-context: lab\nclusters: [{{name: lab, cluster: "
                      f"{{server: '{apiserver.url}'}}}}]\nusers: [{{name: me, user: {{token: t0ken}}}}]\n"
                      "contexts: [{name: lab, context: {cluster: lab, user: me}}]\n")
    with SlackStandIn(tokens=("xoxb-t",), users=[SlackUser("alice@lab.example", "U0ALICE1", "alice")]) as standin:
        posted = WebClient("xoxb-t", base_url=standin.base_url).chat_postMessage(
            channel="U0ALICE1", text=message.text, blocks=list(message.blocks))
        channel, ts = str(posted["channel"]), str(posted["ts"])
        clicks = Clicks(kubeapi.connect(str(config)), Slack.connect("xoxb-t", base_url=standin.base_url, timeout=5),
                        Settings(slack=SlackSettings(token="xoxb-t")), lambda: (POLICY,), Telemetry(), lambda: None)
        [shown] = standin.messages(channel)
        sent = {"ts": ts, "text": shown.text, "blocks": shown.blocks}
        clicks.handle(block_actions({"id": "U0ALICE1"}, channel, sent, "janitor.keep.1d",
                                    block_id="janitor:uid-train"))
        [edited] = standin.messages(channel)
    kept = a.parse_expires(apiserver.annotations[a.KEEP_UNTIL])
    assert kept == now + DAY or kept == now + DAY + datetime.timedelta(seconds=1)  # the click's own second
    texts = [b["text"]["text"] for b in edited.blocks if b.get("type") == "section"]
    summary, train_text, other_text = texts[0], texts[1], texts[2]
    [when] = [line for line in train_text.splitlines() if line.startswith("*When:*")]
    assert dates(when) == [int(kept.timestamp())], when
    [done] = [b for b in edited.blocks if b.get("type") == "context" and b.get("block_id") == "janitor:uid-train"]
    assert dates(done["elements"][0]["text"]) == [int(kept.timestamp())]
    [other_when] = [line for line in other_text.splitlines() if line.startswith("*When:*")]
    assert dates(other_when) == [int(later.timestamp())]  # the other workload's is its own still
    assert "The first deadline is" in summary and dates(summary) == [int(kept.timestamp())]
    assert int(deadline.timestamp()) not in dates(" ".join(texts))


def test_a_keep_in_a_later_part_of_a_digest_does_not_move_the_first_deadline_later() -> None:
    """A digest of 30 warnings is sent in parts; each part's summary names the first deadline of the
    whole digest (job-00's, in part 1). A Keep in the last part must not rewrite its summary to the
    earliest *When:* of that part alone, later than the first deadline in force."""
    now = datetime.datetime(2026, 11, 23, 12, tzinfo=datetime.timezone.utc)
    refs = [ObjectRef("Job", "batch/v1", "team-a", f"job-{i:02}", f"uid-{i:02}") for i in range(30)]
    notices = [notice(r, now, now - H, now + (i + 1) * H) for i, r in enumerate(refs)]
    parts = render_digest(notices, now, context=MessageContext(buttons=True))
    assert len(parts) >= 2
    last = parts[-1]
    clicked = next(b["block_id"] for b in last.blocks if b.get("type") == "actions")
    edited = with_deadline(last.blocks, clicked, now + 100 * H, now)
    [summary] = [b["text"]["text"] for b in edited if b.get("type") == "section"
                 and "The first deadline is" in b["text"]["text"]]
    first = re.search(r"The first deadline is <!date\^(\d+)\^", summary)
    assert first is not None
    assert int(first.group(1)) == int((now + H).timestamp()), \
        "the edited part says the first deadline is later than job-00's, which is in force"


@pytest.mark.parametrize("kept_to", [30 * H, 100 * H, H // 2])
def test_no_edited_part_shows_a_first_deadline_later_than_the_one_in_force(kept_to: datetime.timedelta) -> None:
    now = datetime.datetime(2026, 11, 23, 12, tzinfo=datetime.timezone.utc)
    refs = [ObjectRef("Job", "batch/v1", "team-a", f"job-{i:02}", f"uid-{i:02}") for i in range(30)]
    deadlines = {r.uid: now + (i + 1) * H for i, r in enumerate(refs)}
    notices = [notice(r, now, now - H, deadlines[r.uid]) for r in refs]
    parts = render_digest(notices, now, context=MessageContext(buttons=True))
    assert len(parts) >= 2
    for part in parts:
        for clicked in (b["block_id"] for b in part.blocks if b.get("type") == "actions"):
            in_force = {**deadlines, clicked.removeprefix("janitor:"): now + kept_to}
            edited = with_deadline(part.blocks, clicked, now + kept_to, now)
            [summary] = [b["text"]["text"] for b in edited if b.get("type") == "section"
                         and "The first deadline is" in b["text"]["text"]]
            [first] = dates(summary)
            assert first <= int(min(in_force.values()).timestamp()), (clicked, summary)
