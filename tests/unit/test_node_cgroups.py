"""From `/proc/<pid>/cgroup` to the pod, and from the pod to its OOM counters.

Aspects covered:
- `pod_of` over every file in `tests/fixtures/node/cgroup-files/` (one file per shape, the file
  name is the test id): cgroup v2 and v1 (multi-line, combined controllers) and hybrid hosts;
  systemd and cgroupfs drivers; containerd, CRI-O (and its conmon scope, which is no container)
  and docker; Guaranteed (no QoS level), Burstable, BestEffort; static pods (32-hex UID kept);
  nested kubelet roots (kind); cgroup-namespace `../` paths, including one that hides the QoS
  level; ` (deleted)`; a process in the pod cgroup itself or in a sub-cgroup of its container;
  paths that are not pods (host services, the QoS slice, a podman look-alike, empty text);
- `cgroup_lines` keeps ':' inside paths and skips malformed lines;
- `pod_cgroup_dir` finds the pod directory under checked-in `/sys/fs/cgroup` trees (v2 systemd,
  v2 cgroupfs, v2 kind-style nested root by bounded search, v1 memory hierarchy) from a PodRef or
  from a cgroup path (direct, or via `../`), and returns None for an unknown pod;
- `parse_memory_events` keeps every key (newer ones too) and rejects garbage;
- `read_oom`: counters, group mode from the container children (pause and conmon handled), old
  kernels without `oom_group_kill`, and None (never an exception) for a gone, v1 or unparsable
  cgroup.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from janitor.node_agent.cgroups import (
    BESTEFFORT,
    BURSTABLE,
    GUARANTEED,
    UNKNOWN_QOS,
    CgroupLine,
    OomState,
    PodRef,
    cgroup_lines,
    parse_memory_events,
    pod_cgroup_dir,
    pod_of,
    read_oom,
)

FIXTURES = Path(__file__).parents[1] / "fixtures" / "node"
CGROUP_FILES = FIXTURES / "cgroup-files"
SYS = FIXTURES / "sys-fs-cgroup"

G = "3f2a7c1e-5b8d-4e6f-9a01-2b3c4d5e6f70"
B = "0b6c1f2e-7d3a-4c58-9a1e-2f4b6d8c0a11"
E = "9d8e7f60-1a2b-4c3d-8e9f-0a1b2c3d4e5f"
STATIC = "8f098d5425acdc9cac6d7fbbadd44d84"
APP = "a172cedcae47474b615c54d510a5d84a8dea3032e958587430b413538be3f333"
SIDECAR = "6c8b4535ccc87f19061c4646189e33d78f01c8b63dc4e3cb2f630b1796ee93b6"
TRAINER = "06ea17a8981d25b0315ff17bd1ebad3d95c15a3f8b764eaadb93612d9b61a54e"

POD_OF = {
    "v2-systemd-containerd-guaranteed": PodRef(G, APP, GUARANTEED),
    "v2-systemd-containerd-burstable": PodRef(B, APP, BURSTABLE),
    "v2-systemd-containerd-besteffort": PodRef(E, SIDECAR, BESTEFFORT),
    "v2-systemd-crio-burstable": PodRef(B, TRAINER, BURSTABLE),
    "v2-systemd-crio-conmon": PodRef(B, None, BURSTABLE),
    "v2-systemd-docker-guaranteed": PodRef(G, APP, GUARANTEED),
    "v2-systemd-static-burstable": PodRef(STATIC, APP, BURSTABLE),
    "v2-systemd-pod-level": PodRef(E, None, BESTEFFORT),
    "v2-systemd-kind-nested-root": PodRef(E, APP, BESTEFFORT),
    "v2-systemd-cgroupns": PodRef(E, SIDECAR, BESTEFFORT),
    "v2-systemd-deleted": PodRef(B, APP, BURSTABLE),
    "v2-systemd-subcgroup-in-container": PodRef(G, APP, GUARANTEED),
    "v2-cgroupfs-containerd-guaranteed": PodRef(G, APP, GUARANTEED),
    "v2-cgroupfs-containerd-burstable": PodRef(B, APP, BURSTABLE),
    "v2-cgroupfs-crio-besteffort": PodRef(E, SIDECAR, BESTEFFORT),
    "v2-cgroupfs-docker-burstable": PodRef(B, TRAINER, BURSTABLE),
    "v2-cgroupfs-static-guaranteed": PodRef(STATIC, APP, GUARANTEED),
    "v2-cgroupfs-custom-root": PodRef(G, APP, GUARANTEED),
    "v2-cgroupfs-cgroupns-qos-visible": PodRef(E, APP, BESTEFFORT),
    "v2-cgroupfs-cgroupns-qos-hidden": PodRef(B, APP, UNKNOWN_QOS),
    "v1-cgroupfs-docker-burstable": PodRef(B, TRAINER, BURSTABLE),
    "v1-systemd-containerd-guaranteed": PodRef(G, APP, GUARANTEED),
    "v1-hybrid-systemd-crio-besteffort": PodRef(E, SIDECAR, BESTEFFORT),
    "host-v2-service": None,
    "host-v2-root": None,
    "host-v1-hybrid": None,
    "kubelet-qos-slice": None,
    "podman-lookalike": None,
    "empty": None,
}


def test_every_cgroup_fixture_has_an_expectation() -> None:
    assert sorted(p.name for p in CGROUP_FILES.iterdir()) == sorted(POD_OF)


@pytest.mark.parametrize(("name", "expected"), [pytest.param(n, e, id=n) for n, e in POD_OF.items()])
def test_pod_of(name: str, expected: PodRef | None) -> None:
    assert pod_of((CGROUP_FILES / name).read_text()) == expected


def test_pod_of_prefers_the_v2_line_on_hybrid_hosts() -> None:
    text = f"7:memory:/kubepods/burstable/pod{B}/{APP}\n0::/kubepods/pod{G}/{SIDECAR}\n"
    assert pod_of(text) == PodRef(G, SIDECAR, GUARANTEED)


@pytest.mark.parametrize(("text", "expected"), [
    pytest.param("0::/a:b/c\n", [CgroupLine("0", (), "/a:b/c")], id="colon-in-path"),
    pytest.param("8:cpu,cpuacct:/x\n", [CgroupLine("8", ("cpu", "cpuacct"), "/x")], id="combined-controllers"),
    pytest.param("0::/gone (deleted)\n", [CgroupLine("0", (), "/gone")], id="deleted-suffix"),
    pytest.param("garbage\n\n3:cpuset\n0::/\n", [CgroupLine("0", (), "/")], id="malformed-skipped"),
])
def test_cgroup_lines(text: str, expected: list[CgroupLine]) -> None:
    assert cgroup_lines(text) == expected


def _u(uid: str) -> str:
    return uid.replace("-", "_")


@pytest.mark.parametrize(("root", "pod", "expected"), [
    pytest.param("v2-systemd", PodRef(B, APP, BURSTABLE),
                 f"kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{_u(B)}.slice",
                 id="systemd-burstable-ref"),
    pytest.param("v2-systemd", PodRef(G, None, GUARANTEED), f"kubepods.slice/kubepods-pod{_u(G)}.slice",
                 id="systemd-guaranteed-ref"),
    pytest.param("v2-systemd", PodRef(E, None, UNKNOWN_QOS),
                 f"kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{_u(E)}.slice",
                 id="systemd-qos-unknown-ref"),
    pytest.param("v2-systemd", PodRef(STATIC, None, BURSTABLE),
                 f"kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{STATIC}.slice",
                 id="systemd-static-ref"),
    pytest.param("v2-systemd",
                 f"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{_u(B)}.slice/"
                 f"cri-containerd-{APP}.scope",
                 f"kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{_u(B)}.slice",
                 id="systemd-path-direct"),
    pytest.param("v2-systemd", f"/../../kubepods-besteffort-pod{_u(E)}.slice/cri-containerd-{SIDECAR}.scope",
                 f"kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{_u(E)}.slice",
                 id="systemd-path-cgroupns"),
    pytest.param("v2-cgroupfs", PodRef(B, None, BURSTABLE), f"kubepods/burstable/pod{B}", id="cgroupfs-ref"),
    pytest.param("v2-cgroupfs", f"/../pod{B}/{APP}", f"kubepods/burstable/pod{B}", id="cgroupfs-path-qos-hidden"),
    pytest.param("v2-cgroupfs", f"/kubepods/pod{STATIC}/{APP} (deleted)", f"kubepods/pod{STATIC}",
                 id="cgroupfs-static-path-deleted"),
    pytest.param("v2-kind", PodRef(E, None, BESTEFFORT),
                 "kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-besteffort.slice/"
                 f"kubelet-kubepods-besteffort-pod{_u(E)}.slice", id="kind-nested-root-search"),
    pytest.param("v1-memory", PodRef(B, TRAINER, BURSTABLE), f"kubepods/burstable/pod{B}", id="v1-memory"),
    pytest.param("v2-systemd", PodRef("00000000-0000-0000-0000-000000000000", None, BURSTABLE), None,
                 id="unknown-pod"),
    pytest.param("v2-systemd", "/system.slice/containerd.service", None, id="path-not-a-pod"),
    pytest.param("does-not-exist", PodRef(B, None, BURSTABLE), None, id="missing-root"),
])
def test_pod_cgroup_dir(root: str, pod: PodRef | str, expected: str | None) -> None:
    found = pod_cgroup_dir(SYS / root, pod)
    assert found == (None if expected is None else SYS / root / expected)


@pytest.mark.parametrize(("text", "expected"), [
    pytest.param("low 0\nhigh 0\nmax 12\noom 2\noom_kill 2\noom_group_kill 1\n",
                 {"low": 0, "high": 0, "max": 12, "oom": 2, "oom_kill": 2, "oom_group_kill": 1}, id="kernel-6"),
    pytest.param("low 0\nhigh 0\nmax 0\noom 0\noom_kill 0\n",
                 {"low": 0, "high": 0, "max": 0, "oom": 0, "oom_kill": 0}, id="before-oom_group_kill"),
    pytest.param("oom_kill 3\nsock_throttled 7\n\n", {"oom_kill": 3, "sock_throttled": 7}, id="newer-keys-kept"),
    pytest.param("", {}, id="empty"),
])
def test_parse_memory_events(text: str, expected: dict[str, int]) -> None:
    assert parse_memory_events(text) == expected


@pytest.mark.parametrize("text", [
    pytest.param("oom_kill lots\n", id="not-a-number"),
    pytest.param("oom_kill\n", id="no-value"),
    pytest.param("oom kill 3\n", id="three-fields"),
])
def test_parse_memory_events_rejects_garbage(text: str) -> None:
    with pytest.raises(ValueError, match="not a 'key value' line"):
        parse_memory_events(text)


SD = SYS / "v2-systemd" / "kubepods.slice"


@pytest.mark.parametrize(("pod_dir", "expected"), [
    pytest.param(SD / "kubepods-burstable.slice" / f"kubepods-burstable-pod{_u(B)}.slice",
                 OomState(oom_kill=2, oom_group_kill=1, group_mode=True), id="group-mode-pause-at-0"),
    pytest.param(SD / "kubepods-besteffort.slice" / f"kubepods-besteffort-pod{_u(E)}.slice",
                 OomState(oom_kill=3, oom_group_kill=0, group_mode=False), id="single-process-conmon-ignored"),
    pytest.param(SD / f"kubepods-pod{_u(G)}.slice",
                 OomState(oom_kill=0, oom_group_kill=None, group_mode=None), id="old-kernel-no-oom-group-file"),
    pytest.param(SD / "kubepods-burstable.slice" / f"kubepods-burstable-pod{STATIC}.slice",
                 OomState(oom_kill=1, oom_group_kill=1, group_mode=True), id="static-pod"),
    pytest.param(SYS / "v2-cgroupfs" / "kubepods" / "burstable" / f"pod{B}",
                 OomState(oom_kill=1, oom_group_kill=1, group_mode=True), id="cgroupfs"),
    pytest.param(SYS / "v2-cgroupfs" / "kubepods" / f"pod{STATIC}", None, id="unparsable-events"),
    pytest.param(SYS / "v2-cgroupfs" / "kubepods" / "besteffort" / f"pod{E}", None, id="events-file-gone"),
    pytest.param(SYS / "v1-memory" / "kubepods" / "burstable" / f"pod{B}", None, id="cgroup-v1"),
    pytest.param(SYS / "no-such-pod", None, id="pod-dir-gone"),
])
def test_read_oom(pod_dir: Path, expected: OomState | None) -> None:
    assert read_oom(pod_dir) == expected


def test_read_oom_without_an_oom_kill_key_is_unknown(tmp_path: Path) -> None:
    (tmp_path / "memory.events").write_text("low 0\nhigh 0\n")
    assert read_oom(tmp_path) is None


def test_from_process_to_oom_counters() -> None:
    """The agent's path: cgroup text of a task -> pod -> pod cgroup dir -> counters."""
    pod = pod_of((CGROUP_FILES / "v2-systemd-containerd-burstable").read_text())
    assert pod is not None
    pod_dir = pod_cgroup_dir(SYS / "v2-systemd", pod)
    assert pod_dir is not None
    assert read_oom(pod_dir) == OomState(oom_kill=2, oom_group_kill=1, group_mode=True)
