"""The node agent's wire contract (janitor.node_report): what it writes, read back as data.

Aspects covered:
- the condition message round-trips: the summary for people, then every pod it is about with its
  state; a message never exceeds the 1,024 characters the apiserver keeps, whatever the summary;
- a list too long for the message is cut with a marker and reads back as incomplete, so every pod
  on the node may be in it; a message cut bluntly inside its list reads back as incomplete too;
- a message of an older agent (no data part), an unknown state or a malformed entry reads back as
  incomplete, never as "no pod is stuck"; only the trailing data part is read, never the words;
- the agent's run (start, complete scans of sustain, last scan) and every pod's task state (alive,
  d-state, gone) round-trip as data; a list cut short keeps the stuck pods first, then the alive;
  a message without the run, or with one this janitor cannot read, has no run (it proves nothing);
  only a pod listed d-state, or one possibly cut off, is named as stuck;
- what the agent sees (`sees=<visible>/<listed>`) round-trips beside the run; an older janitor's
  decoder still reads the run and the pods of a message that carries it; a message without it, or
  with one that cannot be read, reads as not shown to see anything (sight None); the pod list
  still fits within 1,024 characters beside it;
- OOM event messages round-trip (kills, total, scope, words) for every scope, keep their data part
  when the words are long, and a message without the data part is no report.
"""

from __future__ import annotations

import datetime
import re
import string
import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from janitor.node_report import (
    MESSAGE_MAX,
    AgentRun,
    ConditionMessage,
    OomReport,
    OomScope,
    PodTaskState,
    Sight,
    decode_condition,
    decode_oom,
    encode_condition,
    encode_oom,
)

D = PodTaskState.D_STATE
ALIVE, GONE = PodTaskState.ALIVE, PodTaskState.GONE
T0 = datetime.datetime(2026, 11, 23, 12, tzinfo=datetime.timezone.utc)
RUN = AgentRun(T0, 7, 3, T0 + datetime.timedelta(minutes=3, seconds=30))
SUMMARY = "2 tasks in D state from 2 deleted or long-Terminating pods: pid 4242 (python) since 12:00"


def uids(n: int) -> list[str]:
    return [str(uuid.UUID(int=i + 1)) for i in range(n)]


def test_a_condition_message_round_trips() -> None:
    pods = {uid: D for uid in uids(2)}
    text = encode_condition(SUMMARY, pods)
    assert text == f"{SUMMARY} pods={uids(2)[0]}:d-state,{uids(2)[1]}:d-state"
    decoded = decode_condition(text)
    assert decoded == ConditionMessage(SUMMARY, pods, complete=True)
    assert decoded.names(uids(2)[0]) and not decoded.names(str(uuid.uuid4()))


@given(summary=st.text(alphabet=string.ascii_letters + string.digits + " :;,.()-", max_size=1500),
       count=st.integers(min_value=1, max_value=20))
def test_a_condition_message_round_trips_for_any_summary_that_fits(summary: str, count: int) -> None:
    pods = {uid: D for uid in uids(count)}
    text = encode_condition(summary, pods)
    assert len(text) <= MESSAGE_MAX
    decoded = decode_condition(text)
    assert decoded.pods == pods and decoded.complete  # 20 pods always fit
    assert summary.startswith(decoded.summary)  # the summary is what gives way
    if len(text) < MESSAGE_MAX:
        assert decoded.summary == summary


def test_a_message_with_many_pods_is_cut_to_fit_and_says_so() -> None:
    many = {uid: D for uid in uids(200)}
    text = encode_condition(SUMMARY * 20, many)
    assert len(text) <= MESSAGE_MAX and text.endswith(",+")
    decoded = decode_condition(text)
    assert decoded.complete is False
    assert decoded.pods and set(decoded.pods) < set(many) and set(decoded.pods.values()) == {D}
    assert all(decoded.names(uid) for uid in many)  # the ones cut off may be any of them
    assert decoded.names(str(uuid.uuid4()))
    assert len(decoded.summary) >= 40 and (SUMMARY * 20).startswith(decoded.summary)


