"""The node agent names the processes of deleted pods that hold GPUs, over a fake /proc, a fake
device root and a stand-in API.

Aspects covered:
- a process of a pod gone from the API that keeps `/dev/nvidia<minor>` open, and another that
  only maps it (in state Z), are reported after --sustain scans on the GPU condition (True, data:
  minor, PCI bus id, pid, state, since, pod uid, namespace/name as last listed, process name), by
  the metric, and by one Warning Event on the Node each, naming the GPU's UUID; not again while
  they hold it; the condition goes False once they are gone;
- never reported: a live pod's holder, a pod Terminating within its grace, a host process (no
  pod's cgroup, as nvidia-persistenced), a holder of `/dev/nvidiactl` alone, anything while the
  pods cannot be listed; a pod Terminating past its grace is;
- never a live pod's process: not through another pod claiming its UID as a mirror, not through a
  PID reused between the walk and the read of its files;
- a failed pod list neither clears a holder nor forgets its pod's name; a suspect whose files
  cannot be read makes the GPU condition Unknown, never False; a device name the agent cannot
  read (a non-ASCII digit) stops neither condition;
- under the real /dev a file counts only as an NVIDIA character device (major 195), its minor read
  from the device number, not the name: a plain file named `nvidia3` or another driver's device
  is no GPU, and a GPU given another name in the container is still the right one;
- the codec: a message cut to fit ends in `,+` and reads back incomplete; an entry this janitor
  cannot read is not guessed at;
- the D-state condition is unchanged beside it;
- the janitor's admin report joins a ghost GPU (memory in use, no pod) with the holder on the same
  node and PCI bus id (the driver's spelling and DCGM's; DCGM's `gpu` is an index, not the minor),
  with the pod's owner from its namespace; holders with no ghost beside them get their own
  section; a condition that is not True reports nobody;
- the owner of a holder's pod gets one notice per node and pod (its processes together), only when
  its namespace names one; it says the node, the GPUs and that the admins will free them.
"""

from __future__ import annotations

import datetime
import os
import shutil
import stat
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from test_node_agent_sight import NEIGHBOUR, NOW, StandInCore, _fake, of_pod, pod, process

from janitor import node_report
from janitor.decide.admin_report import admin_report
from janitor.decide.evidence import GhostGpu
from janitor.decide.holder_notices import believed, holder_notices
from janitor.decide.model import NamespaceView, Observation, SafetyLedger
from janitor.decide.owners import Owner, OwnerKind
from janitor.decide.plan import plan
from janitor.node_agent import devices
from janitor.node_agent.agent import AgentSettings, NodeAgent
from janitor.observe import views

GONE = "3f1e2d3c-4b5a-4968-8776-655443322110"
LIVE = "9a8b7c6d-5e4f-4a3b-8c2d-1e0f9a8b7c6d"
LATE = "1c2d3e4f-5a6b-4c7d-8e9f-0a1b2c3d4e5f"
BUS = "0000:3B:00.0"
UUID = "GPU-5f9a2c1e-8b7d-4e6f-a1b2-c3d4e5f60718"


class Recording(StandInCore):
    def __init__(self, pods: list[client.V1Pod]) -> None:
        super().__init__(pods)
        self.events: list[Any] = []

    def create_namespaced_event(self, namespace: str, body: Any) -> None:
        self.events.append(body)


def node(tmp_path: Path) -> tuple[Path, Path]:
    """A /proc with the driver's file for GPU minor 3, and a device root with its files."""
    proc, dev = tmp_path / "proc", tmp_path / "dev"
    info = proc / "driver" / "nvidia" / "gpus" / BUS.lower()
    info.mkdir(parents=True)
    (info / "information").write_text(f"Model: \t\t NVIDIA H100 80GB HBM3\nIRQ:   \t\t 214\nGPU UUID: \t {UUID}\n"
                                      f"Video BIOS: \t 96.00.99.00.01\nBus Type: \t PCIe\nDMA Size: \t 52 bits\n"
                                      f"DMA Mask: \t 0xfffffffffffff\nBus Location: \t {BUS}\nDevice Minor: \t 3\n")
    dev.mkdir()
    for name in ("nvidia0", "nvidia3", "nvidiactl", "nvidia-uvm"):
        (dev / name).write_text("")
    return proc, dev


