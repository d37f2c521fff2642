"""The buttons on a warning, end to end: a real cycle marks and warns, clicks come through the Slack
stand-in's Socket Mode WebSocket and signed HTTP requests, and the janitor's real receivers answer.

Aspects covered:
- Socket Mode: a click by another user is refused to them alone and changes nothing; "Why?"
  answers in the thread; "Keep 1 day" writes janitor/keep-until (with an Event) and the message is
  edited in place; every click acknowledged, audited and counted;
- signed HTTP: a forged signature and a stale timestamp are refused (401) and change nothing; a
  genuine click keeps; the same request replayed changes nothing more;
- "Release now" on the warning of an earlier mark (the workload was marked again since) changes
  nothing; on the current warning it releases, and the next cycle suspends the Job through the rails.
"""

from __future__ import annotations

import datetime
import logging
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client
from runner import Runner
from runner import settings as build
from test_lifecycle import ALICE, create_job, events, history, notes_of, prometheus, write_policy  # noqa: F401

from devenv.procs import wait_until
from devenv.slack_interactive import APP_TOKEN, SIGNING_SECRET
from devenv.slack_standin import SlackStandIn, SlackUser
from janitor import annotations as a
from janitor.act.slack_inbound import PATH, HttpReceiver, SocketReceiver
from janitor.clicks import Clicks
from janitor.decide.lifecycle import LifecycleSettings
from janitor.telemetry import Telemetry

BOB = ("bob@lab.example", "U0BOB0001", "bob")
TOKEN = "xoxb-buttons"


@pytest.fixture
def standin() -> Iterator[SlackStandIn]:
    with SlackStandIn(tokens=(TOKEN,), users=[SlackUser(*ALICE), SlackUser(*BOB)]) as s:
        yield s


class Warned:
    """A suspend policy's idle Job, marked and warned by a real cycle, and a click handler."""

    def __init__(self, kube, core, namespace, tmp_path, values, start_prometheus, standin: SlackStandIn) -> None:
        create_job(kube, namespace, "idle-job")
        history(core, namespace, values, {"idle-job": 0})
        prometheus_url = start_prometheus()  # after the history: it is backfilled at start
        policy = write_policy(tmp_path / "p.yaml", namespace, warnBefore="1h", action="suspend", maxExtension="2d")
        self.runner = Runner(kube, build(
            namespaces=(namespace,), state_namespace=namespace, policy_paths=(str(policy),),
            prometheus_url=prometheus_url, scrape_interval=datetime.timedelta(seconds=15), slack_token=TOKEN,
            slack_api_url=standin.base_url, lifecycle=LifecycleSettings(pace=datetime.timedelta(0)),
            notice_retry=datetime.timedelta(0), app_token=APP_TOKEN))
        self.kube, self.namespace, self.standin = kube, namespace, standin
        self.metrics = Telemetry()
        self.woken = 0
        self.clicks = Clicks(kube, self.runner.ports.slack, self.runner.settings,
                             lambda: self.runner.memory.policies or (), self.metrics, self.wake)
        self.runner.run_cycle()
        self.channel, self.ts = self.warning()

    def wake(self) -> None:
        self.woken += 1

    def notes(self) -> dict[str, str]:
        return notes_of(self.kube, self.namespace, "idle-job")

    def warning(self) -> tuple[str, str]:
        via = self.notes()[a.WARNED_VIA].split()[1]
        channel, ts = via.split("/")
        return channel, ts

    def message(self, ts: str | None = None):
        return next(m for m in self.standin.messages(self.channel) if m.ts == (ts or self.ts))

    def clicked(self, what: str) -> float:
        return self.metrics.registry.get_sample_value("janitor_slack_clicks_total", dict(zip(
            ("button", "outcome"), what.split("/"), strict=True))) or 0


@pytest.fixture
def warned(kube, core, namespace, tmp_path, exporter_values, prometheus, standin) -> Warned:  # noqa: F811
    return Warned(kube, core, namespace, tmp_path, exporter_values, prometheus, standin)


