"""Scan `/proc` for tasks in given states (D, uninterruptible sleep, by default).

Why this module looks the way it does:
- `comm` (field 2 of `stat`) is chosen by the process (`prctl(PR_SET_NAME)`) and may hold spaces,
  parentheses, even `") D ("`, so the fields are split after the **last** `)` as procps does; a
  naive `split()` can report a sleeping process as D.
- A process can be `S` while one of its threads is `D`, so every `/proc/<pid>/task/<tid>/stat` is
  read, not just `/proc/<pid>/stat`.
- PIDs are reused. `starttime` (field 22, clock ticks since boot) is kept so the caller can key a
  task by `(pid, tid, starttime_ticks)` across scans; this module holds no state between scans and
  never reads the clock.
- Processes exit while we walk: a missing file is normal and silently skipped. Anything else that
  cannot be read is counted in `ScanResult.unreadable`, never raised, so one odd task cannot stop
  the agent (and never passes unnoticed either).
- The root is injectable (`root=`), so tests and unusual hosts (a host `/proc` mounted elsewhere)
  use the same code; `parse_stat` takes text so it is tested without any tree at all.
- `every_cgroup=True` also reads the cgroup of every process (one more small read per process),
  so the caller can say of a pod that *no* task of it is left: that needs every process's owner,
  not only those of the tasks in the wanted states.
"""

from __future__ import annotations

import os
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

__all__ = ["ScanResult", "Task", "TaskStat", "parse_stat", "scan"]

# After the last ')': field 3 (state) is index 0, field 4 (ppid) index 1, field 22 (starttime) index 19.
_STATE, _PPID, _STARTTIME = 0, 1, 19

# Errors that mean "the task is gone": it exited between listing and reading.
_VANISHED = (FileNotFoundError, ProcessLookupError)


@dataclass(frozen=True, slots=True)
class TaskStat:
    """The fields of one `stat` line that the agent needs.

    `pid` is the thread-group id (the process) and `tid` the task; for `/proc/<pid>/stat` they are
    equal. `starttime_ticks` is the task's own start time in clock ticks since boot.
    """

    pid: int
    tid: int
    comm: str
    state: str
    ppid: int
    starttime_ticks: int


@dataclass(frozen=True, slots=True)
class Task:
    """A task found in a wanted state, with where it sleeps and which cgroup holds its process.

    `wchan` is the kernel symbol it sleeps in, or None when unknown (file unreadable, or the kernel
    printed `0`: running, or the symbol hidden from us). `cgroup` is the raw text of
    `/proc/<pid>/cgroup` (parse it with `cgroups.pod_of`), or None when unreadable.
    """

    pid: int
    tid: int
    comm: str
    state: str
    starttime_ticks: int
    wchan: str | None
    cgroup: str | None


@dataclass(frozen=True, slots=True)
class ScanResult:
    """One pass over `/proc`.

    `found` are the tasks in the wanted states. `processes` and `tasks` count what was walked (a
    process that vanished before its tasks could be listed is not counted), so a caller can tell
    an empty result from an empty or unreadable tree. `unreadable` counts files that exist but
    could not be read or parsed (a process among them may belong to any pod). `cgroups` are the
    distinct `/proc/<pid>/cgroup` texts of every process walked, read only with `every_cgroup`, and
    `owners` each process's (pid, start time of its main thread or -1, that text): which processes
    a pod's cgroup holds, each told from a later process under the same PID by its start time.
    There is deliberately no timestamp: the caller stamps the scan with the `now` of its cycle.
    """

    found: tuple[Task, ...]
    processes: int
    tasks: int
    unreadable: int
    cgroups: frozenset[str] = frozenset()
    owners: tuple[tuple[int, int, str], ...] = ()