@pytest.mark.parametrize("count", range(1, 41))
def test_a_list_is_cut_only_when_it_cannot_fit(count: int) -> None:
    pods = {uid: D for uid in uids(count)}  # 45 characters each with its comma
    text = encode_condition("x" * 2000, pods)
    decoded = decode_condition(text)
    assert len(text) <= MESSAGE_MAX and len(decoded.summary) >= 40
    if count <= 20:
        assert decoded.pods == pods and decoded.complete
    if count >= 23:  # 23 entries alone take more than 1,024 characters
        assert decoded.complete is False
    if not decoded.complete:
        assert text.endswith(",+") and list(decoded.pods) == sorted(pods)[: len(decoded.pods)]


@pytest.mark.parametrize("cut", [
    pytest.param(-1, id="inside-the-last-state"),
    pytest.param(-7, id="right-after-the-colon"),
    pytest.param(-8, id="right-after-the-uid"),
    pytest.param(-20, id="inside-the-last-uid"),
    pytest.param(-44, id="right-after-a-comma"),
])
def test_a_message_cut_bluntly_inside_its_list_is_incomplete(cut: int) -> None:
    full = SUMMARY + " pods=" + ",".join(f"{u}:d-state" for u in uids(3))
    decoded = decode_condition(full[:cut])
    assert decoded.complete is False
    assert decoded.names(uids(3)[2])


def test_a_message_of_an_older_agent_names_no_pods_and_is_incomplete() -> None:
    decoded = decode_condition("3 tasks in D state from 2 deleted pods: deleted pod uid 0f1e2d3c-0000-4000-8000-"
                               "000000000001 pid 4242")
    assert decoded.pods == {} and decoded.complete is False
    assert decoded.summary.startswith("3 tasks in D state")
    assert decoded.names("0f1e2d3c-0000-4000-8000-000000000001")  # may be about any pod: never read from the words


@pytest.mark.parametrize("data", [
    pytest.param("{uid}:zombie", id="unknown-state"),
    pytest.param("{uid}:d-state,{other}:zombie", id="one-unknown-state-among-known"),
    pytest.param("{uid}", id="no-state"),
    pytest.param("not a uid!:d-state", id="not-a-uid"),
    pytest.param(",", id="empty-entries"),
])
def test_what_this_janitor_cannot_read_makes_it_incomplete(data: str) -> None:
    uid, other = uids(2)
    decoded = decode_condition(SUMMARY + " pods=" + data.format(uid=uid, other=other))
    assert decoded.complete is False
    assert decoded.names(other) and decoded.names(str(uuid.uuid4()))
    assert set(decoded.pods) <= {uid} and set(decoded.pods.values()) <= {D}


def test_an_empty_list_names_no_pod_and_is_complete() -> None:
    """What the agent writes once the leftovers are gone: "no pod", told apart from "unknown"."""
    message = encode_condition("no D-state processes of deleted pods", {})
    decoded = decode_condition(message)
    assert decoded.pods == {} and decoded.complete is True
    assert not decoded.names(str(uuid.uuid4()))
    assert decoded.summary == "no D-state processes of deleted pods"


def test_only_the_trailing_data_part_is_read() -> None:
    uid, other = uids(2)
    words = f"a user named a pod pods={other}:d-state in the summary"
    decoded = decode_condition(encode_condition(words, {uid: D}))
    assert decoded == ConditionMessage(words, {uid: D}, complete=True)
    assert not decoded.names(other)


@pytest.mark.parametrize("scope", list(OomScope), ids=str)
def test_an_oom_report_round_trips_for_every_scope(scope: OomScope) -> None:
    report = OomReport(3, 12, scope, "3 OOM kills in this pod's memory cgroup (12 since it started): [details]")
    text = encode_oom(report)
    assert text == f"{report.words} [oom kills=3 total=12 scope={scope}]"
    assert decode_oom(text) == report
    assert str(decode_oom(text)) == report.words


