"""The synthetic exporters print what the real ones print (reference §1-3).

Aspects covered:
- dcgm-exporter: label names and order of the render template, `%d`/`%f` values, one series per
  GPU for a 2-GPU pod (same pod labels, distinct gpu/UUID), unassigned GPUs without pod labels,
  `Hostname`/`hostname`/no-hostname variants, per-slot values, ABSENT series;
- GPU assignment: admission order by creation time, pods that don't fit get nothing, finished pods
  release their GPUs, UUIDs depend only on node and index;
- MIG: instances with GPU_I_PROFILE/GPU_I_ID and the parent UUID, GPU_UTIL always 0, GR_ENGINE_ACTIVE
  following the set utilisation;
- cAdvisor: pod cgroup (container="", image=""), pause and app container series, explicit ms
  timestamps, pod cgroup = sum of children, the counter is the integral of the set rate and stays
  monotonic when the rate changes or the series is ABSENT for a while;
- kube-state-metrics: sanitized `nvidia_com_gpu`/`integer`, cpu/`core`, one phase series per
  phase, unschedulable and deletion_timestamp only while true, Go float formatting;
- node-exporter: `state="D"` only while D processes exist, ABSENT drops the family, oom_kill untyped;
- Go's `strconv` 'g' formatting of floats;
- the text parses with prometheus_client's parser.
"""

from __future__ import annotations

import uuid

import pytest
from prometheus_client.parser import text_string_to_metric_families

from devenv.exporters.exposition import go_float
from devenv.exporters.model import ContainerView, NodeView, PodView, assign_gpus, gpu_uuid
from devenv.exporters.render import (
    cadvisor_text,
    dcgm_text,
    kube_state_metrics_text,
    node_exporter_text,
    render_cadvisor,
    render_dcgm,
)
from devenv.exporters.values import ABSENT, Kind, Values

T0 = 1_795_000_000.0
GPU_NODE = NodeView("gpu-node-1", gpus=4)
MIG_NODE = NodeView("mig-node-1", gpus=2, mig_profile="3g.40gb")


class Clock:
    def __init__(self, t: float) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def pod(name: str, *, node: str | None = "gpu-node-1", gpus: int = 0, created: float = T0 - 3 * 3600,
        phase: str = "Running", containers: tuple[ContainerView, ...] | None = None, ns: str = "ml",
        deleting: float | None = None, unschedulable: bool = False, owner: tuple[str, str] = ("Job", "j")) -> PodView:
    return PodView(
        namespace=ns, name=name, uid=str(uuid.uuid5(uuid.NAMESPACE_DNS, f"{ns}/{name}")), node=node,
        phase=phase, created=created, owner_kind=owner[0], owner_name=owner[1],
        containers=containers or (ContainerView("main", 1.0, gpus),), deletion_timestamp=deleting,
        unschedulable=unschedulable,
    )


def samples(text: str, name: str) -> list:
    return [s for fam in text_string_to_metric_families(text) for s in fam.samples if s.name == name]


def raw_lines(text: str, name: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith(name + "{") or line.startswith(name + " ")]


@pytest.fixture
def clock() -> Clock:
    return Clock(T0)


@pytest.fixture
def values(clock: Clock) -> Values:
    return Values(clock=clock)


# -- dcgm ----------------------------------------------------------------------------------------
def test_two_gpu_pod_has_one_series_per_gpu_and_free_gpus_have_no_pod_labels(values: Values) -> None:
    train = pod("train-0", gpus=2, containers=(ContainerView("trainer", 8, 2),))
    values.set_gpu_util("ml", "train-0", 97, gpu=0)
    text = dcgm_text(GPU_NODE, [train], values, T0)
    util = samples(text, "DCGM_FI_DEV_GPU_UTIL")
    assert len(util) == 4
    mine = [s for s in util if s.labels.get("pod") == "train-0"]
    assert [(s.labels["gpu"], s.labels["container"], s.labels["namespace"], s.value) for s in mine] == [
        ("0", "trainer", "ml", 97.0), ("1", "trainer", "ml", 0.0)]
    assert len({s.labels["UUID"] for s in mine}) == 2
    free = [s for s in util if "pod" not in s.labels]
    assert [s.labels["gpu"] for s in free] == ["2", "3"]
    assert all("namespace" not in s.labels and "container" not in s.labels for s in free)