def holding(proc: Path, dev: Path, pid: int, cgroup: str, comm: str, *, opened: tuple[str, ...] = (),
            mapped: tuple[str, ...] = (), state: str = "S") -> None:
    process(proc, pid, cgroup, comm)
    if state != "S":
        (proc / str(pid) / "stat").write_text((proc / str(pid) / "stat").read_text().replace(") S ", f") {state} "))
    (proc / str(pid) / "fd").mkdir()
    for fd, name in enumerate(opened, start=3):
        os.symlink(dev / name, proc / str(pid) / "fd" / str(fd))
    (proc / str(pid) / "maps").write_text("".join(
        f"7f{i:010x}-7f{i + 1:010x} rw-s 00000000 00:05 {1000 + i}          {dev / name}\n"
        for i, name in enumerate(mapped)) + "7f9900000000-7f9900021000 r-xp 00000000 08:01 42   /usr/lib/libc.so.6\n")


def deleting(uid: str, name: str, ago: datetime.timedelta) -> client.V1Pod:
    listed = pod(uid, name)
    listed.metadata.deletion_timestamp = NOW - ago
    listed.metadata.deletion_grace_period_seconds = 30
    return listed


def agent_over(proc: Path, dev: Path, tmp_path: Path, pods: list[client.V1Pod]) -> tuple[NodeAgent, Recording]:
    agent = NodeAgent(client.ApiClient(), AgentSettings("gpu-7", proc, tmp_path / "no-cgroups", sustain=2,
                                                        dev_root=dev), clock=lambda: NOW)
    core = Recording(pods)
    agent.core = core  # type: ignore[assignment]
    return agent, core


def held_events(core: Recording) -> list[str]:
    return [e.message for e in core.events if e.reason == node_report.EVENT_GPU_HELD]


def test_holders_of_a_deleted_pods_gpu_are_named_once_and_cleared(tmp_path: Path) -> None:
    proc, dev = node(tmp_path)
    process(proc, 1, "0::/init.scope\n", "systemd")
    process(proc, 2, of_pod(NEIGHBOUR), "kube-proxy")
    holding(proc, dev, 5, "0::/system.slice/nvidia-persistenced.service\n", "nvidia-persiste",
            opened=("nvidia0", "nvidia3", "nvidiactl"))
    holding(proc, dev, 30, of_pod(LIVE), "python", opened=("nvidia0", "nvidiactl"), mapped=("nvidia0",))
    holding(proc, dev, 40, of_pod(GONE), "python", opened=("nvidiactl", "nvidia3", "nvidia-uvm"))
    holding(proc, dev, 41, of_pod(GONE), "pt_data_worker", mapped=("nvidia3",), state="Z")
    holding(proc, dev, 42, of_pod(GONE), "sh", opened=("nvidiactl",))  # pins no GPU
    running = [pod(NEIGHBOUR, "kube-proxy-x7k2p", namespace="kube-system"), pod(LIVE, "serve-0"),
               pod(GONE, "train-7f9")]
    agent, core = agent_over(proc, dev, tmp_path, running)
    agent.scan_once()  # the pod is listed: its name is remembered
    core.pods = running[:2]  # deleted
    first = agent.scan_once()
    assert first.gpu_holders == [] and core.gpu_condition.status == "False"  # held in one scan of two
    report = agent.scan_once()
    assert [(h.pid, h.gpu.minor, h.state, h.how) for h in report.gpu_holders] == [(40, 3, "S", "fd"),
                                                                                 (41, 3, "Z", "map")]
    said = core.gpu_condition
    assert (said.status, said.reason) == ("True", node_report.REASON_GPU_HELD)
    message = node_report.decode_holders(said.message)
    assert message.complete and message.agent is not None and message.sight is not None
    assert [(h.minor, h.bus_id, h.pid, h.state, h.pod_uid, h.namespace, h.name, h.comm) for h in message.held] == [
        (3, BUS, 40, "S", GONE, "ml", "train-7f9", "python"), (3, BUS, 41, "Z", GONE, "ml", "train-7f9",
                                                               "pt_data_worker")]
    assert message.held[0].since == NOW
    assert message.summary.startswith("2 GPUs held by processes of 1 deleted or long-Terminating pods: GPU minor 3 "
                                      f"(bus {BUS}, {UUID}) held by process 'python' pid 40")
    events = held_events(core)
    assert len(events) == 2 and all(UUID in e and "ml/train-7f9" in e for e in events)
    assert agent.registry.get_sample_value("janitor_node_gpu_holders", {"node": "gpu-7"}) == 2
    assert core.condition.status == "False"  # the D-state condition: no task in D
    agent.scan_once()
    assert len(held_events(core)) == 2  # once per holder
    for pid in (40, 41):
        for path in sorted((proc / str(pid)).rglob("*"), reverse=True):
            path.unlink() if not path.is_dir() or path.is_symlink() else path.rmdir()
        (proc / str(pid)).rmdir()
    agent.scan_once()
    assert (core.gpu_condition.status, core.gpu_condition.reason) == ("False", node_report.REASON_GPU_CLEAR)
    assert node_report.decode_holders(core.gpu_condition.message).held == ()