def test_long_oom_words_give_way_to_the_data_part() -> None:
    report = OomReport(1, 1, OomScope.PROCESS, "w" * 5000)
    text = encode_oom(report)
    assert len(text) == MESSAGE_MAX
    decoded = decode_oom(text)
    assert decoded is not None and (decoded.kills, decoded.total, decoded.scope) == (1, 1, OomScope.PROCESS)
    assert report.words.startswith(decoded.words)


@pytest.mark.parametrize("text", [
    pytest.param("3 OOM kills in this pod's memory cgroup: single processes were killed", id="older-agent"),
    pytest.param("words [oom kills=1 total=1 scope=container] and more", id="data-not-at-the-end"),
    pytest.param("words [oom kills=1 total=1 scope=everything]", id="unknown-scope"),
    pytest.param("words [oom kills=-1 total=1 scope=process]", id="negative-count"),
])
def test_an_oom_message_without_a_valid_data_part_is_no_report(text: str) -> None:
    assert decode_oom(text) is None


def test_the_agents_run_and_every_pod_state_round_trip() -> None:
    stuck, alive, gone = uids(3)
    text = encode_condition("no D-state processes of deleted pods", {gone: GONE, alive: ALIVE, stuck: D}, RUN)
    assert text == ("no D-state processes of deleted pods started=2026-11-23T12:00:00Z scans=7/3 "
                    f"scanned=2026-11-23T12:03:30Z pods={stuck}:d-state,{alive}:alive,{gone}:gone")
    decoded = decode_condition(text)
    assert decoded == ConditionMessage("no D-state processes of deleted pods", {stuck: D, alive: ALIVE, gone: GONE},
                                       complete=True, agent=RUN)
    assert [decoded.state(u) for u in (stuck, alive, gone, str(uuid.uuid4()))] == [D, ALIVE, GONE, None]
    assert decoded.names(stuck) and not decoded.names(alive) and not decoded.names(gone)


@given(summary=st.text(alphabet=string.ascii_letters + string.digits + " :;,.()=-", max_size=1500),
       states=st.lists(st.sampled_from(list(PodTaskState)), min_size=0, max_size=18),
       scans=st.integers(min_value=0, max_value=10**9))
def test_the_run_round_trips_for_any_summary(summary: str, states: list[PodTaskState], scans: int) -> None:
    pods = dict(zip(uids(len(states)), states, strict=True))
    run = AgentRun(T0, scans, 3, T0 + datetime.timedelta(seconds=scans % 86400))
    text = encode_condition(summary, pods, run)
    assert len(text) <= MESSAGE_MAX
    decoded = decode_condition(text)
    assert decoded.agent == run and decoded.pods == pods and decoded.complete  # 18 pods always fit beside the run
    assert summary.startswith(decoded.summary)


def test_a_list_cut_short_keeps_the_stuck_then_the_alive_first() -> None:
    many = uids(30)
    pods = {uid: (GONE, ALIVE, D)[i % 3] for i, uid in enumerate(many)}
    decoded = decode_condition(encode_condition("x" * 2000, pods, RUN))
    assert decoded.complete is False and decoded.agent == RUN
    assert set(decoded.pods.values()) == {D, ALIVE}  # the 10 stuck pods, then the alive ones, no room for gone
    assert {u for u, s in pods.items() if s is D} <= set(decoded.pods)
    not_listed = next(u for u in many if u not in decoded.pods)
    assert decoded.names(not_listed) and decoded.state(not_listed) is None


@pytest.mark.parametrize("text", [
    pytest.param("no D-state processes of deleted pods pods=", id="older-agent-with-a-list"),
    pytest.param("words started=2026-11-23T12:00:00Z scans=7/3 scanned=yesterday pods=", id="a-time-not-read"),
    pytest.param("words started=2026-11-23T12:00:00Z scans=-1/3 scanned=2026-11-23T12:00:00Z pods=",
                 id="negative-scans"),
    pytest.param("words started=2026-11-23T12:00:00Z scans=7/3 scanned=2026-11-23T12:00:00Z and more pods=",
                 id="run-not-right-before-the-pods"),
])
def test_a_message_without_a_readable_run_has_none(text: str) -> None:
    decoded = decode_condition(text)
    assert decoded.agent is None and decoded.pods == {}


