"""`janitor check` as an admin meets it.

Aspects covered:
- valid files: exit 0, a summary in first-match order (name, mode, triggers, match), nothing on
  stderr; the shipped examples show as inert;
- invalid files: exit 1, each error as `file:line: field: problem` on stderr, nothing on stdout;
- `janitor check --help` teaches first match wins and points at docs/policies.md;
- the installed console script gives the same exit codes.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from janitor import cli

ROOT = Path(__file__).resolve().parents[2]

GOOD = """\
policies:
  - name: first
    match: {namespaces: {include: ["team-*"], exclude: [team-infra]}, kinds: [Job]}
    triggers:
      idleGpu: {threshold: 3, window: 90m}
  - name: second
    mode: enforce
    match:
      namespaces: {include: ["*"]}
      podSelector: {matchLabels: {app: web}}
    triggers:
      idleCpu: {cores: 0.25, ignoreContainers: [istio-proxy]}
      terminating: {after: 1h}
"""

BAD = """\
policies:
  - name: first
    match: {namespaces: {include: ["*"]}}
    triggers:
      idleGpu:
        window: 30 minutes
"""


def test_valid_file_prints_summary(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "p.yaml"
    path.write_text(GOOD)
    assert cli.main(["check", str(path)]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    lines = out.splitlines()
    assert lines[0] == f"1. first [shadow] ({path}:2)"
    assert "namespaces team-*; except team-infra; kinds Job" in lines[1]
    assert "idleGpu: DCGM_FI_DEV_GPU_UTIL peak <= 3 per GPU over 90m" in lines[2]
    assert lines[4] == f"2. second [enforce] ({path}:6)"
    assert "pod labels app=web" in out
    assert "idleCpu: peak <= 0.25 cores over 2h (gaps <= 4 scrape intervals (>= 1m)), ignoring istio-proxy" in out
    assert "terminating: after 1h" in out
    assert lines[-1] == "OK: 2 policies in 1 file, in first-match order."


def test_invalid_file_prints_errors_and_fails(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "idle-gpu.yaml"
    path.write_text(BAD)
    assert cli.main(["check", str(path)]) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert err.splitlines()[0] == (
        f"{path}:6: triggers.idleGpu.window: '30 minutes' is not a duration (e.g. 30m, 8h, 7d)"
    )
    assert "docs/policies.md" in err


def test_examples_check_clean(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["check", str(ROOT / "policies")]) == 0
    out = capsys.readouterr().out
    assert "NONE (inert until edited)" in out and "[enforce]" not in out


def test_help_teaches_first_match_and_the_docs(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        cli.main(["check", "--help"])
    assert done.value.code == 0
    out = " ".join(capsys.readouterr().out.split())
    for expected in ("First match wins", "docs/policies.md", "sorted by name", "shadow", "janitor check policies/"):
        assert expected in out


@pytest.mark.parametrize(("text", "code"), [(GOOD, 0), (BAD, 1)], ids=["valid", "invalid"])
def test_console_script_exit_codes(tmp_path: Path, text: str, code: int) -> None:
    script = shutil.which("janitor", path=str(Path(sys.executable).parent))
    assert script, "console script 'janitor' not installed next to this Python"
    path = tmp_path / "p.yaml"
    path.write_text(text)
    result = subprocess.run([script, "check", str(path)], capture_output=True, text=True, timeout=60)
    assert result.returncode == code, result.stderr
    assert (f"{path}:6: triggers.idleGpu.window:" in result.stderr) is (code == 1)
