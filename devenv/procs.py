"""Child processes of the sandbox, and waiting on them with deadlines.

Every component runs as a plain child process with its output in a log file, so a failed start
can show the log tail instead of a bare timeout. Waiting is always polling against a deadline:
the machine has two cores, and a fixed sleep is either too short under load or wasted time.
"""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path


class StartError(RuntimeError):
    """A component did not become ready; the message carries its log tail."""


def free_port() -> int:
    """A port on 127.0.0.1 that was free a moment ago (the kernel picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_until(
    check: Callable[[], bool], *, timeout: float, what: str, interval: float = 0.2
) -> None:
    """Poll `check` until it is true or `timeout` seconds pass (then raise TimeoutError)."""
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except StartError:
            raise
        except Exception as e:  # a component that is still starting refuses connections
            last_error = e
        time.sleep(interval)
    suffix = f" (last error: {last_error})" if last_error else ""
    raise TimeoutError(f"{what} not ready after {timeout:.0f}s{suffix}")


def log_tail(path: Path, lines: int = 40) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:])


def _die_with_parent() -> None:
    """In the child before exec: get SIGTERM when the parent dies (Linux prctl PR_SET_PDEATHSIG).

    A test run killed with SIGKILL cannot stop its sandbox; without this an apiserver and etcd
    would keep running and eat one of the machine's two cores until someone notices."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # 1 = PR_SET_PDEATHSIG
    except OSError:
        pass


@dataclass
class Component:
    """One child process: its command line, log file and (once started) its Popen."""

    name: str
    argv: Sequence[str]
    log_path: Path
    env: dict[str, str] | None = None
    popen: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "ab")
        # A new session per child: Ctrl-C in the terminal reaches the supervisor only, which then
        # stops the children in order (apiserver before etcd) instead of all dying at once.
        self.popen = subprocess.Popen(
            list(self.argv),
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**os.environ, **(self.env or {})},
            start_new_session=True,
            preexec_fn=_die_with_parent,
        )
        log.close()

    @property
    def pid(self) -> int | None:
        return self.popen.pid if self.popen else None

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def wait_ready(self, check: Callable[[], bool], *, timeout: float) -> None:
        """Wait for `check`, failing fast (with the log tail) if the process exits first."""

        def ready() -> bool:
            if not self.alive():
                code = self.popen.returncode if self.popen else None
                raise StartError(
                    f"{self.name} exited with code {code} while starting; log {self.log_path}:\n"
                    f"{log_tail(self.log_path)}"
                )
            return check()

        try:
            wait_until(ready, timeout=timeout, what=self.name)
        except StartError:
            raise
        except TimeoutError as e:
            raise StartError(f"{e}; log {self.log_path}:\n{log_tail(self.log_path)}") from e

    def stop(self, timeout: float = 15.0) -> None:
        """SIGTERM, then SIGKILL after `timeout`; safe to call twice."""
        if not self.popen or self.popen.poll() is not None:
            return
        try:
            os.killpg(self.popen.pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        try:
            self.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.popen.pid, signal.SIGKILL)
            self.popen.wait(timeout=5)
