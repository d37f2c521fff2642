"""How the sandbox runs its processes.

Aspects covered:
- a component that exits while starting fails fast with its log tail, not after the timeout;
- waiting is bounded: a check that never passes raises TimeoutError naming what was awaited;
- stop() ends a component that ignores nothing, and is safe to call twice;
- when the parent is killed outright (SIGKILL), its components die too.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from devenv.procs import Component, StartError, wait_until


def test_component_that_exits_fails_fast_with_its_log(tmp_path: Path) -> None:
    comp = Component("broken", [sys.executable, "-c", "print('bad flag --foo'); raise SystemExit(3)"],
                     tmp_path / "broken.log")
    comp.start()
    began = time.monotonic()
    with pytest.raises(StartError) as failed:
        comp.wait_ready(lambda: False, timeout=30)
    assert time.monotonic() - began < 10
    assert "exited with code 3" in str(failed.value)
    assert "bad flag --foo" in str(failed.value)


def test_wait_until_is_bounded() -> None:
    with pytest.raises(TimeoutError, match="the moon"):
        wait_until(lambda: False, timeout=0.5, what="the moon")


def test_stop_ends_the_process_and_is_idempotent(tmp_path: Path) -> None:
    comp = Component("sleeper", [sys.executable, "-c", "import time; time.sleep(300)"], tmp_path / "s.log")
    comp.start()
    assert comp.alive()
    comp.stop()
    assert not comp.alive()
    comp.stop()


def test_components_die_with_a_killed_parent(tmp_path: Path) -> None:
    pid_file = tmp_path / "child.pid"
    parent = textwrap.dedent(f"""
        import sys, time
        from pathlib import Path
        from devenv.procs import Component
        c = Component("child", [sys.executable, "-c", "import time; time.sleep(300)"],
                      Path({str(tmp_path / 'c.log')!r}))
        c.start()
        Path({str(pid_file)!r}).write_text(str(c.pid))
        time.sleep(300)
    """)
    proc = subprocess.Popen([sys.executable, "-c", parent])
    try:
        wait_until(pid_file.exists, timeout=30, what="child started")
        child = int(pid_file.read_text())
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)

        def child_gone() -> bool:
            try:
                os.kill(child, 0)
            except ProcessLookupError:
                return True
            return False

        wait_until(child_gone, timeout=10, what="child to die with its parent")
    finally:
        if proc.poll() is None:
            proc.kill()
