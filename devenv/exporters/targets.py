"""Scrape targets as Prometheus sees them, and the labels it stores for each scraped sample.

This lives beside the exporters (not in `devenv.prometheus`) because the exporters need it too:
in the aggregate mode for big sandboxes, one scrape of `/dcgm/metrics` covers every node, and
the exporter itself writes into each series the labels Prometheus would have stored for that
node's own target (`stored_labels`). The aggregate job honours the scraped labels, so the stored
series are label for label what the per-node targets give: the janitor's queries cannot tell the
two modes apart (only `up` and the `scrape_*` series are per aggregate target instead of per node).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

from devenv.exporters.model import NodeView, exporter_pod_ip, node_ip

DcgmStyle = Literal["direct", "servicemonitor"]
# Per-node exporters served as one aggregate target each (path) and the job that scrapes it.
AGGREGATE_PATHS = {"dcgm": "/dcgm/metrics", "cadvisor": "/cadvisor/metrics", "node-exporter": "/node-exporter/metrics"}
AGGREGATE_JOBS = {"dcgm": "dcgm-exporter", "cadvisor": "kubelet", "node-exporter": "node-exporter"}


@dataclass(frozen=True)
class ScrapeTarget:
    """One scrape target as Prometheus sees it after service discovery and relabelling."""

    exporter: str  # one of render.EXPORTERS
    node: str | None
    path: str  # path on the ExporterServer
    labels: tuple[tuple[str, str], ...]  # target labels, including job and instance
    honor_labels: bool
    honor_timestamps: bool = True

    @property
    def job(self) -> str:
        return dict(self.labels)["job"]


def scrape_targets(nodes: Iterable[NodeView], *, dcgm_style: DcgmStyle = "direct") -> list[ScrapeTarget]:
    """Targets for all exporters: dcgm only on GPU nodes (its DaemonSet's node selector)."""
    if dcgm_style not in ("direct", "servicemonitor"):
        raise ValueError(f"dcgm_style must be 'direct' or 'servicemonitor', not {dcgm_style!r}")
    targets: list[ScrapeTarget] = []
    for n in sorted(nodes, key=lambda n: n.name):
        if n.gpus > 0:
            dcgm = {"job": "dcgm-exporter", "instance": f"{exporter_pod_ip('dcgm-exporter', n.name)}:9400"}
            if dcgm_style == "servicemonitor":  # Prometheus Operator's default target labels
                dcgm |= {"namespace": "gpu-operator", "pod": f"dcgm-exporter-{n.name}", "container": "exporter",
                         "service": "dcgm-exporter", "endpoint": "metrics"}
            targets.append(ScrapeTarget("dcgm", n.name, f"/dcgm/{n.name}/metrics", tuple(dcgm.items()),
                                        honor_labels=dcgm_style == "direct"))
        kubelet = {"job": "kubelet", "instance": f"{node_ip(n.name)}:10250", "metrics_path": "/metrics/cadvisor",
                   "namespace": "kube-system", "service": "kubelet", "endpoint": "https-metrics", "node": n.name}
        targets.append(ScrapeTarget("cadvisor", n.name, f"/cadvisor/{n.name}/metrics", tuple(kubelet.items()),
                                    honor_labels=True, honor_timestamps=False))
        # kube-prometheus: instance relabelled to the node name; the port belongs to kube-rbac-proxy.
        nodeexp = {"job": "node-exporter", "instance": n.name, "namespace": "monitoring",
                   "pod": f"node-exporter-{n.name}", "container": "kube-rbac-proxy", "service": "node-exporter",
                   "endpoint": "https"}
        targets.append(ScrapeTarget("node-exporter", n.name, f"/node-exporter/{n.name}/metrics",
                                    tuple(nodeexp.items()), honor_labels=False))
    # kube-prometheus drops pod/service/endpoint/namespace target labels; container stays.
    ksm = {"job": "kube-state-metrics", "instance": f"{exporter_pod_ip('kube-state-metrics', '')}:8443",
           "container": "kube-rbac-proxy-main"}
    targets.append(ScrapeTarget("kube-state-metrics", None, "/kube-state-metrics/metrics", tuple(ksm.items()),
                                honor_labels=True))
    return targets




def node_target(exporter: str, node: NodeView, *, dcgm_style: DcgmStyle = "direct") -> ScrapeTarget | None:
    """The per-node target of `exporter` on `node` (None: no such target, dcgm on a CPU node)."""
    return next((t for t in scrape_targets([node], dcgm_style=dcgm_style) if t.exporter == exporter), None)


def stored_labels(sample_labels: Mapping[str, str] | Iterable[tuple[str, str]], target: ScrapeTarget) -> dict[str, str]:
    """The label set Prometheus stores for a scraped sample (2.42 `mutateSampleLabels`).

    honor_labels true: scraped labels win; a target label is added only if the sample lacks that
    name (an empty scraped value still counts as present). honor_labels false: target labels win
    and a conflicting non-empty scraped label is kept as `exported_<name>` (prefix repeated until
    the name is free). Empty values are dropped, as the TSDB does.
    """
    scraped = dict(sample_labels)
    target_labels = dict(target.labels)
    out = dict(scraped)
    if target.honor_labels:
        for k, v in target_labels.items():
            if k not in scraped:
                out[k] = v
    else:
        conflicts = sorted(((k, scraped[k]) for k in target_labels if scraped.get(k, "") != ""),
                           key=lambda kv: len(kv[0]))
        out.update(target_labels)
        taken: set[str] = set()
        for k, v in conflicts:
            name = k
            while True:
                name = "exported_" + name
                if name not in scraped and name not in target_labels and name not in taken:
                    break
            taken.add(name)
            out[name] = v
    return {k: v for k, v in out.items() if v != ""}