SEES = Sight(visible=12, listed=14)


def test_what_the_agent_sees_round_trips_beside_its_run() -> None:
    gone = uids(1)[0]
    text = encode_condition("no D-state processes of deleted pods", {gone: GONE}, RUN, SEES)
    assert text == ("no D-state processes of deleted pods sees=12/14 started=2026-11-23T12:00:00Z scans=7/3 "
                    f"scanned=2026-11-23T12:03:30Z pods={gone}:gone")
    decoded = decode_condition(text)
    assert decoded == ConditionMessage("no D-state processes of deleted pods", {gone: GONE}, True, RUN, SEES)
    assert decoded.sight is not None and decoded.sight.proven
    blind = decode_condition(encode_condition("sees nothing", {}, RUN, Sight(0, 14))).sight
    assert blind == Sight(0, 14) and not blind.proven
    assert " sees=" not in encode_condition("words", {}, None, SEES)  # only beside a run


def test_an_older_janitor_still_reads_the_run_and_the_pods() -> None:
    """The decoder of the janitor before `sees=` was added: the run right before ` pods=`."""
    older_run = re.compile(r" started=(\S{1,40}) scans=([0-9]{1,12})/([0-9]{1,6}) scanned=(\S{1,40})$")
    stuck, gone = uids(2)
    text = encode_condition("1 task in D state", {stuck: D, gone: GONE}, RUN, SEES)
    before, _, data = text.rpartition(" pods=")
    match = older_run.search(before)
    assert match is not None and match.groups() == ("2026-11-23T12:00:00Z", "7", "3", "2026-11-23T12:03:30Z")
    assert data == f"{stuck}:d-state,{gone}:gone"
    assert before[: match.start()] == "1 task in D state sees=12/14"  # to it, the end of the summary


@pytest.mark.parametrize("field", [
    pytest.param("", id="an-agent-from-before-it-was-added"),
    pytest.param(" sees=", id="empty"),
    pytest.param(" sees=12", id="no-listed"),
    pytest.param(" sees=-1/14", id="negative"),
    pytest.param(" sees=twelve/14", id="not-a-number"),
    pytest.param(" sees=1234567890/14", id="too-long"),
])
def test_a_message_without_a_readable_sight_is_not_shown_to_see(field: str) -> None:
    gone = uids(1)[0]
    decoded = decode_condition(f"no D-state processes of deleted pods{field} started=2026-11-23T12:00:00Z "
                               f"scans=7/3 scanned=2026-11-23T12:03:30Z pods={gone}:gone")
    assert decoded.sight is None and decoded.agent == RUN and decoded.pods == {gone: GONE}
    assert decoded.summary == "no D-state processes of deleted pods"


def test_only_the_sight_right_before_the_run_is_read() -> None:
    """A process may name itself ` sees=9/9`; the agent's own field always follows the summary."""
    decoded = decode_condition(encode_condition("process ' sees=9/9' pid 4242", {}, RUN, Sight(0, 3)))
    assert decoded.sight == Sight(0, 3) and decoded.summary == "process ' sees=9/9' pid 4242"


@given(summary=st.text(alphabet=string.ascii_letters + string.digits + " :;,.()=-", max_size=1500),
       states=st.lists(st.sampled_from(list(PodTaskState)), min_size=0, max_size=60),
       visible=st.integers(min_value=0, max_value=10**9 - 1), listed=st.integers(min_value=0, max_value=10**9 - 1))
def test_the_sight_round_trips_and_the_message_fits(summary: str, states: list[PodTaskState], visible: int,
                                                    listed: int) -> None:
    pods = dict(zip(uids(len(states)), states, strict=True))
    text = encode_condition(summary, pods, RUN, Sight(visible, listed))
    assert len(text) <= MESSAGE_MAX
    decoded = decode_condition(text)
    assert decoded.sight == Sight(visible, listed) and decoded.agent == RUN
    assert decoded.complete == (len(decoded.pods) == len(pods))
    assert all(pods[uid] is state for uid, state in decoded.pods.items())