def test_socket_mode_keep_why_and_a_strangers_click(warned: Warned, core, caplog) -> None:
    caplog.set_level(logging.INFO, logger="janitor.audit")
    receiver = SocketReceiver(APP_TOKEN, warned.clicks.handle, base_url=warned.standin.base_url)
    receiver.start()
    try:
        wait_until(receiver.connected, timeout=20, what="the Socket Mode connection")
        s, ch, ts = warned.standin, warned.channel, warned.ts
        assert s.click(BOB[1], ch, ts, "janitor.keep.1d")["acked"]  # no "Keep 3 days": the cap is 2 d
        wait_until(lambda: s.ephemeral(BOB[1]), timeout=10, what="bob's refusal")
        [refusal] = s.ephemeral(BOB[1])
        assert "Only the owner of Job" in refusal.text and ALICE[0] in refusal.text
        assert a.KEEP_UNTIL not in warned.notes()

        assert s.click(ALICE[1], ch, ts, "janitor.why")["acked"]
        wait_until(lambda: any(m.thread_ts == ts for m in s.messages(ch)), timeout=10, what="the answer to Why?")
        [answer] = [m for m in s.messages(ch) if m.thread_ts == ts]
        assert "Why Job" in answer.text and "peak 0" in answer.text

        before = time.time()
        assert s.click(ALICE[1], ch, ts, "janitor.keep.1d")["acked"]
        wait_until(lambda: a.KEEP_UNTIL in warned.notes(), timeout=10, what="janitor/keep-until")
        until = a.parse_expires(warned.notes()[a.KEEP_UNTIL]).timestamp()
        assert before + 86400 - 5 <= until <= time.time() + 86400 + 1
        wait_until(lambda: "Kept until" in str(warned.message().blocks), timeout=10, what="the message edited")
        shown = warned.message().blocks
        assert not any(b["type"] == "actions" and b["block_id"].endswith(warned.notes()[a.MARKED_UID])
                       for b in shown)
        assert f"by <@{ALICE[1]}>" in str(shown)
        assert "KeptFromSlack" in events(core, warned.namespace, "idle-job")
        counts = [warned.clicked(w) for w in ("keep/done", "why/done", "keep/not-allowed")]
        assert counts == [1, 1, 1]
        audited = [r for r in caplog.records if getattr(r, "click", False)]
        assert {(r.button, r.outcome) for r in audited} == {("keep", "done"), ("why", "done"), ("keep", "not-allowed")}
    finally:
        receiver.stop()


def test_signed_http_refuses_forged_stale_and_replayed_clicks(warned: Warned, core) -> None:
    receiver = HttpReceiver(SIGNING_SECRET, warned.clicks.handle, warned.clicks.refused, port=0, host="127.0.0.1")
    receiver.start()
    url = f"http://127.0.0.1:{receiver.port}{PATH}"
    try:
        s, ch, ts = warned.standin, warned.channel, warned.ts
        assert s.click(ALICE[1], ch, ts, "janitor.keep.1d", via="http", url=url, secret="forged")["status"] == 401
        old = int(time.time()) - 600
        assert s.click(ALICE[1], ch, ts, "janitor.keep.1d", via="http", url=url, timestamp=old)["status"] == 401
        time.sleep(1)
        assert a.KEEP_UNTIL not in warned.notes() and warned.clicked("unknown/forged") == 2

        assert s.click(ALICE[1], ch, ts, "janitor.keep.1d", via="http", url=url)["status"] == 200
        wait_until(lambda: a.KEEP_UNTIL in warned.notes(), timeout=10, what="janitor/keep-until")
        kept = warned.notes()[a.KEEP_UNTIL]
        time.sleep(1.5)  # a second click now would keep until a later second
        assert s.replay(url)["status"] == 200
        time.sleep(1.5)
        assert warned.notes()[a.KEEP_UNTIL] == kept and warned.clicked("unknown/replayed") == 1
        assert events(core, warned.namespace, "idle-job").count("KeptFromSlack") == 1
    finally:
        receiver.stop()