def test_dcgm_label_order_and_value_formats_match_the_template(values: Values) -> None:
    values.set_gpu_util("ml", "train-0", 42.4, gpu=0)
    values.set_gr_engine_active("ml", "train-0", 0.912345, gpu=0)
    text = dcgm_text(GPU_NODE, [pod("train-0", gpus=1)], values, T0)
    line = raw_lines(text, "DCGM_FI_DEV_GPU_UTIL")[0]
    keys = [part.split("=")[0] for part in line[line.index("{") + 1:line.index("}")].split('",')]
    assert keys == ["gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname", "DCGM_FI_DRIVER_VERSION",
                    "container", "namespace", "pod"]
    assert line.endswith("} 42")  # %d
    assert 'device="nvidia0"' in line and 'pci_bus_id="00000000:07:00.0"' in line
    assert raw_lines(text, "DCGM_FI_PROF_GR_ENGINE_ACTIVE")[0].endswith("} 0.912345")  # %f
    assert raw_lines(text, "DCGM_FI_PROF_GR_ENGINE_ACTIVE")[1].endswith("} 0.000000")
    assert "# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).\n# TYPE DCGM_FI_DEV_GPU_UTIL gauge" in text


@pytest.mark.parametrize("label", ["Hostname", "hostname", None], ids=["4.5.3-style", "after-pr-655", "no-hostname"])
def test_hostname_label_variants(values: Values, label: str | None) -> None:
    text = dcgm_text(GPU_NODE, [], values, T0, hostname_label=label)
    s = samples(text, "DCGM_FI_DEV_GPU_UTIL")[0]
    present = {k for k in ("Hostname", "hostname") if k in s.labels}
    assert present == ({label} if label else set())
    if label:
        assert s.labels[label] == "gpu-node-1"


def test_hostname_label_is_validated(values: Values) -> None:
    with pytest.raises(ValueError, match="hostname_label"):
        render_dcgm(GPU_NODE, [], values, T0, hostname_label="HOSTNAME")


def test_wildcard_and_slot_values_latest_wins(values: Values, clock: Clock) -> None:
    values.set_gpu_util("ml", "p", 50)  # all slots
    clock.t += 1
    values.set_gpu_util("ml", "p", 5, gpu=1)
    text = dcgm_text(GPU_NODE, [pod("p", gpus=2)], values, clock.t)
    assert [s.value for s in samples(text, "DCGM_FI_DEV_GPU_UTIL")[:2]] == [50.0, 5.0]
    assert [s.value for s in samples(text, "DCGM_FI_PROF_GR_ENGINE_ACTIVE")[:2]] == [0.5, 0.05]


def test_absent_gpu_util_drops_only_that_series(values: Values) -> None:
    values.set_absent("gpu_util", "ml", "p", 1)
    values.set_absent(Kind.GR_ENGINE_ACTIVE, "ml", "p")
    text = dcgm_text(GPU_NODE, [pod("p", gpus=2)], values, T0)
    assert [s.labels["gpu"] for s in samples(text, "DCGM_FI_DEV_GPU_UTIL") if s.labels.get("pod") == "p"] == ["0"]
    assert [s.labels["gpu"] for s in samples(text, "DCGM_FI_DEV_FB_USED") if s.labels.get("pod") == "p"] == ["0", "1"]
    assert not [s for s in samples(text, "DCGM_FI_PROF_GR_ENGINE_ACTIVE") if s.labels.get("pod") == "p"]


def test_int_sentinel_is_printed_exactly(values: Values) -> None:
    values.set_gpu_util("ml", "p", 9223372036854775794)
    assert raw_lines(dcgm_text(GPU_NODE, [pod("p", gpus=1)], values, T0), "DCGM_FI_DEV_GPU_UTIL")[0].endswith(
        " 9223372036854775794")


