"""`kubectl janitor` without a cluster: what it reads from a workload's annotations, and what it prints.

Aspects covered:
- kubectl's spellings of the kinds (job, jobs, deploy, sts, cj, notebooks, po) and KIND/NAME;
  UNTIL as a duration from now or a UTC time; anything else is a usage error naming the forms;
- a workload's standing from its annotations alone: marked (not warned yet), warned, due, a
  broken mark, a copy of another object's mark, its own ttl/expires, only a keep-until; the
  deadline in force with a keep-until (to the cap, never earlier), the words and numbers from
  janitor/why, and a mark without janitor/why (older janitor) shown with its janitor/reason;
- keep refuses a time past the cap (saying it, and the command that keeps to it), any time when
  the policy allows no keeping, a time already past; without a known cap it writes, and says so;
  a workload's own janitor/ttl still deleting it is said;
- the status table (soonest first, namespace column with -A, -o wide's keep commands, the footer
  with the command), the explanation with the janitor's Events, and the janitor/v1 documents
  (Status, WorkloadStatus) in JSON and YAML;
- the namespace defaults to the kubeconfig context's (else `default`), and flags go before or after
  the command; no kubeconfig is one line and exit 3, a wrong kind one line and exit 2; --help
  teaches with examples and lists the exit codes.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from factories import NOW, obj

from janitor import annotations as a
from janitor import kubeapi
from janitor.decide.model import ObjectView
from janitor.plugin import entries, main, render
from janitor.plugin.entries import Entry, Event, Standing, UsageError
from janitor.why_note import WhyNote

H = datetime.timedelta(hours=1)
DAY = 24 * H
JOB = entries.kind_of("job")
PLUGIN = [sys.executable, "-m", "janitor.plugin.main"]


def t(when: datetime.datetime) -> str:
    return a.format_expires(when)


def note(marked: datetime.datetime, deadline: datetime.datetime, *, cap: datetime.timedelta | None = 7 * DAY,
         action: str = "delete") -> str:
    return WhyNote("idle-gpu", "idleGpu", action, "all-idle", "GPU 0 peaked at 0 % over the last 2 h",
                   {"window": "2h", "threshold": 5.0, "signal": "DCGM_FI_DEV_GPU_UTIL", "gpus": 1}, marked, deadline,
                   marked + cap if cap else None, a.format_duration(cap) if cap else "0s").encode()


def marked_job(*, marked: datetime.datetime = NOW - 3 * H, deadline: datetime.datetime = NOW + 21 * H,
               warned: datetime.datetime | None = NOW - 3 * H, why: bool = True, name: str = "train",
               uid: str | None = None, **extra: str) -> ObjectView:
    """A Job as the lifecycle leaves it: marked, and (unless `warned` is None) its warning delivered."""
    notes = {a.DEADLINE: t(deadline), a.POLICY: "idle-gpu", a.REASON: "idle: GPU 0 peak 0 (DCGM_FI_DEV_GPU_UTIL <= 5)",
             a.MARKED_AT: t(marked), a.MARKED_UID: uid or f"uid-{name}"}
    if why:
        notes[a.WHY] = note(marked, deadline)
    if warned is not None:
        notes |= {a.WARNED_AT: t(warned), a.WARNED_VIA: f"owner D0ALICE/{warned.timestamp():.6f}",
                  a.WARNED_OF: f"delete {t(deadline)}"}
    return obj(name, kind="Job", namespace="team-a", annotations=notes | extra, uid=f"uid-{name}")


def read(view: ObjectView, now: datetime.datetime = NOW) -> Entry:
    entry = entries.read(view, JOB, now)
    assert entry is not None
    return entry


# -- arguments -------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("text", "kind"), [
    ("job/train", "Job"), ("jobs/train", "Job"), ("Job/train", "Job"), ("job.batch/train", "Job"),
    ("deploy/web", "Deployment"), ("deployments/web", "Deployment"), ("sts/db", "StatefulSet"),
    ("statefulset/db", "StatefulSet"), ("cj/nightly", "CronJob"), ("cronjobs/nightly", "CronJob"),
    ("notebook/lab", "Notebook"), ("notebooks/lab", "Notebook"), ("po/p", "Pod"), ("pod/p", "Pod"),
])
def test_kubectl_spellings_of_the_kinds(text: str, kind: str) -> None:
    found, name = entries.parse_target(text)
    assert found.resource.kind == kind and name == text.split("/")[1]


@pytest.mark.parametrize("text", ["train", "job/", "/train", "job/team-a/train", "configmap/x", "replicaset/x"])
def test_what_names_no_workload_is_a_usage_error(text: str) -> None:
    with pytest.raises(UsageError, match="KIND/NAME|not a kind the janitor reclaims; use job"):
        entries.parse_target(text)


@pytest.mark.parametrize(("text", "until"), [
    ("2d", NOW + 2 * DAY), ("12h", NOW + 12 * H), ("90m", NOW + 90 * datetime.timedelta(minutes=1)),
    ("2026-12-01T18:00:00Z", datetime.datetime(2026, 12, 1, 18, tzinfo=datetime.timezone.utc)),
    ("2026-12-01", datetime.datetime(2026, 12, 1, tzinfo=datetime.timezone.utc)),
])
def test_until_is_a_duration_from_now_or_a_utc_time(text: str, until: datetime.datetime) -> None:
    assert entries.parse_until(text, NOW + datetime.timedelta(microseconds=5)) == until


@pytest.mark.parametrize("text", ["forever", "0s", "tomorrow", "2 days", "2026-12-01 18:00", "1.5h"])
def test_until_refuses_the_rest_with_the_forms(text: str) -> None:
    with pytest.raises(UsageError, match="2d"):
        entries.parse_until(text, NOW)


# -- what the annotations say --------------------------------------------------------------------------

def test_a_warned_mark_reads_with_its_numbers_deadline_and_cap() -> None:
    entry = read(marked_job())
    assert entry.standing is Standing.WARNED and entry.target == "job/train"
    assert (entry.policy, entry.trigger, entry.action, entry.code) == ("idle-gpu", "idleGpu", "delete", "all-idle")
    assert entry.deadline == NOW + 21 * H and entry.words == "GPU 0 peaked at 0 % over the last 2 h"
    assert entry.facts["window"] == "2h" and entry.keep_cap == NOW - 3 * H + 7 * DAY and entry.cap_known
    assert entry.warned_to == "owner" and entry.marked_at == NOW - 3 * H


@pytest.mark.parametrize(("keep", "deadline"), [
    pytest.param(NOW + 2 * DAY, NOW + 2 * DAY, id="within-cap"),
    pytest.param(NOW + 30 * DAY, NOW - 3 * H + 7 * DAY, id="capped"),
    pytest.param(NOW + H, NOW + 21 * H, id="never-earlier"),
    pytest.param("next week", NOW - 3 * H + 7 * DAY, id="not-a-time-keeps-to-the-cap"),
])
def test_keep_until_moves_the_deadline_as_the_janitor_will(keep: datetime.datetime | str,
                                                           deadline: datetime.datetime) -> None:
    entry = read(marked_job(**{a.KEEP_UNTIL: keep if isinstance(keep, str) else t(keep)}))
    assert entry.deadline == deadline
    assert (entry.kept_text == keep) if isinstance(keep, str) else (entry.kept_until == keep)


def test_standings() -> None:
    assert read(marked_job(warned=None)).standing is Standing.MARKED
    assert read(marked_job(deadline=NOW - H)).standing is Standing.DUE
    broken = read(marked_job(**{a.MARKED_AT: "yesterday"}))
    assert broken.standing is Standing.BROKEN and "janitor/marked-at='yesterday'" in broken.problems
    assert read(marked_job(uid="uid-of-another")).standing is Standing.COPY
    kept = read(obj("train", kind="Job", annotations={a.KEEP_UNTIL: t(NOW + DAY)}))
    assert kept.standing is Standing.KEPT and kept.kept_until == NOW + DAY and kept.deadline is None
    assert entries.read(obj("plain", kind="Job", annotations={"other": "x"}), JOB, NOW) is None


def test_its_own_ttl_or_expires_is_a_deletion_at_that_time() -> None:
    ttl = read(obj("t", kind="Job", created=NOW - DAY, annotations={a.TTL: "3d"}))
    assert ttl.standing is Standing.EXPIRES and ttl.deadline == NOW + 2 * DAY and ttl.action == "delete"
    assert ttl.own == "janitor/ttl=3d" and ttl.trigger == "expiry"
    expires = read(obj("e", kind="Job", annotations={a.EXPIRES: "2026-12-24"}))
    assert expires.deadline == datetime.datetime(2026, 12, 24, tzinfo=datetime.timezone.utc)
    forever = read(obj("f", kind="Job", annotations={a.TTL: "forever"}))
    assert forever.deadline is None and forever.action is None
    typo = read(obj("x", kind="Job", annotations={a.TTL: "7 days"}))
    assert typo.deadline is None and "not a duration" in typo.words
    # Beside a mark, janitor/expires is the janitor's; a ttl stays the owner's.
    both = read(marked_job(**{a.TTL: "30d"}))
    assert both.standing is Standing.WARNED and both.own == "janitor/ttl=30d"


def test_a_mark_without_janitor_why_shows_its_words_and_no_cap() -> None:
    entry = read(marked_job(why=False))
    assert entry.standing is Standing.WARNED and entry.words.startswith("idle: GPU 0 peak 0")
    assert not entry.cap_known and entry.keep_cap is None and entry.action == "delete"  # from janitor/warned-of


# -- keep --------------------------------------------------------------------------------------------------

def test_keep_past_the_cap_is_refused_saying_the_cap() -> None:
    entry = read(marked_job())
    cap = t(NOW - 3 * H + 7 * DAY)
    decision = entries.decide_keep(entry, "job/train", NOW + 30 * DAY, NOW)
    assert decision.refused == (f"job/train: {t(NOW + 30 * DAY)} is past the cap of policy idle-gpu, {cap} "
                                f"(maxExtension 1w after it was first marked); keep it until then at most: "
                                f"kubectl janitor keep job/train {cap}")
    assert entries.decide_keep(entry, "job/train", NOW - 3 * H + 7 * DAY, NOW).refused is None  # the cap itself


def test_keep_is_refused_when_the_policy_allows_none_and_for_a_past_time() -> None:
    notes = dict(marked_job().annotations) | {a.WHY: note(NOW - 3 * H, NOW + 21 * H, cap=None)}
    entry = read(obj("train", kind="Job", annotations=notes, uid="uid-train"))
    refused = entries.decide_keep(entry, "job/train", NOW + DAY, NOW).refused
    assert refused is not None and "policy idle-gpu lets no one keep a workload (maxExtension 0s)" in refused
    past = entries.decide_keep(read(marked_job()), "job/train", NOW - H, NOW).refused
    assert past is not None and "has already passed" in past


def test_keep_without_a_known_cap_writes_and_says_so() -> None:
    decision = entries.decide_keep(read(marked_job(why=False)), "job/train", NOW + 30 * DAY, NOW)
    assert decision.refused is None and any("maxExtension" in n for n in decision.notes)
    unmarked = entries.decide_keep(None, "job/train", NOW + 2 * DAY, NOW)
    assert unmarked.refused is None and any("not marked now" in n for n in unmarked.notes)


def test_keep_says_when_its_own_ttl_still_deletes_it() -> None:
    entry = read(obj("t", kind="Job", created=NOW - DAY, annotations={a.TTL: "3d"}))
    decision = entries.decide_keep(entry, "job/t", NOW + 5 * DAY, NOW)
    assert decision.refused is None
    assert any(f"janitor/ttl=3d still deletes it at {t(NOW + 2 * DAY)}" in n for n in decision.notes)


# -- what it prints ----------------------------------------------------------------------------------------

def test_the_status_table_soonest_first_with_the_command_to_keep() -> None:
    later = read(marked_job(name="later", deadline=NOW + 3 * DAY, marked=NOW - H))
    sooner = read(marked_job(name="sooner", **{a.KEEP_UNTIL: t(NOW + DAY)}))
    text = render.status_table([sooner, later], NOW, all_namespaces=False, wide=False, show_namespace=False)
    header, first, second, _, footer = text.split("\n")
    assert header.split() == ["WORKLOAD", "POLICY", "ACTION", "DEADLINE", "KEPT-UNTIL", "WHY"]
    assert first.startswith("job/sooner") and "2026-11-24 12:00Z (in 1 d)" in first  # kept: the deadline moved
    assert "idle-gpu  delete" in first and first.endswith("GPU 0 peaked at 0 % over the last 2 h")
    assert "2026-11-26 12:00Z (in 3 d)" in second
    assert footer.startswith("To keep one: kubectl janitor keep job/sooner 2d")
    wide = render.status_table([sooner], NOW, all_namespaces=True, wide=True, show_namespace=True)
    assert wide.split("\n")[0].split()[:2] == ["NAMESPACE", "WORKLOAD"] and "TO-KEEP" in wide
    assert "kubectl janitor keep job/sooner 2d -n team-a" in wide and "To keep one" not in wide


def test_due_and_near_cap_are_said_in_the_row() -> None:
    due = read(marked_job(deadline=NOW - 2 * H))
    assert "(due, 2 h ago)" in render.status_table([due], NOW, all_namespaces=False, wide=False,
                                                   show_namespace=False)
    near = read(marked_job(marked=NOW - 7 * DAY + H, deadline=NOW + 10 * H))
    assert render.keep_command(near, NOW) == f"kubectl janitor keep job/train {t(NOW + H)}"  # the cap is sooner


def test_the_explanation_has_the_numbers_cap_command_and_events() -> None:
    entry = read(marked_job())
    events = [Event(NOW - 3 * H, "Normal", "IdleMarked", "marked: idle: GPU 0 peak 0"),
              Event(NOW - 3 * H, "Normal", "IdleWarned", "warned", 2)]
    text = render.explain_text("job/train", "team-a", entry, events, NOW)
    assert text.startswith("job/train in namespace team-a: warned")
    for shown in ("what happens    deleted, at 2026-11-24 09:00Z (in 21 h)",
                  "why             GPU 0 peaked at 0 % over the last 2 h",
                  "judged by       policy idle-gpu, trigger idleGpu: window 2h, threshold 5, "
                  "signal DCGM_FI_DEV_GPU_UTIL, gpus 1  [all-idle]",
                  "warned          2026-11-23 09:00Z (3 h ago), on Slack, to its owner",
                  "keep cap        2026-11-30 09:00Z (in 6 d 21 h), maxExtension 1w after the first mark",
                  "to keep it      kubectl janitor keep job/train 2d",
                  "janitor/reason  idle: GPU 0 peak 0", "IdleWarned (x2)", "Events from the janitor, oldest first:"):
        assert shown in text, shown
    assert "nothing from the janitor" in render.explain_text("job/x", "team-a", None, [], NOW)


def test_status_as_a_janitor_v1_document() -> None:
    entry = read(marked_job(**{a.KEEP_UNTIL: t(NOW + DAY)}))
    document = render.status_document([entry], NOW, "team-a", [])
    parsed = json.loads(render.dump(document, "json"))
    assert parsed == yaml.safe_load(render.dump(document, "yaml"))
    assert (parsed["apiVersion"], parsed["kind"], parsed["namespace"], parsed["now"]) == (
        "janitor/v1", "Status", "team-a", "2026-11-23T12:00:00Z")
    [item] = parsed["items"]
    assert item["object"] == {"kind": "Job", "apiVersion": "batch/v1", "namespace": "team-a", "name": "train",
                              "uid": "uid-train"}
    assert (item["state"], item["policy"], item["trigger"], item["action"]) == ("warned", "idle-gpu", "idleGpu",
                                                                                 "delete")
    assert item["deadline"] == "2026-11-24T12:00:00Z" and item["deadlineInSeconds"] == 86400
    assert item["why"]["code"] == "all-idle" and item["why"]["facts"]["threshold"] == 5.0
    assert item["keepCap"] == "2026-11-30T09:00:00Z" and item["keptUntil"] == "2026-11-24T12:00:00Z"
    assert item["keepCommand"] == "kubectl janitor keep job/train 2d" and item["maxExtension"] == "1w"
    explained = json.loads(render.dump(render.workload_document(entry.ref, entry, [
        Event(NOW, "Normal", "IdleMarked", "m")], NOW), "json"))
    assert explained["kind"] == "WorkloadStatus" and explained["status"]["state"] == "warned"
    assert explained["events"] == [{"time": "2026-11-23T12:00:00Z", "type": "Normal", "reason": "IdleMarked",
                                    "message": "m", "count": 1}]


def test_only_the_janitors_events() -> None:
    mine = {"source": {"component": "kube-idle-janitor"}, "reason": "IdleMarked", "message": "m", "type": "Normal",
            "lastTimestamp": "2026-11-23T12:00:00Z", "count": 3}
    assert entries.event_of(mine) == Event(NOW, "Normal", "IdleMarked", "m", 3)
    agent = {"reportingComponent": "kube-idle-janitor-node-agent", "reason": "OOMKillInPod",
             "eventTime": "2026-11-23T12:00:00.123456Z"}
    assert entries.event_of(agent) is not None
    assert entries.event_of({"source": {"component": "job-controller"}, "reason": "Completed"}) is None


# -- the command line -------------------------------------------------------------------------------------

def kubeconfig(path: Path, *contexts: tuple[str, str | None]) -> Path:
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": contexts[0][0],
        "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1", "insecure-skip-tls-verify": True}}],
        "users": [{"name": "me", "user": {"token": "t0ken"}}],
        "contexts": [{"name": n, "context": {"cluster": "c", "user": "me", **({"namespace": ns} if ns else {})}}
                     for n, ns in contexts]}))
    return path


def test_the_namespace_is_the_contexts_as_kubectl_takes_it(tmp_path: Path) -> None:
    path = str(kubeconfig(tmp_path / "k", ("lab", "team-a"), ("bare", None)))
    assert kubeapi.context_namespace(path) == "team-a"
    assert kubeapi.context_namespace(path, context="bare") == "default"
    assert kubeapi.context_namespace(None, environ={"KUBECONFIG": path, "HOME": str(tmp_path)}) == "team-a"


def test_flags_go_before_or_after_the_command() -> None:
    parser = main.build_parser()
    after = parser.parse_args(["status", "-n", "team-a", "-o", "json", "--context", "lab"])
    before = parser.parse_args(["-n", "team-a", "--context", "lab", "status", "-o", "json"])
    assert (after.namespace, after.context) == (before.namespace, before.context) == ("team-a", "lab")
    assert parser.parse_args(["keep", "job/x", "2d"]).namespace is None


def run(*args: str, home: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST")}
    out = subprocess.run([*PLUGIN, *args], capture_output=True, text=True, timeout=60, env={**env, "HOME": str(home)})
    assert "Traceback" not in out.stderr, out.stderr
    return out


def test_expected_failures_are_one_line_and_an_exit_code(tmp_path: Path) -> None:
    out = run("status", home=tmp_path)
    assert out.returncode == 3 and out.stderr.startswith("kubectl janitor status: no --kubeconfig")
    assert len(out.stderr.splitlines()) == 1
    out = run("keep", "replicaset/x", "2d", home=tmp_path)
    assert out.returncode == 2 and out.stderr.splitlines() == [
        "kubectl janitor keep: 'replicaset' is not a kind the janitor reclaims; use "
        "job, cronjob (cj), deployment (deploy), statefulset (sts), notebook, pod, resourceclaim"]
    out = run("explain", "job/x", "--kubeconfig", str(kubeconfig(tmp_path / "k", ("lab", "team-a"))), home=tmp_path)
    assert out.returncode == 5 and len(out.stderr.splitlines()) == 1 and "did not answer" in out.stderr


def test_help_teaches_with_examples_and_exit_codes(tmp_path: Path) -> None:
    out = run("--help", home=tmp_path)
    assert out.returncode == 0
    for shown in ("kubectl janitor status", "kubectl janitor keep job/train 2d", "kubectl janitor explain job/train",
                  "-A", "exit codes:", "4  not allowed (HTTP 401/403)", "view", "edit"):
        assert shown in out.stdout, shown


def test_the_table_is_cut_to_the_terminal_unless_wide(monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """As `janitor plan`: cut to $COLUMNS on a terminal, whole lines with -o wide or into a pipe."""
    found = [read(marked_job())]
    monkeypatch.setattr(main, "_connect", lambda args: (None, "team-a"))
    monkeypatch.setattr(main, "_list", lambda api, scope, now: (found, []))
    monkeypatch.setattr(kubeapi, "context_namespace", lambda *args, **kwargs: "team-a")
    monkeypatch.setenv("COLUMNS", "60")
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    assert main.main(["status"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert max(len(line) for line in lines) == 60 and lines[1].endswith("…")
    assert main.main(["status", "-o", "wide"]) == 0
    assert max(len(line) for line in capsys.readouterr().out.splitlines()) > 60
    monkeypatch.setattr(sys.stdout, "isatty", lambda: False)
    assert main.main(["status"]) == 0
    assert capsys.readouterr().out.splitlines()[1].endswith("over the last 2 h")


# -- a mark someone else wrote on --------------------------------------------------------------------------

def written_by_others(view: ObjectView, *keys: str) -> ObjectView:
    return dataclasses.replace(view, foreign_marks=frozenset(keys))


def test_keep_on_a_mark_whose_marked_at_someone_else_wrote_is_refused_saying_why() -> None:
    """The janitor honours no keep-until on such a mark: the researcher learns it now, not at the deadline."""
    view = written_by_others(marked_job(**{a.MARKED_AT: t(NOW + 30 * DAY)}), a.MARKED_AT)
    entry = read(view)
    assert entry.standing is Standing.WARNED and entry.keep_cap is None and entry.foreign == (a.MARKED_AT,)
    refused = entries.decide_keep(entry, "job/train", NOW + DAY, NOW).refused
    assert refused is not None and "janitor/marked-at on it was not written by the janitor" in refused
    assert "janitor unmark" in refused
    shown = render.explain_text("job/train", "team-a", entry, [], NOW)
    assert "not the janitor's" in shown and "janitor/marked-at" in shown
    assert render.item(entry, NOW)["writtenByOthers"] == ["janitor/marked-at"]
    assert render.keep_command(entry, NOW) == ""


def test_a_why_note_or_deadline_someone_else_wrote_shows_nothing_of_theirs() -> None:
    forged = note(NOW - 3 * H, NOW + 90 * DAY, cap=365 * DAY)
    view = written_by_others(marked_job(warned=None, **{a.WHY: forged, a.DEADLINE: t(NOW + 90 * DAY)}), a.WHY,
                             a.DEADLINE)
    entry = read(view)
    assert entry.standing is Standing.MARKED and entry.deadline is None and entry.keep_cap is None
    assert not entry.cap_known and entry.words.startswith("idle: GPU 0 peak 0")  # janitor/reason, as written
    forged_warning = read(written_by_others(marked_job(), a.WARNED_AT))
    assert forged_warning.standing is Standing.MARKED and forged_warning.warned_at is None


def test_a_why_note_of_another_mark_gives_no_cap() -> None:
    """Someone rewrote janitor/why with a far cap (and its own markedAt); the janitor later rewrote the
    note's deadline, so the note reads as the janitor's: its markedAt still is not the mark's."""
    forged = note(NOW - 3 * H + 60 * DAY, NOW + 21 * H, cap=365 * DAY)
    entry = read(marked_job(**{a.WHY: forged}))
    assert entry.keep_cap is None and not entry.cap_known
