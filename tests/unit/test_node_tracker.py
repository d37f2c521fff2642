"""What the node agent concludes across scans.

Aspects covered:
- a D-state task counts only after `sustain` consecutive scans; leaving D, or a reused PID
  (another start time), starts over;
- leftover only when its pod is gone from the API or Terminating past its grace; a live pod's,
  a static pod's or a non-pod task is never one; an unknown pod list gives no leftovers;
- per Terminating pod: alive while any task of it is in /proc (in any state, D not yet sustained
  too, under a cgroup layout the parser does not know too), stuck in D once a leftover, gone only
  when it was already Terminating in the list read before the walk and the walk read every
  process, over `sustain` such walks in a row; an unusable walk, a file not read or an unknown
  pod list reports nothing gone and starts the count over; a static pod's mirror is looked up
  under its config hash;
- OOM kills: the first reading is a baseline, rises are reported with group/process from
  oom_group_kill (or memory.oom.group), and a recreated cgroup (a drop) starts a new baseline.
"""

from __future__ import annotations

import datetime

import pytest

from janitor.node_agent.cgroups import OomState
from janitor.node_agent.procfs import ScanResult, Task
from janitor.node_agent.tracker import DStateTracker, OomTracker, PodOnNode, PodTaskTracker
from janitor.node_report import PodTaskState, Sight

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


OTHER = "9d8e7f60-1a2b-4c3d-8e9f-0a1b2c3d4e5f"
SYSTEM = "0::/system.slice/containerd.service\n"
ALIVE, D_STATE, GONE = PodTaskState.ALIVE, PodTaskState.D_STATE, PodTaskState.GONE


# Another pod of the node (a DaemonSet's, as every real node runs some), listed by the API and
# with a process in /proc: what shows that the agent can see pods' processes at all.
NEIGHBOUR = "5e4d3c2b-1a09-4f8e-8d7c-6b5a49382716"
NEIGHBOUR_CGROUP = f"0::/kubepods/burstable/pod{NEIGHBOUR}/" + "f" * 64 + "\n"


def walk(*cgroups: str, found: tuple[Task, ...] = (), unreadable: int = 0, neighbour: bool = True) -> ScanResult:
    seen = (SYSTEM, *cgroups) + ((NEIGHBOUR_CGROUP,) if neighbour else ())
    return ScanResult(found, processes=len(seen), tasks=len(seen), unreadable=unreadable, cgroups=frozenset(seen))


def terminating(uid: str = UID, mirror_of: str | None = None, neighbour: bool = True) -> dict[str, PodOnNode]:
    listed = {NEIGHBOUR: PodOnNode(NEIGHBOUR, "kube-system", "kube-proxy-x7k2p")} if neighbour else {}
    return listed | {uid: PodOnNode(uid, "ml", "train-0", NOW - S, S, mirror_of)}


def test_a_terminating_pod_is_gone_only_from_the_walk_after_the_list_that_showed_it_deleting() -> None:
    tracker = PodTaskTracker(sustain=1)
    assert tracker.update(walk(CGROUP), {UID: PodOnNode(UID, "ml", "train-0")}, []) == {}  # running: not reported
    assert tracker.update(walk(CGROUP), terminating(), []) == {UID: ALIVE}
    assert tracker.update(walk(), terminating(), []) == {UID: GONE}  # Terminating in the list before this walk
    assert tracker.update(walk(), terminating(), []) == {UID: GONE}
    fresh = PodTaskTracker(sustain=1)  # a restarted agent: its first walk may predate containers still starting
    assert fresh.update(walk(), terminating(), []) == {}
    assert fresh.update(walk(), terminating(), []) == {UID: GONE}


@pytest.mark.parametrize("seen", [
    pytest.param(walk(CGROUP), id="a-process-sleeping"),
    pytest.param(walk(found=(task("D"),)), id="a-task-in-d-not-yet-sustained"),
    pytest.param(walk("0::/kubepods/besteffort/pod" + UID + "/" + "a" * 64 + "\n"), id="cgroupfs"),
    pytest.param(walk(f"0::/some-new-runtime/sandbox-{UID.replace('-', '_')}/ctr\n"), id="a-layout-not-parsed"),
])
def test_a_task_of_the_pod_in_any_state_is_alive(seen: ScanResult) -> None:
    tracker = PodTaskTracker(sustain=1)
    tracker.update(walk(), terminating(), [])
    assert tracker.update(seen, terminating(), []) == {UID: ALIVE}


