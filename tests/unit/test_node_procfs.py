"""`/proc` scanning for the node agent, over text and over fake trees.

Aspects covered:
- `parse_stat` splits after the LAST ')': comm with spaces, parentheses, `") D ("`, an empty comm,
  a trailing ')' and non-UTF-8 bytes; state, ppid and starttime (field 22) come out right;
- `parse_stat` rejects garbage with ValueError (no parentheses, too few fields, bad numbers, bad
  state), and takes the owning pid for a thread's stat;
- `scan` over the checked-in tree `tests/fixtures/node/proc`: D tasks of every process, threads
  included (a D thread of an S process), wchan read or None (missing file, kernel's `0`), cgroup
  text per process or None, the tricky comm not reported as D;
- `scan` tolerates vanished processes (no task dir, no stat) silently and counts unreadable files
  (stat, wchan, cgroup, task dir) without raising; wanted states are a parameter;
- `make_fake_proc` (tests/fixtures/node/fake_proc.py, reusable by benchmarks) builds a tree that
  `scan` walks every task (its cost is measured by bench/node_scan.py, not asserted here).
"""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest

from janitor.node_agent.procfs import ScanResult, Task, TaskStat, parse_stat, scan

FIXTURES = Path(__file__).parents[1] / "fixtures" / "node"
PROC = FIXTURES / "proc"
_fake_proc = runpy.run_path(str(FIXTURES / "fake_proc.py"))
stat_line = _fake_proc["stat_line"]
write_task = _fake_proc["write_task"]
make_fake_proc = _fake_proc["make_fake_proc"]

CGROUP_4242 = (PROC / "4242" / "cgroup").read_text()
CGROUP_4300 = (PROC / "4300" / "cgroup").read_text()
CGROUP_4500 = (PROC / "4500" / "cgroup").read_text()


@pytest.mark.parametrize(("line", "expected"), [
    pytest.param(stat_line(4242, "python3", "D", ppid=4200, starttime=640_100),
                 TaskStat(4242, 4242, "python3", "D", 4200, 640_100), id="plain"),
    pytest.param(stat_line(4305, "data loader 1", "D", starttime=7),
                 TaskStat(4305, 4305, "data loader 1", "D", 1, 7), id="spaces"),
    pytest.param(stat_line(9858, "x) D 1 (y z", "S", ppid=9816),
                 TaskStat(9858, 9858, "x) D 1 (y z", "S", 9816, 100_000), id="comm-fakes-state-D"),
    pytest.param(stat_line(4500, "a (b) c", "R"),
                 TaskStat(4500, 4500, "a (b) c", "R", 1, 100_000), id="nested-parentheses"),
    pytest.param(stat_line(7, "ends)", "S"), TaskStat(7, 7, "ends)", "S", 1, 100_000), id="trailing-paren"),
    pytest.param(stat_line(8, "", "S"), TaskStat(8, 8, "", "S", 1, 100_000), id="empty-comm"),
    pytest.param(stat_line(57, "kworker/u8:2+flush-0:52", "I", ppid=2),
                 TaskStat(57, 57, "kworker/u8:2+flush-0:52", "I", 2, 100_000), id="kernel-thread"),
    pytest.param(stat_line(9, "caf\ufffd", "Z"), TaskStat(9, 9, "caf\ufffd", "Z", 1, 100_000),
                 id="replaced-non-utf8"),
    pytest.param(stat_line(5, "sh", "S").rstrip("\n"), TaskStat(5, 5, "sh", "S", 1, 100_000), id="no-newline"),
    # A real line, from the vfork parent of test_node_dstate_real on Linux 6.18.
    pytest.param("17756 (v) D 17755 17753 17263 0 -1 4194304 117 0 0 0 0 0 0 0 20 0 1 0 648649 2535424 343 "
                 "18446744073709551615 94014378758144 94014378758637 140723009409264 0 0 0 0 6 0 1 0 0 17 0 0 0 "
                 "0 0 0 94014378769872 94014378770496 94015349223424 140723009415706 140723009415710 "
                 "140723009415710 140723009417204 0\n",
                 TaskStat(17756, 17756, "v", "D", 17755, 648_649), id="real-vfork-parent"),
])
def test_parse_stat(line: str, expected: TaskStat) -> None:
    assert parse_stat(line) == expected


def test_parse_stat_of_a_thread_takes_the_owning_pid() -> None:
    stat = parse_stat(stat_line(4305, "data loader 1", "D"), pid=4300)
    assert (stat.pid, stat.tid) == (4300, 4305)


