"""A real D-state task on this machine, found by `procfs.scan` in the real `/proc`.

Aspects covered:
- a parent blocked in `vfork()` sleeps uninterruptibly (state D) until its child execs or exits;
  a tiny C program compiled here with gcc makes one, and `scan(Path("/proc"))` reports it with
  its start time and, when the kernel lets us read it, its `wchan`;
- the skip reasons are specific (no gcc; the kernel never showed D), and the test fails rather
  than skips when the kernel shows D but the scan misses it.

The child sleeps 3 s; once the parent has been found the test kills the child, which releases the
parent at once, so the test takes a fraction of a second.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from janitor.node_agent.procfs import Task, parse_stat, scan

VFORK_C = r"""
#include <unistd.h>

int main(void) {
    pid_t child = vfork();      /* the parent now sleeps in D until the child exits */
    if (child == 0) {
        sleep(3);
        _exit(0);
    }
    return child < 0;
}
"""
DEADLINE_S = 2.5  # well inside the child's 3 s


@pytest.fixture
def vfork_binary(tmp_path: Path) -> Path:
    gcc = shutil.which("gcc")
    if gcc is None:
        pytest.skip("gcc not found on PATH: cannot build the vfork program that makes a D-state task")
    source = tmp_path / "vfork_d.c"
    source.write_text(VFORK_C)
    binary = tmp_path / "vfork_d"
    subprocess.run([gcc, "-O0", "-o", str(binary), str(source)], check=True, capture_output=True, timeout=60)
    return binary


@pytest.fixture
def blocked_parent(vfork_binary: Path) -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen([str(vfork_binary)])
    try:
        yield proc
    finally:
        for child in _children_of(proc.pid):
            _kill(child)
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)


def _children_of(pid: int) -> list[int]:
    """Direct children of `pid`, from each process's stat (no reliance on CONFIG_PROC_CHILDREN)."""
    children = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            if parse_stat(Path("/proc", name, "stat").read_text(errors="replace")).ppid == pid:
                children.append(int(name))
        except (OSError, ValueError):
            continue
    return children


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _raw_state(pid: int) -> str | None:
    try:
        return parse_stat(Path(f"/proc/{pid}/stat").read_text(errors="replace")).state
    except (OSError, ValueError):
        return None


def _read_wchan(pid: int) -> str | None:
    try:
        symbol = Path(f"/proc/{pid}/task/{pid}/wchan").read_text().strip()
    except OSError:
        return None
    return None if symbol in ("", "0") else symbol


def test_scan_finds_the_vfork_parent_in_d_state(blocked_parent: subprocess.Popen[bytes]) -> None:
    pid = blocked_parent.pid
    deadline = time.monotonic() + DEADLINE_S
    found: Task | None = None
    states_seen: set[str] = set()
    while time.monotonic() < deadline:
        found = next((t for t in scan(Path("/proc")).found if t.pid == pid), None)
        if found is not None:
            break
        if (state := _raw_state(pid)) is not None:
            states_seen.add(state)
        time.sleep(0.01)  # polling interval, not a wait for an outcome

    if found is None:
        if "D" in states_seen:
            pytest.fail(f"/proc/{pid}/stat showed D but scan() never reported pid {pid}")
        pytest.skip(f"kernel never showed the vfork parent {pid} in state D within {DEADLINE_S}s "
                    f"(states seen in /proc/{pid}/stat: {sorted(states_seen) or 'none'})")

    assert (found.tid, found.state) == (pid, "D")
    assert found.starttime_ticks > 0
    assert found.cgroup is not None and found.cgroup.strip()
    expected_wchan = _read_wchan(pid)  # still blocked: the child sleeps until we kill it
    if expected_wchan is not None:
        assert found.wchan == expected_wchan

    for child in _children_of(pid):
        _kill(child)
    assert blocked_parent.wait(timeout=5) == 0