def test_terminating_within_grace_is_not_a_holder_past_it_is_and_unlisted_pods_prove_nothing(tmp_path: Path) -> None:
    proc, dev = node(tmp_path)
    process(proc, 2, of_pod(NEIGHBOUR), "kube-proxy")
    holding(proc, dev, 50, of_pod(LATE), "python", opened=("nvidia3",))
    pods = [pod(NEIGHBOUR, "kube-proxy-x7k2p", namespace="kube-system"),
            deleting(LATE, "eval-2", datetime.timedelta(seconds=10))]
    agent, core = agent_over(proc, dev, tmp_path, pods)
    for _ in range(3):
        assert agent.scan_once().gpu_holders == []
    core.pods = [pods[0], deleting(LATE, "eval-2", datetime.timedelta(minutes=5))]
    agent.scan_once()
    [holder] = agent.scan_once().gpu_holders
    assert (holder.pid, holder.terminating, holder.name) == (50, True, "eval-2")
    assert "Terminating past its grace" in holder.describe(NOW)

    def unlisted(**_: Any) -> client.V1PodList:
        raise OSError("no route to host")

    core.list_pod_for_all_namespaces = unlisted  # type: ignore[method-assign]
    assert agent.scan_once().gpu_holders == []  # pods unknown: nothing is gone


def test_the_driver_names_each_minor_and_a_missing_file_leaves_the_minor_alone(tmp_path: Path) -> None:
    proc, _ = node(tmp_path)
    assert devices.read_gpus(proc) == {3: devices.Gpu(3, BUS, UUID, "NVIDIA H100 80GB HBM3")}
    assert devices.read_gpus(tmp_path / "nowhere") == {}


def test_a_message_cut_to_fit_reads_back_incomplete_and_unreadable_entries_are_not_guessed() -> None:
    held = [node_report.HeldGpu(i % 8, f"0000:{i:02X}:00.0", 1000 + i, "S", NOW, GONE, "ml",
                                "a-rather-long-pod-name-for-a-training-run", "py thon(x)") for i in range(20)]
    text = node_report.encode_holders("20 GPUs held", held)
    assert len(text) <= node_report.MESSAGE_MAX and text.endswith(",+")
    back = node_report.decode_holders(text)
    assert not back.complete and 0 < len(back.held) < 20 and back.held[0].comm == "py_thon_x_"
    assert node_report.decode_holders("3 GPUs held held=3|bus|x|S").held == ()
    assert not node_report.decode_holders("no data part").complete


def held_on(node: str, *held: node_report.HeldGpu, status: str = "True", scanned: datetime.datetime = NOW,
            run: bool = True, sees: int = 3) -> dict[str, Any]:
    """A Node as the apiserver returns it, with the agent's GPU condition: its last scan at
    `scanned` (`run` False: a message without the agent's part), seeing `sees` of 3 other pods."""
    agent = node_report.AgentRun(scanned - datetime.timedelta(hours=1), 100, 3, scanned) if run else None
    message = node_report.encode_holders(f"{len(held)} GPUs held", held, agent, node_report.Sight(sees, 3))
    return {"metadata": {"name": node}, "status": {"conditions": [
        {"type": node_report.GPU_CONDITION_TYPE, "status": status, "message": message}]}}