@pytest.mark.parametrize("text", [
    pytest.param("", id="empty"),
    pytest.param("garbage\n", id="no-parentheses"),
    pytest.param("4900 garbage)\n", id="no-open-paren"),
    pytest.param("4900 (sh) S 1 2 3\n", id="too-few-fields"),
    pytest.param(stat_line(1, "sh", "S").replace("1 (sh)", "x (sh)", 1), id="pid-not-a-number"),
    pytest.param(stat_line(1, "sh", "S").replace(" 100000 ", " later ", 1), id="starttime-not-a-number"),
    pytest.param(stat_line(1, "sh", "S").replace(") S ", ") 5 ", 1), id="state-not-a-letter"),
    pytest.param(stat_line(1, "sh", "S").replace(") S ", ") SD ", 1), id="state-two-letters"),
    pytest.param(")1 (sh( S" + " 0" * 30, id="parentheses-reversed"),
])
def test_parse_stat_rejects_garbage(text: str) -> None:
    with pytest.raises(ValueError, match="not a stat line"):
        parse_stat(text)


def test_scan_finds_d_tasks_in_the_fixture_tree() -> None:
    result = scan(PROC)
    assert sorted(result.found, key=lambda t: t.tid) == [
        Task(57, 57, "jbd2/sda1-8", "D", 9, "jbd2_journal_commit_transaction", "0::/\n"),
        Task(4242, 4242, "python3", "D", 640_100, "nfs_wait_bit_killable", CGROUP_4242),
        Task(4300, 4305, "data loader 1", "D", 641_020, "io_schedule", CGROUP_4300),  # D thread, S process
        Task(4500, 4500, "a (b) c", "D", 642_500, None, CGROUP_4500),  # no wchan file
        Task(5000, 5000, "fio", "D", 645_000, None, None),  # wchan "0", cgroup file gone
    ]
    # 4800 vanished before its tasks were listed; 4701 before its stat was read; 4900's stat is garbage.
    assert (result.processes, result.tasks, result.unreadable) == (10, 10, 1)


@pytest.mark.parametrize(("states", "tids"), [
    pytest.param(frozenset("Z"), [4600], id="zombies"),
    pytest.param(frozenset("DZ"), [57, 4242, 4305, 4500, 4600, 5000], id="d-and-z"),
    pytest.param(frozenset(), [], id="nothing-wanted"),
    pytest.param(frozenset("S"), [1, 4250, 4300, 4400], id="sleeping-incl-tricky-comm"),
])
def test_scan_keeps_the_wanted_states(states: frozenset[str], tids: list[int]) -> None:
    assert sorted(t.tid for t in scan(PROC, states=states).found) == tids


def test_scan_of_a_missing_root_is_empty_not_an_error(tmp_path: Path) -> None:
    assert scan(tmp_path / "no-proc") == ScanResult(found=(), processes=0, tasks=0, unreadable=0)


# Running as root makes chmod useless for "unreadable"; a directory where a file should be is an
# OSError other than "not found" for every user, which is what an EACCES/EIO looks like to scan().
@pytest.mark.parametrize(("broken", "expect_found", "expect_wchan", "expect_cgroup"), [
    pytest.param("task/300/stat", False, None, None, id="stat-unreadable"),
    pytest.param("task/300/wchan", True, None, "0::/\n", id="wchan-unreadable"),
    pytest.param("cgroup", True, "io_schedule", None, id="cgroup-unreadable"),
    pytest.param("task", False, None, None, id="task-dir-unreadable"),
])
def test_scan_counts_unreadable_files_and_carries_on(
    tmp_path: Path, broken: str, expect_found: bool, expect_wchan: str | None, expect_cgroup: str | None,
) -> None:
    for pid in (300, 301):
        proc_dir = tmp_path / str(pid)
        proc_dir.mkdir()
        (proc_dir / "cgroup").write_text("0::/\n")
        write_task(proc_dir, pid, f"p{pid}", "D", wchan="io_schedule")
    target = tmp_path / "300" / broken
    if target.is_dir():  # the whole task dir: replace it by a file so listing it fails
        for child in sorted(target.rglob("*"), reverse=True):
            child.unlink() if child.is_file() else child.rmdir()
        target.rmdir()
        target.write_text("not a directory")
    else:
        target.unlink()
        target.mkdir()

    result = scan(tmp_path)

    assert result.unreadable == 1
    assert [t.pid for t in result.found] == ([300, 301] if expect_found else [301])
    if expect_found:
        assert (result.found[0].wchan, result.found[0].cgroup) == (expect_wchan, expect_cgroup)


FAKE_PROCESSES, FAKE_THREADS = 200, 2  # file creation is slow on some disks; one tree serves both tests


@pytest.fixture(scope="module")
def fake_proc(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int]:
    root = tmp_path_factory.mktemp("proc")
    return root, make_fake_proc(root, FAKE_PROCESSES, threads=FAKE_THREADS, d_every=50)


def test_make_fake_proc_builds_a_tree_scan_walks_fully(fake_proc: tuple[Path, int]) -> None:
    root, d_tasks = fake_proc

    result = scan(root)

    assert d_tasks == 4
    assert (result.processes, result.tasks, result.unreadable) == (FAKE_PROCESSES, FAKE_PROCESSES * FAKE_THREADS, 0)
    assert len(result.found) == d_tasks
    assert all(t.tid == t.pid + 1 and t.wchan == "io_schedule" and t.cgroup for t in result.found)