def test_a_leftover_is_reported_stuck_and_other_pods_apart() -> None:
    tracker = PodTaskTracker(sustain=1)
    pods = terminating() | terminating(OTHER)
    tracker.update(walk(), pods, [])
    [left] = scans(DStateTracker(sustain=1), [task()], pods, 1)
    assert tracker.update(walk(CGROUP), pods, [left]) == {UID: D_STATE, OTHER: GONE}


def test_nothing_is_gone_without_a_whole_walk_or_a_pod_list() -> None:
    tracker = PodTaskTracker(sustain=1)
    tracker.update(walk(), terminating(), [])
    assert tracker.update(walk(unreadable=1), terminating(), []) == {}  # that file may have been the pod's
    assert tracker.update(None, terminating(), []) == {}  # /proc empty or unreadable
    assert tracker.update(ScanResult((), 0, 0, 0), terminating(), []) == {}
    assert tracker.update(walk(), None, []) == {}  # pods not listed: no report
    assert tracker.update(walk(), terminating(), []) == {UID: GONE}


def test_a_static_pods_mirror_is_looked_up_under_its_config_hash() -> None:
    static = "d" * 32
    tracker = PodTaskTracker(sustain=1)
    mirror = terminating(OTHER, mirror_of=static)
    tracker.update(walk(), mirror, [])
    assert tracker.update(walk(f"0::/kubepods/pod{static}/" + "b" * 64 + "\n"), mirror, []) == {OTHER: ALIVE}
    assert tracker.update(walk(), mirror, []) == {OTHER: GONE}


def test_gone_is_sustained_over_walks_and_any_doubt_starts_over() -> None:
    tracker = PodTaskTracker(sustain=3)
    tracker.update(walk(), terminating(), [])  # seen Terminating: from now on, walks count
    assert [tracker.update(walk(), terminating(), []) for _ in range(2)] == [{}, {}]
    assert tracker.update(walk(), terminating(), []) == {UID: GONE}  # a third walk in a row without it
    assert tracker.update(walk(CGROUP), terminating(), []) == {UID: ALIVE}  # a process of it (forked, restarted)
    assert [tracker.update(walk(), terminating(), []) for _ in range(2)] == [{}, {}]
    assert tracker.update(walk(unreadable=1), terminating(), []) == {}  # a walk in doubt starts over
    assert [tracker.update(walk(), terminating(), []) for _ in range(2)] == [{}, {}]
    assert tracker.update(walk(), None, []) == {}  # so does a pod list not read
    assert [tracker.update(walk(), terminating(), []) for _ in range(3)] == [{}, {}, {UID: GONE}]


# -- what shows that the agent can see pods' processes at all ---------------------------------------

OWN = "7a6b5c4d-3e2f-4a1b-9c8d-7e6f5a4b3c2d"  # the agent's own pod
OWN_CGROUP = f"0::/kubepods/burstable/pod{OWN}/" + "0" * 64 + "\n"  # as seen with the host's cgroup namespace
AGENT = {OWN: PodOnNode(OWN, "kube-idle-janitor", "kube-idle-janitor-node-agent-q8z4m")}


@pytest.mark.parametrize("seen", [
    pytest.param(walk(neighbour=False), id="no-pod-cgroup-at-all"),
    pytest.param(walk("0::/\n", neighbour=False), id="its-own-processes-in-their-cgroup-namespace"),
    pytest.param(walk(OWN_CGROUP, neighbour=False), id="only-its-own-pods-cgroup"),
])
def test_an_agent_that_sees_no_other_pods_processes_never_reports_a_pod_gone(seen: ScanResult) -> None:
    """hostPID dropped, a wrong --proc-root, a sandboxed runtime: the API lists the node's pods,
    /proc shows none of their processes, and a Terminating pod's absence proves nothing."""
    tracker = PodTaskTracker(sustain=2, own=frozenset({OWN}))
    pods = terminating() | AGENT  # the neighbour listed, its processes not visible
    assert [tracker.update(seen, pods, []) for _ in range(6)] == [{}] * 6
    assert tracker.sight == Sight(visible=0, listed=2)  # neither the neighbour nor the Terminating pod