def parse_stat(text: str, *, pid: int | None = None) -> TaskStat:
    """Parse one `/proc/<pid>[/task/<tid>]/stat` line.

    The first field is the task id; a task's `stat` does not say which process it belongs to, so
    `pid` may be given (defaults to the task id, right for `/proc/<pid>/stat`).

    Raises ValueError when the text is not a stat line (no `(`/`)`, too few fields, non-numbers).
    """
    lp = text.find("(")
    rp = text.rfind(")")
    if lp < 0 or rp < lp:
        raise ValueError(f"not a stat line (no '(comm)'): {text[:80]!r}")
    try:
        tid = int(text[:lp])
    except ValueError:
        raise ValueError(f"not a stat line (bad task id): {text[:80]!r}") from None
    rest = text[rp + 1:].split()
    if len(rest) <= _STARTTIME:
        raise ValueError(f"not a stat line ({len(rest) + 2} fields, need at least 22): {text[:80]!r}")
    state = rest[_STATE]
    if len(state) != 1 or not state.isalpha():
        raise ValueError(f"not a stat line (state {state!r} is not one letter): {text[:80]!r}")
    try:
        ppid = int(rest[_PPID])
        starttime = int(rest[_STARTTIME])
    except ValueError:
        raise ValueError(f"not a stat line (ppid/starttime not numbers): {text[:80]!r}") from None
    return TaskStat(
        pid=tid if pid is None else pid,
        tid=tid,
        comm=text[lp + 1:rp],
        state=state,
        ppid=ppid,
        starttime_ticks=starttime,
    )


class _Reader:
    """Reads small /proc files, sorting failures into 'vanished' (None) and 'unreadable' (counted)."""

    __slots__ = ("unreadable",)

    def __init__(self) -> None:
        self.unreadable = 0

    def text(self, path: str) -> str | None:
        try:
            with open(path, "rb") as f:
                raw = f.read()
        except _VANISHED:
            return None
        except OSError:
            self.unreadable += 1
            return None
        # comm is arbitrary bytes; never fail on it (')' is ASCII, so splitting stays exact).
        return raw.decode("utf-8", "replace")

    def listdir(self, path: str) -> list[str] | None:
        try:
            return os.listdir(path)
        except _VANISHED:
            return None
        except OSError:
            self.unreadable += 1
            return None


def _wchan(text: str | None) -> str | None:
    """The kernel prints `0` when the task runs or the symbol is hidden from the reader: unknown."""
    if text is None:
        return None
    symbol = text.strip()
    return None if symbol in ("", "0") else symbol


def scan(root: Path = Path("/proc"), *, states: Collection[str] = frozenset("D"),
         every_cgroup: bool = False) -> ScanResult:
    """Walk every task of every process under `root` and return those whose state is in `states`.

    Only matching tasks cost more than one `stat` read: their `wchan` and their process's `cgroup`
    (read once per process) are read on demand. Never raises for per-task problems; see the module
    docstring for how vanished and unreadable files are told apart.
    """
    reader = _Reader()
    base = os.fspath(root)
    entries = reader.listdir(base)
    if entries is None:
        return ScanResult(found=(), processes=0, tasks=0, unreadable=reader.unreadable)
    wanted = frozenset(states)
    found: list[Task] = []
    cgroups: set[str] = set()
    owners: list[tuple[int, int, str]] = []
    processes = tasks = 0
    for name in entries:
        if not name.isdigit():
            continue  # self, sys, meminfo, …
        pid = int(name)
        proc_dir = f"{base}/{name}"
        tids = reader.listdir(f"{proc_dir}/task")
        if tids is None:
            continue
        processes += 1
        cgroup: str | None = None
        cgroup_read = False
        if every_cgroup:
            cgroup, cgroup_read = reader.text(f"{proc_dir}/cgroup"), True
            if cgroup is not None:
                cgroups.add(cgroup)
        started = -1
        for tid_name in tids:
            if not tid_name.isdigit():
                continue
            task_dir = f"{proc_dir}/task/{tid_name}"
            text = reader.text(f"{task_dir}/stat")
            if text is None:
                continue
            try:
                stat = parse_stat(text, pid=pid)
            except ValueError:
                reader.unreadable += 1
                continue
            tasks += 1
            if stat.tid == pid:
                started = stat.starttime_ticks
            if stat.state not in wanted:
                continue
            if not cgroup_read:
                cgroup, cgroup_read = reader.text(f"{proc_dir}/cgroup"), True
            found.append(Task(
                pid=pid,
                tid=stat.tid,
                comm=stat.comm,
                state=stat.state,
                starttime_ticks=stat.starttime_ticks,
                wchan=_wchan(reader.text(f"{task_dir}/wchan")),
                cgroup=cgroup,
            ))
        if every_cgroup and cgroup is not None:
            owners.append((pid, started, cgroup))
    return ScanResult(found=tuple(found), processes=processes, tasks=tasks, unreadable=reader.unreadable,
                      cgroups=frozenset(cgroups), owners=tuple(owners))