def test_the_admin_report_joins_a_ghost_gpu_with_its_holder_by_bus_id_on_its_node() -> None:
    since = NOW - datetime.timedelta(minutes=40)
    trainer = node_report.HeldGpu(3, "0000:3b:00.0", 4121, "S", since, GONE, "ml", "train-7f9", "python")
    unnamed = node_report.HeldGpu(5, "", 77, "D", since, LATE, "", "", "")
    nodes = [views.node_info(held_on("gpu-7", trainer, unnamed)),
             views.node_info(held_on("gpu-8", replace(trainer, pid=9)))]
    assert nodes[0].gpu_holders is not None and nodes[0].gpu_holders.message.held == (trainer, unnamed)
    ghosts = [GhostGpu("gpu-7", "1", 38912.0, "00000000:3B:00.0", UUID),  # index 1, minor 3: same bus
              GhostGpu("gpu-9", "1", 100.0, "00000000:3B:00.0")]  # same bus on another node: not joined
    owners = {"ml": Owner(OwnerKind.EMAIL, "alice@lab.example")}
    report = admin_report([], nodes, [], None, ghost_gpus=ghosts, owners=owners, gpu_holders=believed(nodes, [], NOW))
    sections = dict(report.sections)
    assert sections["Ghost GPUs (memory in use, no pod)"] == (
        "gpu-7 GPU 1: 38912 MiB in use, held by pid 4121 (python, state S) of deleted or long-Terminating pod "
        f"ml/train-7f9 (alice@lab.example (email)) since {since:%Y-%m-%d %H:%M}Z",
        "gpu-9 GPU 1: 100 MiB in use, no pod on it")
    assert sections["GPUs held by processes of deleted pods"] == (
        f"gpu-7 GPU minor 5: held by pid 77 (unnamed, state D) of deleted or long-Terminating pod uid {LATE} "
        f"(never seen listed) since {since:%Y-%m-%d %H:%M}Z",
        "gpu-8 GPU minor 3 (bus 0000:3b:00.0): held by pid 9 (python, state S) of deleted or long-Terminating pod "
        f"ml/train-7f9 (alice@lab.example (email)) since {since:%Y-%m-%d %H:%M}Z")
    assert "held-gpu:gpu-7/3/4121" in report.ids
    cleared = [views.node_info(held_on("gpu-7", trainer, status="False")),
               views.node_info(held_on("gpu-8", trainer, status="Unknown"))]
    held = believed(cleared, [], NOW)
    assert held == () and "GPUs held by processes of deleted pods" not in dict(
        admin_report([], cleared, [], None, gpu_holders=held).sections)


def test_bus_ids_compare_as_numbers_in_either_spelling() -> None:
    assert node_report.bus_key("0000:3b:00.0") == node_report.bus_key("00000000:3B:00.0") == (0, 0x3B, 0, 0)
    assert node_report.bus_key("3b:00.1") == (0, 0x3B, 0, 1)
    assert node_report.bus_key("0000:3b:00.0") != node_report.bus_key("0000:3c:00.0")
    assert node_report.bus_key("") is None and node_report.bus_key("nvidia3") is None


def test_a_cycles_report_names_the_holders_owner_from_the_pods_namespace() -> None:
    trainer = node_report.HeldGpu(3, "0000:3b:00.0", 4121, "S", NOW, GONE, "ml", "train-7f9", "python")
    observation = Observation(NOW, namespaces={"ml": NamespaceView("ml", annotations={"owner": "alice@lab.example"})},
                              nodes=(views.node_info(held_on("gpu-7", trainer)),))
    report = plan(observation, [], SafetyLedger(), NOW).admin_report
    assert report.sections == (("GPUs held by processes of deleted pods", (
        "gpu-7 GPU minor 3 (bus 0000:3b:00.0): held by pid 4121 (python, state S) of deleted or long-Terminating "
        f"pod ml/train-7f9 (alice@lab.example (email)) since {NOW:%Y-%m-%d %H:%M}Z",)),)


# -- what a review of the first version found ----------------------------------------------------