# -- GPU assignment ------------------------------------------------------------------------------
def test_assignment_follows_creation_order_and_skips_what_does_not_fit() -> None:
    late = pod("late", gpus=1, created=T0 - 10)
    early = pod("early", gpus=2, created=T0 - 100)
    big = pod("big", gpus=4, created=T0 - 50)
    done = pod("done", gpus=1, created=T0 - 1000, phase="Succeeded")
    elsewhere = pod("elsewhere", gpus=1, node="gpu-node-2")
    result = assign_gpus(GPU_NODE, [late, big, early, done, elsewhere])
    assert [(a.device.index, a.pod.name if a.pod else None, a.slot) for a in result] == [
        (0, "early", 0), (1, "early", 1), (2, "late", 0), (3, None, None)]
    assert result[0].device.uuid == gpu_uuid("gpu-node-1", 0)
    assert assign_gpus(GPU_NODE, [])[0].device.uuid == result[0].device.uuid


def test_sm_activity_and_power_follow_utilisation_unless_set(values: Values) -> None:
    values.set_gpu_util("ml", "p", 100)  # a hung job: GPU_UTIL full, SM activity and power near idle
    values.set_sm_active("ml", "p", 0.02, gpu=1)
    values.set_power("ml", "p", 60, gpu=1)
    values.set_absent(Kind.SM_ACTIVE, "ml", "q")  # a node without the PROF fields
    text = dcgm_text(GPU_NODE, [pod("p", gpus=2), pod("q", gpus=1)], values, T0)
    sm = {(s.labels.get("pod"), s.labels["gpu"]): s.value for s in samples(text, "DCGM_FI_PROF_SM_ACTIVE")}
    power = {(s.labels.get("pod"), s.labels["gpu"]): s.value for s in samples(text, "DCGM_FI_DEV_POWER_USAGE")}
    assert sm[("p", "0")] == 1.0 and sm[("p", "1")] == 0.02 and ("q", "2") not in sm and sm[(None, "3")] == 0.0
    assert power[("p", "0")] == 400.0 and power[("p", "1")] == 60.0 and power[("q", "2")] == 55.0
    assert raw_lines(text, "DCGM_FI_DEV_POWER_USAGE")[0].split("modelName=")[1].startswith('"NVIDIA A100')


def test_mig_instances_have_parent_uuid_and_read_0_on_gpu_util(values: Values) -> None:
    nb = pod("nb", node="mig-node-1", gpus=1)
    values.set_gpu_util("ml", "nb", 30)
    text = dcgm_text(MIG_NODE, [nb], values, T0)
    assert [(s.labels["GPU_I_ID"], s.labels.get("pod"), s.value) for s in samples(text, "DCGM_FI_DEV_GPU_UTIL")] == [
        ("1", "nb", 0.0), ("2", None, 0.0)]
    assert samples(text, "DCGM_FI_DEV_MEM_COPY_UTIL") == samples(text, "DCGM_FI_DEV_POWER_USAGE") == []
    assert [s.value for s in samples(text, "DCGM_FI_PROF_SM_ACTIVE")] == [0.3, 0.0]
    gr = samples(text, "DCGM_FI_PROF_GR_ENGINE_ACTIVE")
    assert [(s.labels["GPU_I_PROFILE"], s.labels["GPU_I_ID"], s.labels.get("pod"), s.value) for s in gr] == [
        ("3g.40gb", "1", "nb", 0.3), ("3g.40gb", "2", None, 0.0)]
    assert {s.labels["UUID"] for s in gr} == {gpu_uuid("mig-node-1", 0)}
    line = raw_lines(text, "DCGM_FI_PROF_GR_ENGINE_ACTIVE")[0]
    assert line.index("GPU_I_PROFILE") < line.index("GPU_I_ID") < line.index("Hostname")


