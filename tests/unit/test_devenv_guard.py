"""`python -m devenv up|demo` refuses to start a second sandbox in a run directory that has one.

Two sandboxes in one directory would share one etcd data directory and one sandbox.env, and the
first `down` would stop the wrong one.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from devenv.__main__ import main


@pytest.mark.parametrize("command", ["up", "demo"])
def test_a_second_sandbox_in_the_same_run_dir_is_refused(tmp_path: Path, command: str,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "sandbox.env").write_text(f"SANDBOX_PID={os.getpid()}\n")  # alive: this very process
    assert main(["--run-dir", str(tmp_path), command]) == 1
    err = capsys.readouterr().err
    assert f"already running in {tmp_path} (pid {os.getpid()})" in err and "down" in err