def test_a_terminating_pod_claiming_a_live_pods_uid_as_its_mirror_does_not_make_it_a_suspect(tmp_path: Path) -> None:
    """Anyone who can create a pod bound to the node can annotate it `kubernetes.io/config.mirror`
    with a live pod's UID and keep it Terminating (a finalizer): the live pod's holder stays its own."""
    proc, dev = node(tmp_path)
    process(proc, 2, of_pod(NEIGHBOUR), "kube-proxy")
    holding(proc, dev, 30, of_pod(LIVE), "python", opened=("nvidia3",))
    decoy = deleting("aaaaaaaa-bbbb-4ccc-8ddd-eeeeeeeeeeee", "decoy", datetime.timedelta(minutes=5))
    decoy.metadata.namespace = "zz-attacker"
    decoy.metadata.annotations = {"kubernetes.io/config.mirror": LIVE}
    pods = [pod(NEIGHBOUR, "kube-proxy-x7k2p", namespace="kube-system"), pod(LIVE, "serve-0"), decoy]
    agent, core = agent_over(proc, dev, tmp_path, pods)
    for _ in range(3):
        report = agent.scan_once()
    assert report.gpu_holders == [], [(h.pid, h.namespace, h.name) for h in report.gpu_holders]
    assert core.gpu_condition.status == "False"


def test_a_failed_pod_list_neither_clears_a_holder_nor_forgets_its_pod(tmp_path: Path) -> None:
    proc, dev = node(tmp_path)
    process(proc, 2, of_pod(NEIGHBOUR), "kube-proxy")
    holding(proc, dev, 40, of_pod(GONE), "python", opened=("nvidia3",))
    pods = [pod(NEIGHBOUR, "kube-proxy-x7k2p", namespace="kube-system"), pod(GONE, "train-7f9")]
    agent, core = agent_over(proc, dev, tmp_path, pods)
    agent.scan_once()
    core.pods = pods[:1]
    agent.scan_once()
    agent.scan_once()
    assert core.gpu_condition.status == "True"
    ok = core.list_pod_for_all_namespaces

    def blip(**_: Any) -> client.V1PodList:
        raise OSError("apiserver blip")

    core.list_pod_for_all_namespaces = blip  # type: ignore[method-assign]
    agent.scan_once()  # incomplete: the condition keeps its word
    core.list_pod_for_all_namespaces = ok  # type: ignore[method-assign]
    agent.scan_once()  # the process still holds GPU 3
    flips = core.gpu_condition.status
    agent.scan_once()
    [h] = agent.scan_once().gpu_holders
    assert (flips, h.namespace, h.name, len(held_events(core))) == ("True", "ml", "train-7f9", 1)


def test_a_suspect_whose_files_cannot_be_read_makes_the_gpu_condition_unknown_not_false(tmp_path: Path) -> None:
    proc, dev = node(tmp_path)
    process(proc, 2, of_pod(NEIGHBOUR), "kube-proxy")
    process(proc, 40, of_pod(GONE), "python")
    (proc / "40" / "fd").write_text("")  # exists, cannot be opened as a directory (as EACCES would)
    (proc / "40" / "maps").mkdir()  # exists, cannot be read
    agent, core = agent_over(proc, dev, tmp_path, [pod(NEIGHBOUR, "kube-proxy-x7k2p", namespace="kube-system")])
    for _ in range(3):
        agent.scan_once()
    assert agent.registry.get_sample_value("janitor_node_unreadable_files_total", {"node": "gpu-7"}) > 0
    assert core.gpu_condition.status != "False", core.gpu_condition.reason


def test_a_device_name_with_a_non_ascii_digit_stops_nothing(tmp_path: Path) -> None:
    proc, dev = node(tmp_path)
    process(proc, 2, of_pod(NEIGHBOUR), "kube-proxy")
    process(proc, 40, of_pod(GONE), "python")
    (proc / "40" / "fd").mkdir()
    os.symlink(dev / "nvidia\u00b2", proc / "40" / "fd" / "3")  # '²'.isdigit() is True, int('²') raises
    agent, core = agent_over(proc, dev, tmp_path, [pod(NEIGHBOUR, "kube-proxy-x7k2p", namespace="kube-system")])
    for _ in range(3):
        agent.scan_once()
    assert core.condition.status == "False"  # the D-state condition is written as ever
    assert core.gpu_condition.status == "False"  # nothing held: that is no GPU device


