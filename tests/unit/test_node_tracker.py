"""What the node agent concludes across scans.

Aspects covered:
- a D-state task counts only after `sustain` consecutive scans; leaving D, or a reused PID
  (another start time), starts over;
- leftover only when its pod is gone from the API or Terminating past its grace; a live pod's,
  a static pod's or a non-pod task is never one; an unknown pod list gives no leftovers;
- OOM kills: the first reading is a baseline, rises are reported with group/process from
  oom_group_kill (or memory.oom.group), and a recreated cgroup (a drop) starts a new baseline.
"""

from __future__ import annotations

import datetime

from janitor.node_agent.cgroups import OomState
from janitor.node_agent.procfs import Task
from janitor.node_agent.tracker import DStateTracker, OomTracker, PodOnNode

NOW = datetime.datetime(2026, 11, 23, 12, tzinfo=datetime.timezone.utc)
S = datetime.timedelta(seconds=30)
UID = "0b6c1f2e-7d3a-4c58-9a1e-2f4b6d8c0a11"
CGROUP = (f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID.replace('-', '_')}.slice/"
          "cri-containerd-" + "a" * 64 + ".scope\n")


def task(state: str = "D", pid: int = 4242, start: int = 100, cgroup: str | None = CGROUP) -> Task:
    return Task(pid, pid, "python", state, start, "nfs_wait_bit_killable", cgroup)


def scans(tracker: DStateTracker, tasks, pods, n: int):
    found = []
    for i in range(n):
        found = tracker.update(tasks, pods, NOW + i * S)
    return found


def test_sustained_d_state_of_a_deleted_pod_is_a_leftover() -> None:
    tracker = DStateTracker(sustain=3)
    assert scans(tracker, [task()], {}, 2) == []
    [left] = tracker.update([task()], {}, NOW + 2 * S)
    assert left.pod_uid == UID and left.container_id == "a" * 64 and left.since == NOW and left.scans == 3
    assert "deleted pod uid" in left.describe(NOW + 2 * S) and "nfs_wait_bit_killable" in left.describe(NOW)


def test_leaving_d_or_a_reused_pid_starts_over() -> None:
    tracker = DStateTracker(sustain=2)
    tracker.update([task()], {}, NOW)
    tracker.update([task("S")], {}, NOW + S)
    assert tracker.update([task()], {}, NOW + 2 * S) == []
    assert tracker.update([task(start=999)], {}, NOW + 3 * S) == []  # same pid, another process


def test_only_pods_gone_or_terminating_past_grace() -> None:
    live = {UID: PodOnNode(UID, "ml", "train-0")}
    within = {UID: PodOnNode(UID, "ml", "train-0", NOW, datetime.timedelta(minutes=10))}
    past = {UID: PodOnNode(UID, "ml", "train-0", NOW - datetime.timedelta(minutes=5), datetime.timedelta(seconds=30))}
    assert scans(DStateTracker(sustain=1), [task()], live, 1) == []
    assert scans(DStateTracker(sustain=1), [task()], within, 1) == []
    [left] = scans(DStateTracker(sustain=1), [task()], past, 1)
    assert "pod ml/train-0" in left.describe(NOW) and "Terminating since" in left.describe(NOW)


def test_unknown_pods_static_pods_and_non_pod_tasks_are_never_leftovers() -> None:
    assert scans(DStateTracker(sustain=1), [task()], None, 3) == []
    static = "0::/kubepods/pod" + "d" * 32 + "/" + "b" * 64 + "\n"
    assert scans(DStateTracker(sustain=1), [task(cgroup=static)], {}, 2) == []
    assert scans(DStateTracker(sustain=1), [task(cgroup="0::/system.slice/nfs.service\n")], {}, 2) == []
    assert scans(DStateTracker(sustain=1), [task(cgroup=None)], {}, 2) == []


def test_oom_kills_after_a_baseline() -> None:
    oom = OomTracker()
    assert oom.update({UID: OomState(2, 0, True)}) == []  # kills before the agent looked: not news
    [kill] = oom.update({UID: OomState(3, 1, True)})
    assert (kill.new_kills, kill.total, kill.group) == (1, 3, True)
    [single] = oom.update({UID: OomState(5, 1, True)})  # oom_group_kill unchanged: single processes
    assert (single.new_kills, single.group) == (2, False)
    assert oom.update({UID: OomState(0, 0, None)}) == []  # a new cgroup under the same uid: new baseline
    [old_kernel] = oom.update({UID: OomState(1, None, False)})
    assert old_kernel.group is False
