"""The `janitor` command as a user meets it.

Aspects covered:
- `janitor --help` teaches: what the janitor does, the annotation formats, an example;
- `janitor annotation` explains valid values and exits 0, names the valid forms for invalid ones
  and exits 1, and rejects input that is not KEY=VALUE or not a user annotation;
- `janitor annotation` and `janitor check` hold values to the daemon's bounds: a TTL or policy
  duration of at most 100 years (36500d), times in the years 1000 to 8999, time zones zoneinfo
  loads (not `Europe`, a directory of the database); deep nesting or a 5,000-digit number in a
  policy file is a `file:line:` error with exit 1, never a traceback;
- the console script is installed and runs.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from janitor import cli


def test_help_teaches(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        cli.main(["--help"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    for expected in ("idle", "janitor/ttl", "janitor/expires", "forever", "YYYY-MM-DD", "examples:"):
        assert expected in out


@pytest.mark.parametrize(
    ("assignment", "meaning"),
    [
        ("janitor/ttl=7d", "older than 7 d (604800 s after creation)"),
        ("janitor/ttl=forever", "forever"),
        ("janitor/expires=2026-12-24", "after 2026-12-24T00:00:00+00:00"),
        ("janitor/expires=2026-12-24T18:30", "after 2026-12-24T18:30:00+00:00"),
    ],
    ids=["ttl-days", "ttl-forever", "expires-date", "expires-minutes"],
)
def test_annotation_explains_valid_values(assignment: str, meaning: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["annotation", assignment]) == 0
    assert meaning in capsys.readouterr().out


@pytest.mark.parametrize(
    ("assignment", "message"),
    [
        ("janitor/ttl=30 minutes", "30m"),
        ("janitor/expires=tomorrow", "2019-02-25 (UTC"),
        ("janitor/ttl", "expected KEY=VALUE"),
        ("janitor/policy=idle-gpu", "not an annotation users set"),
    ],
    ids=["ttl-words", "expires-words", "no-equals", "janitor-owned-key"],
)
def test_annotation_rejects_with_the_valid_forms(
    assignment: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["annotation", "janitor/ttl=1h", assignment]) == 1
    captured = capsys.readouterr()
    assert message in captured.err
    assert "janitor/ttl=1h:" in captured.out  # the valid one is still explained


@pytest.mark.parametrize(
    ("assignment", "meaning"),
    [
        ("janitor/ttl=36500d", "(3153600000 s after creation)"),
        ("janitor/expires=8999-12-31T23:59:59Z", "after 8999-12-31T23:59:59+00:00"),
        ("janitor/keep-until=2026-12-24T18:00", "not reclaimed before 2026-12-24T18:00:00+00:00"),
        ("janitor/time-zone=America/New_York", "working hours counted in America/New_York"),
    ],
    ids=["ttl-at-the-bound", "expires-at-the-bound", "keep-until", "time-zone"],
)
def test_annotation_explains_values_up_to_the_bounds(assignment: str, meaning: str,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["annotation", assignment]) == 0
    assert meaning in capsys.readouterr().out


@pytest.mark.parametrize(
    ("assignment", "message"),
    [
        ("janitor/ttl=3000000d", "too large, at most 36500d (100 years)"),
        ("janitor/ttl=36501d", "too large, at most 36500d (100 years)"),
        ("janitor/expires=9999-12-31", "out of range: years 1000 to 8999"),
        ("janitor/expires=0001-01-01", "out of range: years 1000 to 8999"),
        ("janitor/keep-until=9999-12-31T23:59:59Z", "out of range: years 1000 to 8999"),
        ("janitor/time-zone=Europe", "'Europe' is not an IANA time zone"),
        ("janitor/time-zone=" + "a" * 300, "is not an IANA time zone"),
    ],
    ids=["ttl-as-found", "ttl-a-day-past", "expires-year-9999", "expires-year-1", "keep-until-year-9999",
         "zone-directory", "zone-300-chars"],
)
def test_annotation_rejects_values_past_the_bounds(assignment: str, message: str,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["annotation", assignment]) == 1
    captured = capsys.readouterr()
    assert message in captured.err and captured.out == ""


_POLICY = """\
policies:
  - name: first
    match: {namespaces: {include: ["*"]}}
    triggers:
      idleGpu: {window: 2h}
    lifecycle:
      maxExtension: 7d
