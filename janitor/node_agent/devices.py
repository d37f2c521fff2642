"""Which processes hold which GPUs, read from `/proc`: the holders of `/dev/nvidia<minor>`.

Why this module looks the way it does:
- A process holds a GPU through an open file (`/proc/<pid>/fd/*` links to `/dev/nvidia<minor>`) or
  a mapping (`/proc/<pid>/maps`: CUDA maps the device file and may keep the mapping after closing
  the file). Both are read; either is holding. `/dev/nvidiactl` and `/dev/nvidia-uvm` pin no GPU,
  so only `/dev/nvidia<digits>` counts. A holder in any state counts (a zombie's files are gone
  with it, so a zombie is seen only through a thread that still holds them).
- Only the processes the caller names are read (those of pods that should be gone): reading every
  fd of every process on a node is the expensive part, and a live pod's holders are its business.
- The minor is not nvidia-smi's index: each GPU's minor is joined to its PCI bus id and UUID from
  `/proc/driver/nvidia/gpus/<bus id>/information` ("Device Minor:", "GPU UUID:"), the names
  dcgm-exporter labels its series with. A minor without that file is still reported, without them.
- Under the real `/dev` a name is not enough: the file is stat'ed (the open file through its fd
  link; a mapped one through `/proc/<pid>/root`, in the process's own mount namespace) and counts
  only as a character device of the NVIDIA driver's major (195), its minor read from the device
  number: a plain file named `nvidia3` is no GPU, and a runtime that gave the device another name
  in the container still names the right GPU. The device root is injectable (`dev_root`), as
  `/proc` is: under any other root, files are taken by name, so the sandbox plays a holder with a
  plain file under a fake device root.
- Processes exit while we read: a missing file is normal and skipped; a file that exists and
  cannot be read is counted (`unreadable`), never raised.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from janitor.node_agent.procfs import parse_stat

__all__ = ["Gpu", "Holding", "holdings", "read_gpus"]

_VANISHED = (FileNotFoundError, ProcessLookupError)
NVIDIA_MAJOR = 195  # the driver's character devices (/proc/devices: nvidia-frontend), every /dev/nvidia<minor>
REAL_DEV = Path("/dev")
_FIELD = re.compile(r"^(Device Minor|GPU UUID|Bus Location|Model):\s*(.*?)\s*$", re.MULTILINE)


@dataclass(frozen=True, slots=True)
class Gpu:
    """One GPU as the driver names it: its device minor, PCI bus id and UUID (dcgm-exporter's
    `pci_bus_id` and `UUID` labels), and model."""

    minor: int
    bus_id: str = ""
    uuid: str = ""
    model: str = ""


@dataclass(frozen=True, slots=True)
class Holding:
    """A process holding GPU device files: which minors, and whether through an open file, a
    mapping or both (`how`: "fd", "map", "fd+map")."""

    pid: int
    starttime_ticks: int
    comm: str
    state: str
    minors: frozenset[int]
    how: str


def read_gpus(proc_root: Path = Path("/proc")) -> dict[int, Gpu]:
    """The node's GPUs by device minor, from the driver's files; empty without the driver."""
    base = proc_root / "driver" / "nvidia" / "gpus"
    try:
        buses = sorted(os.listdir(base))
    except OSError:
        return {}
    found: dict[int, Gpu] = {}
    for bus in buses:
        try:
            text = (base / bus / "information").read_text(errors="replace")
        except OSError:
            continue
        fields = dict(_FIELD.findall(text))
        minor = fields.get("Device Minor", "")
        if not (minor.isascii() and minor.isdigit()):
            continue
        found[int(minor)] = Gpu(int(minor), fields.get("Bus Location") or bus, fields.get("GPU UUID", ""),
                                fields.get("Model", ""))
    return found


class _Devices:
    """Tells a GPU device path from any other, for one device root."""

    def __init__(self, dev_root: Path, verify: bool | None = None) -> None:
        self.prefix = os.fspath(dev_root).rstrip("/") + "/nvidia"
        self.verify = dev_root == REAL_DEV if verify is None else verify

    def minor(self, path: str) -> int | None:
        """The minor a path's name says (`nvidia<minor>`), or None."""
        if not path.startswith(self.prefix):
            return None
        rest = path[len(self.prefix):]
        if rest.endswith(" (deleted)"):
            rest = rest[:-len(" (deleted)")]
        return int(rest) if rest.isascii() and rest.isdigit() else None

    def device(self, path: str, at: str | None, dir_fd: int | None = None) -> int | None:
        """The GPU minor of the file `path` names, the file itself stat'ed at `at` (relative to
        `dir_fd`) under the real /dev: None when it is no NVIDIA character device. Raises OSError
        when it cannot be stat'ed."""
        named = self.minor(path)
        if named is None or not self.verify or at is None:
            return named
        st = os.stat(at, dir_fd=dir_fd)
        if not stat.S_ISCHR(st.st_mode) or os.major(st.st_rdev) != NVIDIA_MAJOR:
            return None
        return os.minor(st.st_rdev)


