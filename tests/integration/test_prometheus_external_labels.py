"""One Prometheus store for two clusters, as Thanos Query or Mimir present it: every series carries
its cluster's external label, and the janitor reads only its own with `--prometheus-matcher`.

A Prometheus started here scrapes two exporter sets under `cluster="lab-a"` and `cluster="lab-b"`:
the sandbox's own exporters (lab-a), and a second exporter server reading the same pods (lab-b,
where a pod of the same namespace and name is busy). Covered:
- with `cluster="lab-a"` the janitor's GPU evidence query sees only lab-a's series: the pod is idle;
- with `cluster="lab-b"` it sees only lab-b's: the same pod is busy;
- with no matcher it mixes both clusters (the hazard the flag exists for);
- the matcher is in the query text the janitor sends;
on Prometheus 2.x and 3.x (ids `prom2`, `prom3`).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from test_observe_prometheus_live import gpu_pod

from devenv.exporters.server import ExporterServer, ValuesControl
from devenv.exporters.values import Values
from devenv.podviews import CachedPods, node_view
from devenv.prometheus import PrometheusServer, scrape_config
from devenv.prometheus_release import Release
from janitor.decide.evidence import PodKey
from janitor.observe.evidence import gpu_evidence
from janitor.observe.prometheus import SERVICE_MONITOR, Matcher, PrometheusConfig, PrometheusSource

SIGNAL = "DCGM_FI_DEV_GPU_UTIL"


def labelled(config: dict[str, Any], cluster: str, suffix: str) -> list[dict[str, Any]]:
    """The config's scrape jobs, renamed with `suffix`, every target carrying `cluster`."""
    jobs = []
    for job in config["scrape_configs"]:
        job = {**job, "job_name": job["job_name"] + suffix}
        job["static_configs"] = [{**sc, "labels": {**sc.get("labels", {}), "cluster": cluster}}
                                 for sc in job["static_configs"]]
        jobs.append(job)
    return jobs


@pytest.fixture
def two_clusters(sandbox, core: client.CoreV1Api, tmp_path: Path,  # noqa: ANN001
                 prometheus_release: Release) -> Iterator[tuple[str, Values]]:
    nodes = [node_view(n) for n in core.list_node().items]
    other = Values()
    with ExporterServer(CachedPods(core), lambda: nodes, other) as lab_b:
        a = scrape_config(sandbox.exporters_url, nodes, dcgm_style="servicemonitor", interval="1s")
        b = scrape_config(lab_b.url, nodes, dcgm_style="servicemonitor", interval="1s")
        config = {**a, "scrape_configs": labelled(a, "lab-a", "") + labelled(b, "lab-b", "-lab-b")}
        server = PrometheusServer(tmp_path / "thanos-like", config, release=prometheus_release).start()
        try:
            server.wait_ready()
            server.wait_for_targets_up(timeout=60)
            yield server.url, other
        finally:
            server.stop()


def peaks(url: str, namespace: str, matchers: tuple[Matcher, ...]) -> tuple[str, list[float | None]]:
    """The janitor's selector text and the GPU peaks its evidence query reads for the pod."""
    with PrometheusSource(PrometheusConfig(url=url, label_map=SERVICE_MONITOR, extra_matchers=matchers,
                                           connect_timeout=2, read_timeout=10)) as source:
        found = gpu_evidence(source, signal=SIGNAL, window=timedelta(seconds=20), step=timedelta(seconds=1),
                             at=datetime.now(timezone.utc), labels=SERVICE_MONITOR,
                             pods=[PodKey(namespace, "trainer")], fallback=timedelta(seconds=1))
        text = source.selector(SIGNAL)
    assert found.failed is None, found.failed
    return text, [g.peak for g in found.pods.get(PodKey(namespace, "trainer"), ())]


def test_the_cluster_matcher_keeps_each_cluster_to_its_own_series(
        two_clusters: tuple[str, Values], core: client.CoreV1Api, namespace: str,
        exporter_values: ValuesControl) -> None:
    url, lab_b = two_clusters
    gpu_pod(core, namespace, "trainer", gpus=1)
    exporter_values.set_gpu_util(namespace, "trainer", 0)  # idle here, in lab-a
    lab_b.set_gpu_util(namespace, "trainer", 93)  # busy there: another cluster's pod of the same name
    time.sleep(25)  # a 20 s window of 1 s scrapes

    query, own = peaks(url, namespace, (Matcher("cluster", "lab-a"),))
    assert 'cluster="lab-a"' in query
    assert own == [0.0], own
    _, theirs = peaks(url, namespace, (Matcher("cluster", "lab-b"),))
    assert theirs == [93.0], theirs
    _, mixed = peaks(url, namespace, ())
    assert 93.0 in mixed, mixed  # without the matcher lab-b's busy GPU is read as ours
