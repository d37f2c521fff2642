"""`--log-format json|text` on every command: JSON lines for a log collector, text for a person.

Aspects covered:
- every command takes --log-format and its --help says what each form is and which is its default;
- `janitor run --once` logs text unless told json, and then every log line is one JSON object;
- a command that only logs errors (plan) logs them as JSON when told so.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_daemon_logs import dead_kubeconfig, janitor

from janitor import cli

COMMANDS = ["annotation", "check", "plan", "explain", "unmark", "keep", "node-agent", "admission", "rbac", "run"]


def test_the_commands_are_all_here() -> None:
    parser = cli.build_parser()
    [commands] = [a for a in parser._actions if a.dest == "command"]
    assert sorted(commands.choices) == sorted(COMMANDS)  # type: ignore[arg-type]


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_takes_a_log_format_and_says_its_default(command: str,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli.main([command, "--help"])
    shown = " ".join(capsys.readouterr().out.split())
    assert "--log-format {json,text}" in shown
    default = "json; text with --once" if command in ("run", "node-agent") else "text"
    assert f"(default: {default})" in shown


def test_run_once_logs_text_unless_told_json(tmp_path: Path) -> None:
    flags = ["run", "--once", "--kubeconfig", str(dead_kubeconfig(tmp_path)), "--kube-timeout", "2"]
    text = janitor(*flags).stderr.splitlines()
    assert text[0].startswith("INFO janitor: kube-idle-janitor ")
    logged = janitor(*flags, "--log-format", "json").stderr.splitlines()
    *lines, last = logged
    records = [json.loads(line) for line in lines]
    assert records[0]["message"].startswith("kube-idle-janitor ") and records[0]["level"] == "INFO"
    assert {"setting": "interval", "value": "1 min"}.items() <= records[1:][[r.get("setting") for r in records[1:]]
                                                                            .index("interval")].items()
    assert last.startswith("janitor run: ")  # the command's own one line stays a line for a person


def test_a_command_that_logs_only_errors_logs_them_as_json_when_told(tmp_path: Path) -> None:
    broken = tmp_path / "broken.yaml"
    broken.write_text("policies: [\n")
    flags = ["plan", "--policies", str(broken), "--kubeconfig", str(dead_kubeconfig(tmp_path)), "--kube-timeout", "2"]
    text = janitor(*flags).stderr.splitlines()
    assert text[0].startswith("janitor: policy file error")
    out = janitor(*flags, "--log-format", "json")
    assert out.returncode == 5
    *lines, last = out.stderr.splitlines()
    records = [json.loads(line) for line in lines]
    assert records and all(r["level"] == "ERROR" for r in records)
    assert records[0]["message"].startswith("policy file error")
    assert last.startswith("janitor plan: ")
