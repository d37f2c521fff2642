"""Pure functions from (pods, nodes, values, time) to what each real exporter would print.

Label names, label order, HELP strings and value formatting follow the reference
(shared/reference/metrics-and-node.md §1-3): dcgm-exporter's render template with `%d`/`%f`
values, kubelet cAdvisor with pod-cgroup, pause and app-container series and explicit ms
timestamps, kube-state-metrics with sanitized resource names and conditional families, and
node-exporter whose processes collector only prints states that occur. Nothing here reads the
clock or the network, so unit tests render at any `now` and backfill renders the past.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from devenv.exporters.exposition import Family, Labels, Sample, go_float, to_text
from devenv.exporters.model import (
    DRIVER_VERSION,
    PAUSE_IMAGE,
    GpuAssignment,
    NodeView,
    PodView,
    container_cgroup,
    container_id,
    node_ip,
    pod_cgroup,
    pod_ip,
    pods_on,
)
from devenv.exporters.values import ABSENT, IDLE_WATTS, PAUSE_CPU_CORES, Kind, Level, Values

EXPORTERS = ("dcgm", "cadvisor", "node-exporter", "kube-state-metrics")
PER_NODE = frozenset({"dcgm", "cadvisor", "node-exporter"})
PHASES = ("Pending", "Running", "Succeeded", "Failed", "Unknown")
NODE_BOOT_UNIX = 1_750_000_000.0  # all fake nodes booted 2025-06-15; node CPU counters start here
_CPUS_PER_NODE = 2
_CPU_MODE_SHARE = {"idle": 0.0, "iowait": 0.002, "irq": 0.0, "nice": 0.0, "softirq": 0.001,
                   "steal": 0.0, "system": 0.015, "user": 0.04}  # idle is the rest
_OTHER_PROCESS_STATES = {"I": 42, "R": 1, "S": 187}


def _d(value: Level) -> str:
    """dcgm INT64 fields: `%d` (ints are kept exact so DCGM sentinels can be emulated); a NaN or an
    infinity set by a test passes as such, for what a broken exporter or relabelling can bring."""
    if isinstance(value, int):
        return str(value)
    number = float(value)
    return str(int(round(number))) if math.isfinite(number) else {"nan": "NaN", "inf": "+Inf", "-inf": "-Inf"}[
        str(number)]


def _f(value: Level) -> str:
    """dcgm DOUBLE fields: Go `%f`, six decimals."""
    return f"{float(value):f}"


# -- dcgm-exporter -----------------------------------------------------------------------------
_DCGM_HELP = {
    "DCGM_FI_DEV_GPU_UTIL": "GPU utilization (in %).",
    "DCGM_FI_DEV_MEM_COPY_UTIL": "Memory utilization (in %).",
    "DCGM_FI_DEV_FB_USED": "Framebuffer memory used (in MiB).",
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE": "Ratio of time the graphics engine is active.",
    "DCGM_FI_PROF_SM_ACTIVE": "The ratio of cycles an SM has at least 1 warp assigned.",
    "DCGM_FI_DEV_POWER_USAGE": "Power draw (in W).",
}
CUDA_CONTEXT_MIB = 1024  # memory an allocated-but-idle GPU still shows in FB_USED


def _dcgm_labels(a: GpuAssignment, hostname_label: str | None, pod_uid: bool = False) -> Labels:
    d = a.device
    labels: list[tuple[str, str]] = [
        ("gpu", str(d.index)),
        ("UUID", d.uuid),
        ("pci_bus_id", d.pci_bus_id),
        ("device", f"nvidia{d.index}"),
        ("modelName", d.model),
    ]
    if d.is_mig:
        labels += [("GPU_I_PROFILE", d.mig_profile or ""), ("GPU_I_ID", str(d.gpu_instance_id))]
    if hostname_label:
        labels.append((hostname_label, d.node))  # NODE_NAME, as the chart sets it
    labels.append(("DCGM_FI_DRIVER_VERSION", DRIVER_VERSION))
    if a.pod is not None:
        labels += [("container", a.container or ""), ("namespace", a.pod.namespace), ("pod", a.pod.name)]
        if pod_uid:  # --kubernetes-enable-pod-uid: the attributes stay sorted by name
            labels.append(("pod_uid", a.pod.uid))
    return tuple(labels)


def render_dcgm(
    node: NodeView, pods: Iterable[PodView], values: Values, now: float, *, hostname_label: str | None = "Hostname"
) -> list[Family]:
    """dcgm-exporter of one node. `hostname_label`: "Hostname" (<= 4.5.3-4.8.2), "hostname" (after
    PR #655) or None (`--no-hostname`). MIG instances read GPU_UTIL 0 whatever they do and have no
    MEM_COPY_UTIL, as on the real exporter (its maintainers: "expected"); GR_ENGINE_ACTIVE measures them.
    Pods' series carry `pod_uid` where the values switch it on for the node (`Values.pod_uid`)."""
    if hostname_label not in ("Hostname", "hostname", None):
        raise ValueError(f"hostname_label must be 'Hostname', 'hostname' or None, not {hostname_label!r}")
    out: dict[str, list[Sample]] = {name: [] for name in _DCGM_HELP}
    pod_uid = values.pod_uid(node.name, now)
    for a in values.assign_gpus(node, pods):
        labels = _dcgm_labels(a, hostname_label, pod_uid)
        if a.pod is not None:
            key = (a.pod.namespace, a.pod.name, a.slot)
            util = values.level(Kind.GPU_UTIL, key, now)
            gr = values.level(Kind.GR_ENGINE_ACTIVE, key, now)
            sm = values.level(Kind.SM_ACTIVE, key, now)
            watts = values.level(Kind.POWER, key, now)
        else:
            util, gr, sm, watts = 0, 0.0, 0.0, IDLE_WATTS
        if a.device.is_mig:  # dcgm-exporter exports GPU_UTIL 0 for MIG instances, whatever they do
            out["DCGM_FI_DEV_GPU_UTIL"].append(Sample("DCGM_FI_DEV_GPU_UTIL", labels, _d(0)))
        elif util != ABSENT:
            out["DCGM_FI_DEV_GPU_UTIL"].append(Sample("DCGM_FI_DEV_GPU_UTIL", labels, _d(util)))
            mem = min(100.0, float(util) * 0.4) if float(util) <= 100 else float(util)
            out["DCGM_FI_DEV_MEM_COPY_UTIL"].append(Sample("DCGM_FI_DEV_MEM_COPY_UTIL", labels, _d(mem)))
        busy = 0.0 if util == ABSENT or not math.isfinite(float(util)) else min(max(float(util), 0.0), 100.0)
        ghost = values.level(Kind.GHOST_GPU, (f"{node.name}/{a.device.index}",), now) if a.pod is None else 0
        fb = (0 if ghost == ABSENT else int(ghost)) if a.pod is None else CUDA_CONTEXT_MIB + int(busy * 300)
        out["DCGM_FI_DEV_FB_USED"].append(Sample("DCGM_FI_DEV_FB_USED", labels, _d(fb)))
        if gr != ABSENT:
            out["DCGM_FI_PROF_GR_ENGINE_ACTIVE"].append(Sample("DCGM_FI_PROF_GR_ENGINE_ACTIVE", labels, _f(gr)))
        if sm != ABSENT:
            out["DCGM_FI_PROF_SM_ACTIVE"].append(Sample("DCGM_FI_PROF_SM_ACTIVE", labels, _f(sm)))
        if watts != ABSENT and not a.device.is_mig:  # the whole GPU's draw, not a slice's
            out["DCGM_FI_DEV_POWER_USAGE"].append(Sample("DCGM_FI_DEV_POWER_USAGE", labels, _f(watts)))
    return [Family(name, help_, "gauge", tuple(out[name])) for name, help_ in _DCGM_HELP.items()]


# -- kubelet cAdvisor --------------------------------------------------------------------------
def _cadvisor_labels(container: str, cgroup: str, image: str, name: str, pod: PodView) -> Labels:
    return (
        ("container", container),
        ("cpu", "total"),
        ("id", cgroup),
        ("image", image),
        ("name", name),
        ("namespace", pod.namespace),
        ("pod", pod.name),
    )


def cpu_counter(values: Values, pod: PodView, container: str, now: float) -> float:
    """core-seconds a container used since the pod started: the integral of the set rate."""
    return values.integrate(Kind.CPU, (pod.namespace, pod.name, container), pod.created, now)


def render_cadvisor(node: NodeView, pods: Iterable[PodView], values: Values, now: float) -> list[Family]:
    """`/metrics/cadvisor` of one node: for each Running pod the pod cgroup (`container=""`,
    `image=""`), the pause sandbox (`container=""`, pause image) and each app container.

    The pod cgroup equals the sum of its children (the double counting pitfall of §2.1). A
    container set to ABSENT loses its own series only; the pod cgroup keeps counting.
    """
    ts = int(now * 1000)
    samples: list[Sample] = []
    name = "container_cpu_usage_seconds_total"
    for pod in pods_on(node.name, pods):
        if pod.phase != "Running":
            continue
        elapsed = max(0.0, now - pod.created)
        pause = PAUSE_CPU_CORES * elapsed
        total = pause
        children: list[Sample] = []
        sandbox = container_id(pod.uid, "")
        children.append(
            Sample(name, _cadvisor_labels("", container_cgroup(pod, sandbox), PAUSE_IMAGE, sandbox, pod),
                   go_float(round(pause, 9)), ts)
        )
        for c in pod.containers:
            used = cpu_counter(values, pod, c.name, now) if elapsed else 0.0
            total += used
            if values.level(Kind.CPU, (pod.namespace, pod.name, c.name), now) == ABSENT:
                continue
            cid = container_id(pod.uid, c.name)
            children.append(
                Sample(name, _cadvisor_labels(c.name, container_cgroup(pod, cid), c.image, cid, pod),
                       go_float(round(used, 9)), ts)
            )
        samples.append(Sample(name, _cadvisor_labels("", pod_cgroup(pod), "", "", pod), go_float(round(total, 9)), ts))
        samples.extend(children)
    return [Family(name, "Cumulative cpu time consumed in seconds.", "counter", tuple(samples))]


# -- kube-state-metrics ------------------------------------------------------------------------
def sanitize_label_name(name: str) -> str:
    """KSM's `SanitizeLabelName`: every character outside [a-zA-Z0-9_] becomes `_`."""
    return "".join(ch if ch.isascii() and (ch.isalnum() or ch == "_") else "_" for ch in name)


KSM_HELP = {
    "kube_pod_info": "[STABLE] Information about pod.",
    "kube_pod_owner": "[STABLE] Information about the Pod's owner.",
    "kube_pod_created": "[STABLE] Unix creation timestamp",
    "kube_pod_deletion_timestamp": "Unix deletion timestamp",
    "kube_pod_status_phase": "[STABLE] The pods current phase.",
    "kube_pod_status_scheduled": "[STABLE] Describes the status of the scheduling process for the pod.",
    "kube_pod_status_unschedulable": "[STABLE] Describes the unschedulable status for the pod.",
    "kube_pod_container_resource_requests": (
        "[STABLE] The number of requested request resource by a container. It is recommended to use the "
        "kube_pod_resource_requests metric exposed by kube-scheduler instead, as it is more precise."
    ),
}


def ksm_pod_samples(pod: PodView) -> dict[str, list[Sample]]:
    """The KSM samples of one pod, by family (families it has none of are missing).

    A pod's series depend on nothing but the pod, which lets a cache keep them per pod.
    """
    out: dict[str, list[Sample]] = {}

    def add(name: str, extra: Labels, value: str) -> None:
        base = (("namespace", pod.namespace), ("pod", pod.name), ("uid", pod.uid))
        out.setdefault(name, []).append(Sample(name, base + extra, value))

    node = pod.node or ""
    running = pod.phase == "Running"
    add("kube_pod_info", (
        ("host_ip", node_ip(node) if node else ""),
        ("pod_ip", pod_ip(pod.uid) if running else ""),
        ("node", node),
        ("created_by_kind", pod.owner_kind),
        ("created_by_name", pod.owner_name),
        ("priority_class", ""),
        ("host_network", "false"),
    ), "1")
    add("kube_pod_owner", (
        ("owner_kind", pod.owner_kind),
        ("owner_name", pod.owner_name),
        ("owner_is_controller", "true" if pod.owner_kind else ""),
    ), "1")
    add("kube_pod_created", (), go_float(pod.created))
    if pod.deletion_timestamp is not None:
        add("kube_pod_deletion_timestamp", (), go_float(pod.deletion_timestamp))
    for phase in PHASES:
        add("kube_pod_status_phase", (("phase", phase),), "1" if pod.phase == phase else "0")
    if pod.node or pod.unschedulable:
        scheduled = "true" if pod.node else "false"
        for cond in ("true", "false", "unknown"):
            add("kube_pod_status_scheduled", (("condition", cond),), "1" if cond == scheduled else "0")
    if pod.unschedulable:
        add("kube_pod_status_unschedulable", (), "1")
    for c in pod.containers:
        reqs: list[tuple[str, str, float]] = []
        if c.cpu_request_cores > 0:
            reqs.append(("cpu", "core", c.cpu_request_cores))
        if c.gpus > 0:
            reqs.append((sanitize_label_name("nvidia.com/gpu"), "integer", c.gpus))
        for resource, unit, amount in reqs:
            add("kube_pod_container_resource_requests", (
                ("container", c.name), ("node", node), ("resource", resource), ("unit", unit),
            ), go_float(amount))
    return out


def ksm_order(pods: Iterable[PodView]) -> list[PodView]:
    """The order KSM prints pods in."""
    return sorted(pods, key=lambda p: (p.namespace, p.name))


def render_kube_state_metrics(pods: Iterable[PodView], now: float) -> list[Family]:
    """KSM pod metrics. `now` is unused (KSM reports object state) but kept for a uniform call."""
    del now
    out: dict[str, list[Sample]] = {name: [] for name in KSM_HELP}
    for pod in ksm_order(pods):
        for name, samples in ksm_pod_samples(pod).items():
            out[name].extend(samples)
    return [Family(name, help_, "gauge", tuple(out[name])) for name, help_ in KSM_HELP.items()]


# -- node-exporter -----------------------------------------------------------------------------
NODE_CPU_HELP = "Seconds the CPUs spent in each mode."


def node_cpu_series() -> list[tuple[Labels, float]]:
    """`node_cpu_seconds_total` label sets and the share of uptime each counts (value = uptime * share)."""
    busy = sum(_CPU_MODE_SHARE.values())
    return [((("cpu", str(i)), ("mode", mode)), 1 - busy if mode == "idle" else share)
            for i in range(_CPUS_PER_NODE) for mode, share in sorted(_CPU_MODE_SHARE.items())]


def render_node_exporter(node: NodeView, values: Values, now: float) -> list[Family]:
    """node-exporter with `--collector.processes`: CPU seconds, process states, vmstat oom_kill.

    Like the real collector, `node_processes_state` only has a `state="D"` line while D-state
    processes exist; setting the count ABSENT drops the whole family (collector disabled, which is
    the node-exporter default).
    """
    uptime = max(0.0, now - NODE_BOOT_UNIX)
    cpu = [Sample("node_cpu_seconds_total", labels, go_float(round(uptime * factor, 2)))
           for labels, factor in node_cpu_series()]
    families = [Family("node_cpu_seconds_total", NODE_CPU_HELP, "counter", tuple(cpu))]
    dstate = values.level(Kind.NODE_DSTATE, (node.name,), now)
    if dstate != ABSENT:
        states = dict(_OTHER_PROCESS_STATES)
        if int(dstate) > 0:
            states["D"] = int(dstate)
        families.append(Family("node_processes_state", "Number of processes in each state.", "gauge", tuple(
            Sample("node_processes_state", (("state", s),), go_float(n)) for s, n in sorted(states.items())
        )))
    oom = values.level(Kind.NODE_OOM_KILLS, (node.name,), now)
    if oom != ABSENT:
        families.append(Family("node_vmstat_oom_kill", "/proc/vmstat information field oom_kill.", "untyped",
                               (Sample("node_vmstat_oom_kill", (), go_float(oom)),)))
    return families


# -- one entry point for the server and the backfill -------------------------------------------
def render_exporter(
    exporter: str,
    node: str | None,
    pods: Sequence[PodView],
    nodes: Sequence[NodeView],
    values: Values,
    now: float,
    *,
    hostname_label: str | None = "Hostname",
) -> list[Family]:
    """Families of one scrape target; raises KeyError for an unknown exporter or node."""
    if exporter == "kube-state-metrics":
        return render_kube_state_metrics(pods, now)
    if exporter not in PER_NODE:
        raise KeyError(exporter)
    view = next((n for n in nodes if n.name == node), None)
    if view is None:
        raise KeyError(node)
    if exporter == "dcgm":
        return render_dcgm(view, pods, values, now, hostname_label=hostname_label)
    if exporter == "cadvisor":
        return render_cadvisor(view, pods, values, now)
    return render_node_exporter(view, values, now)


def dcgm_text(node: NodeView, pods: Iterable[PodView], values: Values, now: float, *,
              hostname_label: str | None = "Hostname") -> str:
    return to_text(render_dcgm(node, pods, values, now, hostname_label=hostname_label))


def cadvisor_text(node: NodeView, pods: Iterable[PodView], values: Values, now: float) -> str:
    return to_text(render_cadvisor(node, pods, values, now))


def kube_state_metrics_text(pods: Iterable[PodView], now: float) -> str:
    return to_text(render_kube_state_metrics(pods, now))


def node_exporter_text(node: NodeView, values: Values, now: float) -> str:
    return to_text(render_node_exporter(node, values, now))
