"""From a cgroup path to the Kubernetes pod, and a pod cgroup's OOM-kill counters.

Why it is written this way:
- Kubelet names pod cgroups differently per cgroup driver, and the container runtime names the
  container cgroup below it (`reference/metrics-and-node.md` §5.3):
    cgroupfs  /kubepods[/burstable|/besteffort]/pod<uid>/<64hex>        (CRI-O: crio-<64hex>)
    systemd   /kubepods.slice[/kubepods-<qos>.slice]/kubepods[-<qos>]-pod<uid with _>.slice/
              <cri-containerd|crio|docker>-<64hex>.scope
  Guaranteed pods have no QoS level. Static pods have a 32-hex (md5) UID. The kubelet cgroup root
  may be nested (kind: `kubelet.slice/kubelet-kubepods…`), and a reader in another cgroup
  namespace sees `../` for each ancestor outside its own root. So path *components* are matched
  by regex wherever they sit; nothing assumes a prefix.
- Parsers take text (`pod_of`, `parse_memory_events`); the readers take an injectable root so
  tests run on checked-in trees. Readers never raise: a file that is missing or odd is unknown
  (None), because pods and their cgroups disappear at any moment.
- OOM kills are read from the **pod** cgroup's `memory.events` (cgroup v2, hierarchical): it
  covers every container, survives container restarts and disappears with the pod.
  `memory.oom.group` lives on the container cgroups (kubelet sets it to 1 on v2 unless
  `singleProcessOOMKill`), so it is read from the pod's container children.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "BESTEFFORT", "BURSTABLE", "GUARANTEED", "UNKNOWN_QOS",
    "CgroupLine", "OomState", "PodRef",
    "cgroup_lines", "parse_memory_events", "pod_cgroup_dir", "pod_of", "read_oom",
]

GUARANTEED = "Guaranteed"
BURSTABLE = "Burstable"
BESTEFFORT = "BestEffort"
UNKNOWN_QOS = "Unknown"
"""Only for cgroupfs paths seen through a cgroup namespace that hides the QoS level (`/../pod<uid>`)."""

_QOS_BY_LEVEL = {"burstable": BURSTABLE, "besteffort": BESTEFFORT}

_UUID = r"[0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12}"
_UID = rf"(?P<uid>{_UUID}|[0-9a-f]{{32}})"
# cgroupfs driver: the component is exactly pod<uid>.
_POD_CGROUPFS = re.compile(rf"^pod{_UID}$")
# systemd driver: every ancestor is spelled into the slice name, e.g. kubelet-kubepods-besteffort-pod<uid_>.slice.
_POD_SYSTEMD = re.compile(rf"^(?:.+-)?kubepods(?:-(?P<qos>burstable|besteffort))?-pod{_UID}\.slice$")
# Container cgroup: bare id (cgroupfs containerd/docker), crio-<id> (cgroupfs CRI-O) or <prefix>-<id>.scope (systemd).
# crio-conmon-<id>.scope (CRI-O's monitor process) deliberately does not match: it is no container.
_CONTAINER = re.compile(r"^(?:(?:cri-containerd|crio|docker)-)?(?P<id>[0-9a-f]{64})(?:\.scope)?$")
_DELETED = " (deleted)"


@dataclass(frozen=True, slots=True)
class PodRef:
    """The pod (and container, when the task sits in one) that a cgroup path belongs to.

    `uid` is in the API's canonical dashed form, or the 32-hex md5 of a static pod's manifest.
    `qos` is one of GUARANTEED, BURSTABLE, BESTEFFORT, or UNKNOWN_QOS when the path hides it.
    """

    uid: str
    container_id: str | None
    qos: str


@dataclass(frozen=True, slots=True)
class CgroupLine:
    """One line of `/proc/<pid>/cgroup`: `hierarchy-ID:controller-list:path` (v2 is `0::path`)."""

    hierarchy: str
    controllers: tuple[str, ...]
    path: str


@dataclass(frozen=True, slots=True)
class OomState:
    """OOM counters of one pod cgroup (cumulative since the cgroup was created).

    `oom_group_kill` is None on kernels without that key (before ~5.17). `group_mode` is True if
    any container cgroup has `memory.oom.group` 1 (a kill takes the whole container), False if
    those files were read and all are 0 (single processes die, leaving no OOMKilled status), and
    None when none could be read (cgroup v1, or no container cgroups).
    """

    oom_kill: int
    oom_group_kill: int | None
    group_mode: bool | None


def cgroup_lines(text: str) -> list[CgroupLine]:
    """Split a `/proc/<pid>/cgroup` file; malformed lines are skipped, ` (deleted)` is stripped.

    The path may contain ':' itself, hence at most two splits.
    """
    lines = []
    for raw in text.splitlines():
        parts = raw.split(":", 2)
        if len(parts) != 3 or not parts[2].startswith(("/", "..")):
            continue
        hierarchy, controllers, path = parts
        lines.append(CgroupLine(hierarchy, tuple(c for c in controllers.split(",") if c),
                                path.removesuffix(_DELETED)))
    return lines


def _pod_in_path(path: str) -> tuple[PodRef, int] | None:
    """The pod of one cgroup path and the index of its pod component, or None."""
    components = path.split("/")
    for i, comp in enumerate(components):
        if m := _POD_SYSTEMD.match(comp):
            qos = _QOS_BY_LEVEL.get(m["qos"] or "", GUARANTEED)
        elif m := _POD_CGROUPFS.match(comp):
            parent = components[i - 1] if i > 0 else ""
            if parent in _QOS_BY_LEVEL:
                qos = _QOS_BY_LEVEL[parent]
            elif parent.endswith("kubepods"):
                qos = GUARANTEED
            else:
                qos = UNKNOWN_QOS  # "..", or the start of a namespaced path: the level is hidden
        else:
            continue
        container_id = None
        if i + 1 < len(components) and (c := _CONTAINER.match(components[i + 1])):
            container_id = c["id"]
        return PodRef(_canonical_uid(m["uid"]), container_id, qos), i
    return None


def _canonical_uid(uid: str) -> str:
    return uid.replace("_", "-")


def _preference(line: CgroupLine) -> int:
    """v2 first (the agent's target), then v1 memory (where OOM lives), name=systemd, the rest."""
    if line.hierarchy == "0" and not line.controllers:
        return 0
    if "memory" in line.controllers:
        return 1
    if "name=systemd" in line.controllers:
        return 2
    return 3


def pod_of(cgroup_text: str) -> PodRef | None:
    """The pod a process belongs to, from the text of its `/proc/<pid>/cgroup`, or None.

    Handles cgroup v2 (`0::/path`), v1 (one line per hierarchy) and hybrid hosts, where `0::/` is
    often empty of pods while the v1 lines carry them: the first line (by preference) that names
    a pod wins.
    """
    for line in sorted(cgroup_lines(cgroup_text), key=_preference):
        if found := _pod_in_path(line.path):
            return found[0]
    return None


def _pod_dir_names(pod: PodRef) -> list[Path]:
    """Where kubelet puts the pod cgroup, relative to the cgroup root, most likely QoS first."""
    uid_ = pod.uid.replace("-", "_")
    candidates = {
        GUARANTEED: [Path("kubepods", f"pod{pod.uid}"),
                     Path("kubepods.slice", f"kubepods-pod{uid_}.slice")],
        BURSTABLE: [Path("kubepods", "burstable", f"pod{pod.uid}"),
                    Path("kubepods.slice", "kubepods-burstable.slice", f"kubepods-burstable-pod{uid_}.slice")],
        BESTEFFORT: [Path("kubepods", "besteffort", f"pod{pod.uid}"),
                     Path("kubepods.slice", "kubepods-besteffort.slice", f"kubepods-besteffort-pod{uid_}.slice")],
    }
    first = candidates.get(pod.qos, [])
    return first + [p for qos, paths in candidates.items() if qos != pod.qos for p in paths]


def _search(cgroup_root: Path, uid: str, max_depth: int) -> Path | None:
    """Breadth-first search for the pod cgroup under a nested kubelet root (kind, --cgroup-root).

    Bounded by depth and never descends into other pods' cgroups, so it stays cheap on a busy node.
    """
    level = [cgroup_root]
    for _ in range(max_depth):
        below: list[Path] = []
        for directory in level:
            try:
                entries = list(os.scandir(directory))
            except OSError:
                continue
            for entry in entries:
                try:
                    if not entry.is_dir(follow_symlinks=False):
                        continue
                except OSError:
                    continue
                found = _pod_in_path(entry.name)
                if found is not None:
                    if found[0].uid == uid:
                        return Path(entry.path)
                    continue  # another pod: nothing of ours below it
                below.append(Path(entry.path))
        level = below
    return None


def pod_cgroup_dir(cgroup_root: Path, pod: PodRef | str, *, max_depth: int = 5) -> Path | None:
    """The pod-level cgroup directory under `cgroup_root` (`/sys/fs/cgroup` on v2), or None.

    `pod` is a PodRef (e.g. from `pod_of`, or built from an API pod's UID) or a cgroup path as in
    `/proc/<pid>/cgroup`. A path without `..` is cut after its pod component and joined to the
    root directly; otherwise the kubelet's usual places are tried for the UID, then a bounded
    search for nested roots. For cgroup v1 pass the memory hierarchy (`/sys/fs/cgroup/memory`).
    """
    if isinstance(pod, str):
        path = pod.removesuffix(_DELETED)
        found = _pod_in_path(path)
        if found is None:
            return None
        ref, index = found
        components = path.split("/")[: index + 1]
        if ".." not in components:
            direct = cgroup_root.joinpath(*(c for c in components if c))
            if direct.is_dir():
                return direct
    else:
        ref = pod
    for relative in _pod_dir_names(ref):
        candidate = cgroup_root / relative
        if candidate.is_dir():
            return candidate
    return _search(cgroup_root, ref.uid, max_depth)


def parse_memory_events(text: str) -> dict[str, int]:
    """Parse a cgroup v2 flat-keyed file such as `memory.events` (`key value` per line).

    Keeps every key, including ones newer kernels add (`sock_throttled`, …), so callers pick what
    they know. Raises ValueError for a line that is not `key integer`.
    """
    events: dict[str, int] = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        parts = line.split()
        if len(parts) != 2:
            raise ValueError(f"not a 'key value' line: {line!r}")
        try:
            events[parts[0]] = int(parts[1])
        except ValueError:
            raise ValueError(f"not a 'key value' line: {line!r}") from None
    return events


def _read_text(path: Path) -> str | None:
    try:
        return path.read_text()
    except (OSError, UnicodeDecodeError):
        return None


def _group_mode(pod_dir: Path) -> bool | None:
    """Any container child with `memory.oom.group` 1 → True; all read 0 → False; none read → None."""
    try:
        children = [e for e in os.scandir(pod_dir) if _CONTAINER.match(e.name) and e.is_dir()]
    except OSError:
        return None
    modes: list[bool] = []
    for child in children:
        text = _read_text(Path(child.path, "memory.oom.group"))
        if text is not None and text.strip() in ("0", "1"):
            modes.append(text.strip() == "1")
    return any(modes) if modes else None


def read_oom(pod_dir: Path) -> OomState | None:
    """OOM counters of a pod cgroup directory, or None when `memory.events` is missing or odd.

    None covers: the pod (and its cgroup) is gone, cgroup v1 (no `memory.events`), or a file we
    cannot parse. Never raises.
    """
    text = _read_text(pod_dir / "memory.events")
    if text is None:
        return None
    try:
        events = parse_memory_events(text)
    except ValueError:
        return None
    if "oom_kill" not in events:
        return None
    return OomState(
        oom_kill=events["oom_kill"],
        oom_group_kill=events.get("oom_group_kill"),
        group_mode=_group_mode(pod_dir),
    )
