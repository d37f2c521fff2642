"""The `janitor` command from a laptop, before any cluster answers.

Aspects covered:
- credentials are found as kubectl finds them: --kubeconfig, then $KUBECONFIG (several files,
  merged), then ~/.kube/config, then the in-cluster ServiceAccount; --context picks a context;
- no kubeconfig at all, a broken one, a missing file and an unknown context each end in one line
  on stderr (what failed, what to do) and exit 3, never a traceback; an apiserver that does not
  answer is one line and exit 5;
- `janitor annotation` explains every annotation users set (opt-out and owner too), and refuses a
  duration for janitor/keep-until with the command that takes one;
- the exit codes are in `janitor --help`.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from janitor import cli, errors, kubeapi

JANITOR = [sys.executable, "-m", "janitor.cli"]


def kubeconfig(path: Path, *contexts: tuple[str, str], current: str | None = None) -> Path:
    """A kubeconfig whose contexts (name, server) use a token; no server needs to exist."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": current or contexts[0][0],
        "clusters": [{"name": n, "cluster": {"server": s, "insecure-skip-tls-verify": True}} for n, s in contexts],
        "users": [{"name": "me", "user": {"token": "t0ken"}}],
        "contexts": [{"name": n, "context": {"cluster": n, "user": "me"}} for n, _ in contexts],
    }))
    return path


@pytest.fixture
def laptop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A home directory, and an environment with no KUBECONFIG and no in-cluster service."""
    home = tmp_path / "home"
    home.mkdir()
    for name in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(home))
    return home


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*JANITOR, *args], capture_output=True, text=True, timeout=60, env=os.environ.copy())


def test_credentials_are_found_in_kubectls_order(laptop: Path, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    kubeconfig(laptop / ".kube" / "config", ("home", "https://home.example:6443"))
    assert kubeapi.connect(None).configuration.host == "https://home.example:6443"

    first = kubeconfig(tmp_path / "a.yaml", ("a", "https://a.example:6443"))
    second = kubeconfig(tmp_path / "b.yaml", ("b", "https://b.example:6443"))
    monkeypatch.setenv("KUBECONFIG", os.pathsep.join([str(first), str(second)]))
    assert kubeapi.connect(None).configuration.host == "https://a.example:6443"
    assert kubeapi.connect(None, context="b").configuration.host == "https://b.example:6443"  # merged

    flag = kubeconfig(tmp_path / "flag.yaml", ("flag", "https://flag.example:6443"))
    client = kubeapi.connect(str(flag))
    assert client.configuration.host == "https://flag.example:6443"
    assert not client.in_cluster


def test_context_picks_the_cluster(laptop: Path, tmp_path: Path) -> None:
    path = kubeconfig(tmp_path / "two.yaml", ("lab", "https://lab.example:6443"), ("prod", "https://prod.example:6443"))
    assert kubeapi.connect(str(path), context="prod").configuration.host == "https://prod.example:6443"
    assert kubeapi.connect(str(path)).configuration.host == "https://lab.example:6443"


def test_in_cluster_only_without_any_kubeconfig(laptop: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    with pytest.raises(errors.ConfigError, match="in-cluster ServiceAccount"):  # no token file on this machine
        kubeapi.connect(None)
    kubeconfig(laptop / ".kube" / "config", ("home", "https://home.example:6443"))
    assert kubeapi.connect(None).configuration.host == "https://home.example:6443"


@pytest.mark.parametrize("command", [["plan"], ["explain", "Job/team-a/train"], ["keep", "Job/team-a/train", "2d"],
                                     ["unmark", "--dry-run"], ["run", "--once", "--dry-run"]])
def test_no_kubeconfig_is_one_line_and_exit_3(laptop: Path, command: list[str]) -> None:
    out = run(*command)
    assert out.returncode == 3, out.stderr
    assert out.stderr.count("\n") == 1 and "Traceback" not in out.stderr
    assert "~/.kube/config does not exist" in out.stderr and "--kubeconfig" in out.stderr


def test_broken_missing_and_unknown_context_are_one_line_each(laptop: Path, tmp_path: Path) -> None:
    broken = tmp_path / "broken.yaml"
    broken.write_text("clusters: [\n")
    no_context = tmp_path / "empty.yaml"
    no_context.write_text("apiVersion: v1\nkind: Config\n")
    good = kubeconfig(tmp_path / "good.yaml", ("lab", "https://lab.example:6443"), ("prod", "https://p.example:6443"))
    cases = [
        (["--kubeconfig", str(broken)], f"--kubeconfig {broken}: not a usable kubeconfig"),
        (["--kubeconfig", str(no_context)], "current-context"),
        (["--kubeconfig", str(tmp_path / "nope.yaml")], "nope.yaml: no such file"),
        (["--kubeconfig", str(good), "--context", "staging"], "no context 'staging'; it has lab, prod"),
    ]
    for flags, said in cases:
        out = run("plan", *flags)
        assert out.returncode == 3, (flags, out.stderr)
        assert said in out.stderr, (flags, out.stderr)
        assert out.stderr.count("\n") == 1 and "Traceback" not in out.stderr


def test_an_apiserver_that_does_not_answer_is_one_line_and_exit_5(laptop: Path, tmp_path: Path) -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    path = kubeconfig(tmp_path / "down.yaml", ("down", f"https://127.0.0.1:{port}"))
    out = run("plan", "--kubeconfig", str(path), "--kube-timeout", "3")
    assert out.returncode == 5, out.stderr
    assert f"127.0.0.1:{port}: connection refused" in out.stderr
    assert "check the network" in out.stderr
    assert out.stderr.count("\n") == 1 and "Traceback" not in out.stderr


@pytest.mark.parametrize(("assignment", "meaning"), [
    ("janitor/opt-out=true", "leaves the object alone"),
    ("janitor/opt-out=false", "not opted out"),
    ("janitor/owner=alice@lab.org", "Slack user with the e-mail alice@lab.org"),
    ("janitor/owner=U0123ABCD", "Slack user U0123ABCD"),
    ("janitor/owner=#team-ml", "Slack channel #team-ml"),
    ("janitor/keep-until=2026-12-01T18:00:00Z", "not reclaimed before 2026-12-01T18:00:00+00:00"),
])
def test_annotation_explains_every_annotation_users_set(assignment: str, meaning: str,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["annotation", assignment]) == 0
    assert meaning in capsys.readouterr().out


@pytest.mark.parametrize(("assignment", "message"), [
    ("janitor/opt-out=yes", 'only "true" opts out'),
    ("janitor/owner=alice", "give an e-mail (alice@lab.org), a Slack user id"),
    ("janitor/keep-until=2d", "run `janitor keep KIND/NAMESPACE/NAME 2d`"),
])
def test_annotation_refuses_what_the_janitor_would_misread(assignment: str, message: str,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["annotation", assignment]) == 1
    assert message in capsys.readouterr().err


def test_help_lists_the_exit_codes(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    out = capsys.readouterr().out
    for line in ("exit codes:", "3  no kubeconfig", "4  credentials refused or not allowed",
                 "5  the apiserver did not"):
        assert line in out