def test_a_pod_never_seen_alive_is_gone_only_from_walks_that_see_other_pods() -> None:
    tracker = PodTaskTracker(sustain=2)
    blind = walk(neighbour=False)
    tracker.update(blind, terminating(), [])
    assert [tracker.update(blind, terminating(), []) for _ in range(3)] == [{}, {}, {}]
    assert tracker.update(walk(), terminating(), []) == {}  # the first walk that sees another pod: counting begins
    assert tracker.update(walk(), terminating(), []) == {UID: GONE}
    assert tracker.sight == Sight(visible=1, listed=2)
    assert tracker.update(blind, terminating(), []) == {}  # sight lost: no verdict, and the count starts over
    assert tracker.update(walk(), terminating(), []) == {}
    assert tracker.update(walk(), terminating(), []) == {UID: GONE}


def test_a_pod_seen_alive_is_gone_even_where_no_other_pod_is_seen() -> None:
    """Its own processes showed the agent can see it; their absence counts."""
    tracker = PodTaskTracker(sustain=2)
    alone = terminating(neighbour=False)
    tracker.update(walk(CGROUP, neighbour=False), {UID: PodOnNode(UID, "ml", "train-0", running=True)}, [])
    assert tracker.update(walk(CGROUP, neighbour=False), alone, []) == {UID: ALIVE}
    assert [tracker.update(walk(neighbour=False), alone, []) for _ in range(2)] == [{}, {UID: GONE}]
    assert tracker.sight == Sight(visible=0, listed=1)  # the agent says so beside it (its condition: Unknown)


def test_a_pod_the_api_showed_running_that_no_walk_found_is_never_gone() -> None:
    """A pod in a sandboxed runtime (Kata, gVisor) beside runc pods, or under a cgroup layout that
    names no pod UID: the API says it runs, the agent never saw a process of it; that it sees the
    other pods proves nothing about this one."""
    tracker = PodTaskTracker(sustain=1)
    running = {UID: PodOnNode(UID, "ml", "kata-0", running=True)}
    tracker.update(walk(), terminating() | running, [])
    tracker.update(walk(), terminating() | running, [])  # Running before this walk, and no process of it
    deleting = {**terminating(), UID: PodOnNode(UID, "ml", "kata-0", NOW - S, S, running=True)}
    assert [tracker.update(walk(), deleting, []) for _ in range(4)] == [{}] * 4
    fresh = PodTaskTracker(sustain=1)  # an agent that first listed it Terminating, still Running
    assert [fresh.update(walk(), deleting, []) for _ in range(4)] == [{}] * 4
    stopped = {**terminating(), UID: PodOnNode(UID, "ml", "kata-0", NOW - S, S, running=False)}
    assert [fresh.update(walk(), stopped, []) for _ in range(4)] == [{}] * 4  # its phase turned Failed: it still ran


def test_a_pod_that_never_ran_is_gone_where_other_pods_are_seen() -> None:
    """Stuck in ContainerCreating, then deleted: no process to see, and the agent sees the others'."""
    tracker = PodTaskTracker(sustain=2)
    pending = {**terminating(), UID: PodOnNode(UID, "ml", "train-0", NOW - S, S, running=False)}
    assert [tracker.update(walk(), pending, []) for _ in range(3)] == [{}, {}, {UID: GONE}]


def test_the_agents_own_pod_is_alive_while_the_agent_runs() -> None:
    """Its processes may sit at the root of its cgroup namespace (`0::/`), out of sight: still alive."""
    tracker = PodTaskTracker(sustain=1, own=frozenset({OWN}))
    mine = terminating(OWN)
    assert [tracker.update(walk("0::/\n"), mine, []) for _ in range(3)] == [{OWN: ALIVE}] * 3
    assert tracker.sight == Sight(visible=1, listed=1)  # the neighbour; its own pod is not counted


def test_what_counts_as_seeing_a_pod() -> None:
    """A process in the cgroup of a pod the API lists on this node, other than the agent's own:
    a static pod under its config hash too; a pod cgroup the API does not list does not count."""
    static = "d" * 32
    mirror = {OTHER: PodOnNode(OTHER, "kube-system", "etcd-n1", mirror_of=static)}
    tracker = PodTaskTracker(sustain=1, own=frozenset({OWN}))
    tracker.update(walk(f"0::/kubepods/pod{static}/" + "b" * 64 + "\n", OWN_CGROUP, neighbour=False),
                   mirror | AGENT, [])
    assert tracker.sight == Sight(visible=1, listed=1)
    tracker.update(walk(CGROUP, neighbour=False), AGENT, [])  # a pod the API no longer lists
    assert tracker.sight == Sight(visible=0, listed=0)
    tracker.update(walk(), None, [])
    assert tracker.sight is None  # pods not listed: nothing to say