# -- cAdvisor ------------------------------------------------------------------------------------
def test_cadvisor_series_shapes_and_pod_cgroup_is_the_sum(values: Values) -> None:
    p = pod("train-0", created=T0 - 1000, containers=(ContainerView("trainer", 8, 0), ContainerView("side", 0, 0)))
    values.apply({"set": [{"kind": "cpu", "key": ["ml", "train-0", "trainer"], "value": 2.0, "at": T0 - 1000}]})
    text = cadvisor_text(GPU_NODE, [p], values, T0)
    got = samples(text, "container_cpu_usage_seconds_total")
    assert len(got) == 4
    cgroup, pause, trainer, side = got
    assert (cgroup.labels["container"], cgroup.labels["image"], cgroup.labels["name"]) == ("", "", "")
    assert cgroup.labels["id"].endswith("kubepods-burstable-pod" + p.uid.replace("-", "_") + ".slice")
    assert pause.labels["container"] == "" and pause.labels["image"] == "registry.k8s.io/pause:3.10"
    assert trainer.labels["container"] == "trainer" and trainer.labels["image"]
    assert trainer.labels["id"].startswith(cgroup.labels["id"] + "/cri-containerd-")
    assert trainer.value == pytest.approx(2000.0)
    assert side.value == pytest.approx(2.0)  # the 0.002-core default over 1000 s
    assert cgroup.value == pytest.approx(trainer.value + side.value + pause.value)
    assert set(trainer.labels) == {"container", "cpu", "id", "image", "name", "namespace", "pod"}
    assert raw_lines(text, "container_cpu_usage_seconds_total")[0].endswith(f" {int(T0 * 1000)}")
    assert "# TYPE container_cpu_usage_seconds_total counter" in text


def test_cpu_counter_is_monotonic_across_rate_changes_and_absence(values: Values, clock: Clock) -> None:
    p = pod("w", created=T0, containers=(ContainerView("c", 1, 0),))
    seen = []
    for rate in [3.0, 0.5, ABSENT, 0.0, 4.0, None]:
        values.set_cpu("ml", "w", "c", rate)
        for _ in range(3):
            clock.t += 10
            text = cadvisor_text(GPU_NODE, [p], values, clock.t)
            cpu = samples(text, "container_cpu_usage_seconds_total")
            series = [s.value for s in cpu if s.labels["container"] == "c"]
            assert len(series) == (0 if rate == ABSENT else 1)
            total = [s.value for s in cpu if s.labels["id"].endswith(".slice")]
            seen.append((series[0] if series else None, total[0]))
    app = [a for a, _ in seen if a is not None]
    pods = [t for _, t in seen]
    assert app == sorted(app) and pods == sorted(pods)
    # 30 s at 3 cores + 30 s at 0.5 + 30 s ABSENT (default 0.002) + 30 s at 0 + 30 s at 4 + 30 s default
    assert app[-1] == pytest.approx(30 * 3 + 30 * 0.5 + 30 * 0.002 + 0 + 30 * 4 + 30 * 0.002)


def test_cadvisor_only_running_pods(values: Values) -> None:
    fams = render_cadvisor(GPU_NODE, [pod("pending", phase="Pending"), pod("done", phase="Succeeded")], values, T0)
    assert fams[0].samples == ()


# -- kube-state-metrics --------------------------------------------------------------------------
def test_ksm_resources_are_sanitized_and_units_match() -> None:
    p = pod("train-0", containers=(ContainerView("trainer", 8, 2),))
    reqs = samples(kube_state_metrics_text([p], T0), "kube_pod_container_resource_requests")
    assert {(s.labels["resource"], s.labels["unit"], s.value) for s in reqs} == {
        ("nvidia_com_gpu", "integer", 2.0), ("cpu", "core", 8.0)}
    assert all(s.labels["node"] == "gpu-node-1" and s.labels["uid"] == p.uid for s in reqs)