def test_release_on_an_old_warning_does_nothing_and_on_the_current_one_suspends(warned: Warned) -> None:
    receiver = HttpReceiver(SIGNING_SECRET, warned.clicks.handle, warned.clicks.refused, port=0, host="127.0.0.1")
    receiver.start()
    url = f"http://127.0.0.1:{receiver.port}{PATH}"
    try:
        s, ch, old_ts = warned.standin, warned.channel, warned.ts
        batch = client.BatchV1Api(warned.kube)
        unmark = {k: None for k in a.MARK_KEYS if k in warned.notes()}
        batch.patch_namespaced_job("idle-job", warned.namespace, {"metadata": {"annotations": unmark}})
        time.sleep(1.1)  # the new mark's marked-at is another second
        warned.runner.run_cycle()
        _, new_ts = warned.warning()
        assert new_ts != old_ts

        assert s.click(ALICE[1], ch, old_ts, "janitor.release", via="http", url=url)["status"] == 200
        wait_until(lambda: s.ephemeral(ALICE[1]), timeout=10, what="the answer to a stale click")
        assert "no longer marked as this message says" in s.ephemeral(ALICE[1])[0].text
        assert a.RELEASE not in warned.notes() and warned.woken == 0

        assert s.click(ALICE[1], ch, new_ts, "janitor.release", via="http", url=url)["status"] == 200
        wait_until(lambda: a.RELEASE in warned.notes(), timeout=10, what="janitor/release")
        assert warned.woken == 1
        wait_until(lambda: "Released by" in str(warned.message(new_ts).blocks), timeout=10, what="the message edited")
        result = warned.runner.run_cycle()
        acted = [(str(r.action.type), str(r.outcome)) for r in result.results if r.action.target.name == "idle-job"]
        assert acted == [("suspend", "done")]
        assert batch.read_namespaced_job("idle-job", warned.namespace).spec.suspend is True
    finally:
        receiver.stop()


def test_a_release_counts_only_for_the_action_it_answered(warned: Warned, tmp_path) -> None:
    """Released under suspend; before the rails let it through, the admin switches the policy to
    delete: the janitor warns of the delete, and the release, given for a suspend, deletes nothing,
    not even once that warning is delivered."""
    receiver = HttpReceiver(SIGNING_SECRET, warned.clicks.handle, warned.clicks.refused, port=0, host="127.0.0.1")
    receiver.start()
    url = f"http://127.0.0.1:{receiver.port}{PATH}"
    try:
        s = warned.standin
        assert s.click(ALICE[1], warned.channel, warned.ts, "janitor.release", via="http", url=url)["status"] == 200
        wait_until(lambda: a.RELEASE in warned.notes(), timeout=10, what="janitor/release")
        release = a.Release.parse(warned.notes()[a.RELEASE])
        assert release is not None and release.action == "suspend" and release.owner == f"email:{ALICE[0]}"
        write_policy(Path(warned.runner.settings.policy_paths[0]), warned.namespace, warnBefore="1h",
                     action="delete", maxExtension="2d")
        time.sleep(1.1)  # a delivery is recorded in whole seconds, rounded up: the next cycle comes after it
        warned.runner.run_cycle()  # the policy now deletes: warned again first
        assert warned.notes()[a.WARNED_OF].startswith("delete ")
        assert "will be deleted" in s.messages(warned.channel)[-1].text
        time.sleep(1.1)
        result = warned.runner.run_cycle()  # one cycle after that warning was delivered
        assert not [r for r in result.results if r.action.target.name == "idle-job"]
        assert "idle-job" in {j.metadata.name for j in client.BatchV1Api(warned.kube).list_namespaced_job(
            warned.namespace).items}
    finally:
        receiver.stop()