def test_a_pid_reused_between_the_walk_and_the_read_of_its_files_is_not_the_suspect(tmp_path: Path) -> None:
    """The walk saw pid 40 in the deleted pod; before its files are read (after the pod list) it
    exits and pid 40 is a live pod's process holding GPU 3 (another start time)."""
    proc, dev = node(tmp_path)
    process(proc, 2, of_pod(NEIGHBOUR), "kube-proxy")
    process(proc, 40, of_pod(GONE), "python")
    agent = NodeAgent(client.ApiClient(), AgentSettings("gpu-7", proc, tmp_path / "x", sustain=1, dev_root=dev),
                      clock=lambda: NOW)
    core = Recording([pod(NEIGHBOUR, "kube-proxy-x7k2p", namespace="kube-system"), pod(LIVE, "serve-0")])
    agent.core = core  # type: ignore[assignment]
    agent.scan_once()
    listing = core.list_pod_for_all_namespaces

    def list_then_reuse(**kw: Any) -> client.V1PodList:
        shutil.rmtree(proc / "40")
        holding(proc, dev, 40, of_pod(LIVE), "python", opened=("nvidia3",))
        later = _fake["stat_line"](40, "python", "S", starttime=250_000)  # a new process starts later
        (proc / "40" / "stat").write_text(later)
        (proc / "40" / "task" / "40" / "stat").write_text(later)
        return listing(**kw)

    core.list_pod_for_all_namespaces = list_then_reuse  # type: ignore[method-assign]
    report = agent.scan_once()
    assert report.gpu_holders == [], [(h.pid, h.pod_uid) for h in report.gpu_holders]


def test_under_the_real_dev_only_nvidia_character_devices_count_by_their_device_number(tmp_path: Path) -> None:
    proc, dev = node(tmp_path)
    for name in ("nvidia0", "nvidia3", "nvidia-uvm"):
        (dev / name).unlink()
    try:
        os.mknod(dev / "nvidia0", stat.S_IFCHR | 0o600, os.makedev(195, 5))  # GPU minor 5, named nvidia0 in here
    except PermissionError:
        pytest.skip("creating a character device needs CAP_MKNOD")
    os.mknod(dev / "nvidia1", stat.S_IFCHR | 0o600, os.makedev(1, 3))  # another driver's device (/dev/null's)
    (dev / "nvidia3").write_text("")  # a plain file
    for pid, name in ((60, "nvidia0"), (61, "nvidia1"), (62, "nvidia3")):
        holding(proc, dev, pid, of_pod(GONE), "python", opened=(name,))
    holding(proc, dev, 63, of_pod(GONE), "python", mapped=("nvidia0",))
    (proc / "63" / "root").symlink_to("/")  # its mount namespace: the host's, here
    held, unreadable = devices.holdings([60, 61, 62, 63], proc, dev, verify=True)
    assert [(h.pid, h.minors) for h in held] == [(60, frozenset({5})), (63, frozenset({5}))] and unreadable == 0
    by_name, _ = devices.holdings([60, 61, 62, 63], proc, dev)  # a fake device root: by name
    assert [(h.pid, h.minors) for h in by_name] == [(60, frozenset({0})), (61, frozenset({1})), (62, frozenset({3})),
                                                    (63, frozenset({0}))]


def test_the_owner_of_a_holders_pod_gets_one_notice_per_node_and_pod_and_only_a_known_owner() -> None:
    since = NOW - datetime.timedelta(minutes=40)
    a = node_report.HeldGpu(3, "0000:3b:00.0", 4121, "S", since, GONE, "ml", "train-7f9", "python")
    b = replace(a, minor=1, pid=4122, comm="pt_data_worker")
    stranger = node_report.HeldGpu(5, "", 77, "D", since, LATE, "", "", "")  # never seen listed
    unowned = replace(a, pod_uid=LIVE, namespace="scratch", name="x-0")
    nodes = [views.node_info(held_on("gpu-7", a, b, stranger, unowned)),
             views.node_info(held_on("gpu-9", a, status="Unknown"))]
    owners = {"ml": Owner(OwnerKind.EMAIL, "alice@lab.example"), "scratch": Owner(OwnerKind.UNKNOWN)}
    [notice] = holder_notices(believed(nodes, [], NOW), owners)
    assert (notice.key, notice.owner.value, [h.pid for h in notice.held]) == (f"gpu-7/{GONE}", "alice@lab.example",
                                                                            [4122, 4121])
    words = notice.words("#gpu-admins")
    assert words.startswith("Your pod ml/train-7f9 was deleted, but processes of it still hold GPUs on node gpu-7: "
                            "GPU minor 1 (bus 0000:3b:00.0) by pid 4122 (pt_data_worker, state S) since ")
    assert "the admins (#gpu-admins) see it in their report" in words and "kills nothing" in words