def _opened(proc_dir: str, devices: _Devices) -> tuple[set[int], bool]:
    """Minors of the device files a process has open; and whether its fd directory was unreadable."""
    minors: set[int] = set()
    try:
        directory = os.open(f"{proc_dir}/fd", os.O_RDONLY | os.O_DIRECTORY)
    except _VANISHED:
        return minors, False
    except OSError:
        return minors, True
    try:  # each link read relative to the open directory: no path walked again per file
        fds = os.listdir(directory)
        for fd in fds:
            try:
                target = os.readlink(fd, dir_fd=directory)
            except OSError:  # closed under us, or not ours to read: the maps still say what is held
                continue
            if not target.startswith(devices.prefix):
                continue
            try:
                minor = devices.device(target, fd, directory)  # the open file itself, through its link
            except _VANISHED:
                continue  # closed under us
            if minor is not None:
                minors.add(minor)
    except _VANISHED:
        pass
    except OSError:
        return minors, True
    finally:
        os.close(directory)
    return minors, False


def _mapped(proc_dir: str, devices: _Devices) -> tuple[set[int], bool]:
    """Minors of the device files a process has mapped; and whether its maps were unreadable."""
    minors: set[int] = set()
    try:
        with open(f"{proc_dir}/maps", encoding="utf-8", errors="replace") as f:
            text = f.read()  # a CUDA process maps hundreds of files: one search over the whole text first
    except _VANISHED:
        return minors, False
    except OSError:
        return minors, True
    at = text.find(devices.prefix)
    trouble = False
    while at >= 0:
        line = text[text.rfind("\n", 0, at) + 1:text.find("\n", at) % (len(text) + 1)]
        parts = line.split(maxsplit=5)
        if len(parts) == 6:
            path = parts[5].removesuffix(" (deleted)")
            try:  # the file as the process sees it, in its own mount namespace
                minor = devices.device(path, f"{proc_dir}/root{path}")
            except _VANISHED:
                minor = None  # the process, or the file, is gone
            except OSError:
                minor, trouble = None, True
            if minor is not None:
                minors.add(minor)
        at = text.find(devices.prefix, at + len(devices.prefix))
    return minors, trouble


def holdings(pids: Iterable[int], proc_root: Path = Path("/proc"), dev_root: Path = REAL_DEV,
             verify: bool | None = None) -> tuple[list[Holding], int]:
    """The GPU devices each of `pids` holds (processes holding none are left out), and how many
    processes could not be read whole (their holdings may be missing). `verify`: check that each
    file is an NVIDIA character device (default: under the real /dev only)."""
    devices = _Devices(dev_root, verify)
    base = os.fspath(proc_root)
    found: list[Holding] = []
    unreadable = 0
    for pid in sorted(set(pids)):
        proc_dir = f"{base}/{pid}"
        opened, fd_trouble = _opened(proc_dir, devices)
        mapped, map_trouble = _mapped(proc_dir, devices)
        unreadable += fd_trouble or map_trouble
        if not opened and not mapped:
            continue
        try:
            with open(f"{proc_dir}/stat", "rb") as f:
                stat = parse_stat(f.read().decode("utf-8", "replace"))
        except _VANISHED:
            continue  # it exited while read: it holds nothing now
        except (OSError, ValueError):
            unreadable += 1
            continue
        how = "+".join(name for name, held in (("fd", opened), ("map", mapped)) if held)
        found.append(Holding(pid, stat.starttime_ticks, stat.comm, stat.state, frozenset(opened | mapped), how))
    return found, unreadable