def test_ksm_conditional_families() -> None:
    running = pod("run")
    stuck = pod("stuck", node=None, phase="Pending", unschedulable=True, owner=("", ""))
    going = pod("going", deleting=T0 - 5)
    text = kube_state_metrics_text([running, stuck, going], T0)
    assert [s.labels["pod"] for s in samples(text, "kube_pod_status_unschedulable")] == ["stuck"]
    assert [(s.labels["pod"], s.value) for s in samples(text, "kube_pod_deletion_timestamp")] == [("going", T0 - 5)]
    phases = [s for s in samples(text, "kube_pod_status_phase") if s.labels["pod"] == "stuck"]
    assert {s.labels["phase"]: s.value for s in phases} == {
        "Pending": 1.0, "Running": 0.0, "Succeeded": 0.0, "Failed": 0.0, "Unknown": 0.0}
    owner = [s for s in samples(text, "kube_pod_owner") if s.labels["pod"] == "stuck"][0]
    assert (owner.labels["owner_kind"], owner.labels["owner_name"]) == ("", "")
    info = {s.labels["pod"]: s.labels for s in samples(text, "kube_pod_info")}
    assert info["run"]["node"] == "gpu-node-1" and info["stuck"]["node"] == ""
    assert "kube_pod_created{" in text and f"}} {go_float(running.created)}" in text
    assert "# HELP kube_pod_status_phase [STABLE] The pods current phase." in text


# -- node-exporter -------------------------------------------------------------------------------
def test_node_exporter_d_state_only_while_present(values: Values, clock: Clock) -> None:
    states = {s.labels["state"] for s in samples(node_exporter_text(GPU_NODE, values, T0), "node_processes_state")}
    assert "D" not in states and states
    values.set_node_dstate("gpu-node-1", 3)
    values.set_node_oom_kills("gpu-node-1", 7)
    text = node_exporter_text(GPU_NODE, values, T0)
    assert {s.labels["state"]: s.value for s in samples(text, "node_processes_state")}["D"] == 3.0
    assert samples(text, "node_vmstat_oom_kill")[0].value == 7.0
    assert "# TYPE node_vmstat_oom_kill untyped" in text
    values.set_absent("node_dstate", "gpu-node-1")
    text = node_exporter_text(GPU_NODE, values, T0)
    assert "node_processes_state" not in text
    assert {s.labels["mode"] for s in samples(text, "node_cpu_seconds_total")} >= {"idle", "user", "system", "iowait"}


@pytest.mark.parametrize(("value", "text"), [
    (1754200000, "1.7542e+09"), (3.831959552e9, "3.831959552e+09"), (10870.69, "10870.69"), (0.031, "0.031"),
    (8, "8"), (0, "0"), (1234567, "1.234567e+06"), (123456, "123456"), (1e-05, "1e-05"), (0.0001, "0.0001"),
    (-2.5, "-2.5"), (6.8719476736e10, "6.8719476736e+10"), (float("nan"), "NaN"), (float("inf"), "+Inf"),
])
def test_go_float(value: float, text: str) -> None:
    assert go_float(value) == text


def test_a_pod_keeps_its_gpus_when_an_earlier_pod_goes() -> None:
    """Like a real device plugin: a pod's `gpu` label never changes while it lives, and a backfill
    made from the store's JSON assigns the same devices as the live exporter."""
    values = Values(Clock(T0))
    first, second = pod("first", gpus=1, created=T0 - 7200), pod("second", gpus=2, created=T0 - 3600)

    def gpus_of(store: Values, pods, name: str) -> list[str]:
        return sorted(str(a.device.index) for a in store.assign_gpus(GPU_NODE, pods) if a.pod and a.pod.name == name)

    before = gpus_of(values, [first, second], "second")
    after = gpus_of(values, [second], "second")  # `first` finished and is gone
    assert before == after == ["1", "2"]
    copy = Values.from_json(values.to_json())
    assert gpus_of(copy, [second], "second") == ["1", "2"]
    newcomer = pod("third", gpus=1, created=T0)
    assert gpus_of(values, [second, newcomer], "third") == ["0"]  # the freed device