"""


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (_POLICY.replace("maxExtension: 7d", "maxExtension: 99999999d"),
         "{path}:7: lifecycle.maxExtension: '99999999d' is out of range: at most 36500d (100 years)"),
        (_POLICY.replace("maxExtension: 7d", "workingHours: {timeZone: Europe}"),
         "{path}:7: lifecycle.workingHours.timeZone: 'Europe' is not an IANA time zone"),
        (_POLICY.replace("window: 2h", "threshold: " + "9" * 5000),
         "{path}:5: triggers.idleGpu.threshold: 9999"),
        ("policies: " + "[" * 2000 + "]" * 2000 + "\n",
         "{path}:1: too deep: nested more than 64 levels"),
    ],
    ids=["max-extension-as-found", "zone-directory", "number-of-5000-digits", "2000-nested-brackets"],
)
def test_check_reports_what_the_daemon_refuses(tmp_path: Path, text: str, expected: str,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "p.yaml"
    path.write_text(text)
    assert cli.main(["check", str(path)]) == 1
    out, err = capsys.readouterr()
    assert out == ""
    first = err.splitlines()[0]
    assert first.startswith(expected.format(path=path)), first
    assert len(first) < 400 and "Traceback" not in err


def test_no_command_prints_help_and_fails(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main([]) == 2
    assert "usage: janitor" in capsys.readouterr().out


def test_console_script_runs() -> None:
    script = shutil.which("janitor", path=str(Path(sys.executable).parent))
    assert script, "console script 'janitor' not installed next to this Python"
    result = subprocess.run([script, "annotation", "janitor/ttl=2w"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert "1209600 s" in result.stdout


def test_rbac_prints_role_and_binding_for_the_kinds(capsys: pytest.CaptureFixture[str]) -> None:
    import yaml

    assert cli.main(["rbac", "--kinds", "ConfigMap,Job,notebooks.kubeflow.org/v1", "--namespace", "ops"]) == 0
    role, binding, state_role, state_binding = yaml.safe_load_all(capsys.readouterr().out)
    rules = {(tuple(r["apiGroups"]), tuple(r["resources"])): r["verbs"] for r in role["rules"]}
    # watch: the daemon lists each kind once, then follows it; no create anywhere but its namespace
    assert rules[(("",), ("configmaps",))] == ["get", "list", "watch", "delete", "patch"]
    assert state_role["kind"] == "Role" and state_role["metadata"]["namespace"] == "ops"
    assert state_role["rules"] == [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["create"]}]
    assert state_binding["roleRef"]["name"] == state_role["metadata"]["name"]
    assert state_binding["subjects"] == [{"kind": "ServiceAccount", "name": "kube-idle-janitor", "namespace": "ops"}]
    assert rules[(("batch",), ("jobs",))] == ["get", "list", "watch", "delete", "patch"]
    assert rules[(("kubeflow.org",), ("notebooks",))] == ["get", "list", "watch", "delete", "patch"]
    assert rules[(("",), ("events",))] == ["create", "patch", "list", "watch"]  # the node agent's OOM Events
    assert rules[(("",), ("nodes",))] == ["get", "list", "watch"]  # pending pods are judged against every node
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "kube-idle-janitor", "namespace": "ops"}]


def test_idle_options_reach_the_settings() -> None:
    from janitor.decide.selection import CronJobMode
    from janitor.settings import from_args

    args = cli.build_parser().parse_args([
        "plan", "--policies", "policies/", "--prometheus-url", "http://p:9090", "--dcgm-labels", "direct",
        "--cronjob-target", "cronjob", "--owner-key", "label:team.example.com/owner",
        "--prometheus-matcher", 'cluster="mn2"',
    ])
    settings = from_args(args)
    assert settings.policy_paths == ("policies/",) and settings.prometheus.url == "http://p:9090"
    assert settings.prometheus.dcgm_labels == "direct" and settings.cluster.cronjob_target is CronJobMode.CRONJOB
    assert settings.cluster.owner_keys == (("label", "team.example.com/owner"),)
    assert settings.prometheus.extra_matchers == ('cluster="mn2"',)
    with pytest.raises(SystemExit, match="expected annotation:KEY or label:KEY"):
        from_args(cli.build_parser().parse_args(["plan", "--owner-key", "owner"]))


@pytest.mark.parametrize("command", ["plan", "run", "unmark", "explain"])
def test_every_command_gets_the_one_set_of_defaults(command: str) -> None:
    """A command's parsed defaults and the Settings dataclasses' defaults are the same settings."""
    from janitor.settings import DEFAULTS, from_args

    argv = [command, "Job/ns/x"] if command == "explain" else [command]
    settings = from_args(cli.build_parser().parse_args(argv))
    assert settings.rails == DEFAULTS.rails and settings.lifecycle == DEFAULTS.lifecycle
    assert settings.cluster == DEFAULTS.cluster and settings.interval == DEFAULTS.interval
    assert settings.prometheus.scrape_interval == DEFAULTS.prometheus.scrape_interval


def test_rbac_prints_the_node_agents_narrow_role(capsys) -> None:
    import yaml

    from janitor.cli import main

    assert main(["rbac", "--node-agent", "--name", "agent", "--service-account", "agent"]) == 0
    role, binding = yaml.safe_load_all(capsys.readouterr().out)
    verbs = {r["resources"][0]: r["verbs"] for r in role["rules"]}
    assert verbs == {"pods": ["list"], "nodes": ["get"], "nodes/status": ["patch"], "events": ["create"]}
    assert binding["subjects"][0]["name"] == "agent"
