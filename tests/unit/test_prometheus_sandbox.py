"""A real Prometheus scraping the synthetic exporters, with backfill: Debian's 2.x and 3.x built from
its Go module (ids `prom2`, `prom3`), with the same config, flags and promtool backfill.

Aspects covered:
- Prometheus starts, becomes ready and scrapes every target (dcgm, kubelet, node-exporter, KSM);
- an instant query (through prometheus_api_client, as the janitor queries) sees
  `DCGM_FI_DEV_GPU_UTIL` per GPU of a 2-GPU pod with the labels real deployments store: `pod`/
  `namespace`/`container` with the "direct" job, `exported_pod`/`exported_namespace`/
  `exported_container` plus the exporter's own `pod`/`namespace` behind a ServiceMonitor, where
  unassigned GPUs inherit the exporter's `pod` (the q5 pitfall);
- a 2-hour history backfilled with promtool before start answers `max_over_time(...[2h])` and
  `count_over_time(...[2h])` close to the expected 1440 samples (5 s interval), history segments
  show up where they were set, and the backfilled samples continue into the live scrapes as ONE
  series (raw samples on both sides of the start, no gap), for both dcgm label styles;
- the cAdvisor counter backfilled from the history integral continues without a reset.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path

import pytest
from prometheus_api_client import PrometheusConnect

from devenv.exporters.model import ContainerView, NodeView, PodView
from devenv.exporters.server import ExporterServer, ValuesControl
from devenv.exporters.values import Kind, Values
from devenv.procs import wait_until
from devenv.prometheus import PrometheusServer, backfill, scrape_config
from devenv.prometheus_release import Release

pytestmark = pytest.mark.sandbox

INTERVAL = 5
NODES = [NodeView("gpu-node-1", 4)]
TARGETS = 4  # dcgm, kubelet and node-exporter of the one node, plus kube-state-metrics


def make_pods(now: float) -> list[PodView]:
    created = float(int(now - 3 * 3600))
    return [
        PodView("ml", "train-0", "0b6c1f2e-3a4b-4c5d-8e9f-0a1b2c3d4e5f", "gpu-node-1", "Running", created,
                "Job", "train", (ContainerView("trainer", 8, 2),), None, False),
        PodView("ml", "idle-nb", "7c1d2e3f-4a5b-4c6d-9e8f-1a2b3c4d5e6f", "gpu-node-1", "Running", created + 60,
                "StatefulSet", "nb", (ContainerView("jupyter", 1, 1),), None, False),
    ]


def labels_for(style: str) -> tuple[str, str, str]:
    """Names under which the workload's pod/namespace/container are stored."""
    prefix = "" if style == "direct" else "exported_"
    return prefix + "pod", prefix + "namespace", prefix + "container"


@pytest.fixture
def run(tmp_path: Path) -> Iterator[dict]:
    """Holds what a test starts; stops Prometheus and the exporters whatever happens."""
    state: dict = {}
    yield state
    if "prometheus" in state:
        state["prometheus"].stop()
    if "exporters" in state:
        state["exporters"].stop()


def start(run: dict, tmp_path: Path, pods: list[PodView], values: Values, style: str,
          release: Release) -> PrometheusConnect:
    run["exporters"] = ExporterServer(lambda: pods, lambda: NODES, values).start()
    config = scrape_config(run["exporters"].url, NODES, dcgm_style=style, interval=f"{INTERVAL}s")  # type: ignore[arg-type]
    prom = run["prometheus"] = PrometheusServer(tmp_path / "data", config, release=release)
    began = time.monotonic()
    prom.start()
    run["ready_s"] = prom.wait_ready(timeout=60)
    prom.wait_for_targets_up(timeout=60, expected=TARGETS)
    run["targets_up_s"] = time.monotonic() - began
    return PrometheusConnect(url=prom.url, disable_ssl=True)


def one(prom: PrometheusConnect, query: str) -> float:
    result = prom.custom_query(query)
    assert len(result) == 1, f"{query}: expected one series, got {result}"
    return float(result[0]["value"][1])


@pytest.mark.parametrize("style", ["direct", "servicemonitor"])
def test_instant_query_sees_gpu_util_with_real_labels(run: dict, tmp_path: Path, style: str,
                                                       prometheus_release: Release) -> None:
    pods = make_pods(time.time())
    values = Values()
    prom = start(run, tmp_path, pods, values, style, prometheus_release)
    ValuesControl(run["exporters"].url).set_gpu_util("ml", "train-0", 97, gpu=0)
    pod_l, ns_l, ctr_l = labels_for(style)
    query = f'DCGM_FI_DEV_GPU_UTIL{{{pod_l}="train-0"}}'

    def updated() -> bool:
        return any(r["value"][1] == "97" for r in prom.custom_query(query))

    wait_until(updated, timeout=30, what="GPU_UTIL 97 scraped", interval=0.5)
    by_gpu = {r["metric"]["gpu"]: r for r in prom.custom_query(query)}
    assert sorted(by_gpu) == ["0", "1"]
    assert (by_gpu["0"]["value"][1], by_gpu["1"]["value"][1]) == ("97", "0")
    for r in by_gpu.values():
        m = r["metric"]
        assert (m[ns_l], m[ctr_l], m["job"], m["Hostname"]) == ("ml", "trainer", "dcgm-exporter", "gpu-node-1")
    m = by_gpu["0"]["metric"]
    free = prom.custom_query('DCGM_FI_DEV_GPU_UTIL{gpu="3"}')  # train-0 has 0-1, idle-nb 2
    assert len(free) == 1
    if style == "direct":
        assert not [k for k in m if k.startswith("exported_")]
        assert all("pod" not in r["metric"] for r in free)
    else:
        assert (m["pod"], m["namespace"], m["container"]) == ("dcgm-exporter-gpu-node-1", "gpu-operator", "exporter")
        assert (m["service"], m["endpoint"]) == ("dcgm-exporter", "metrics")
        assert all(r["metric"]["pod"] == "dcgm-exporter-gpu-node-1" and "exported_pod" not in r["metric"]
                   for r in free)


@pytest.mark.parametrize("style", ["direct", "servicemonitor"])
def test_backfilled_idle_history_joins_live_scrapes(run: dict, tmp_path: Path, style: str,
                                                     prometheus_release: Release) -> None:
    now = time.time()
    pods = make_pods(now)
    values = Values()
    start_t = now - 7200
    values.add_history(Kind.GPU_UTIL, ("ml", "train-0", 0), [(start_t, start_t + 3600, 97)])
    values.add_history(Kind.CPU, ("ml", "train-0", "trainer"), [(start_t, start_t + 3600, 4.0)])
    report = backfill(values, pods, NODES, start_t, now, INTERVAL, tmp_path / "data", dcgm_style=style,
                      release=prometheus_release)
    assert report.timestamps == 1440 and report.blocks
    prom = start(run, tmp_path, pods, values, style, prometheus_release)
    started = time.time() - run["targets_up_s"]
    pod_l, _, _ = labels_for(style)
    idle = f'DCGM_FI_DEV_GPU_UTIL{{{pod_l}="idle-nb"}}'

    # The raw samples of the idle GPU: one series, backfilled part and live part, no gap.
    def has_live_samples() -> bool:
        res = prom.custom_query(f"timestamp({idle})")
        return bool(res) and float(res[0]["value"][1]) > started

    wait_until(has_live_samples, timeout=30, what="a live sample after the backfill", interval=0.5)
    raw = prom.custom_query(f"{idle}[2h]")
    assert len(raw) == 1, f"backfilled and live samples are separate series: {[r['metric'] for r in raw]}"
    stamps = [float(t) for t, _ in raw[0]["values"]]
    assert stamps[0] < started - 7000 and stamps[-1] > started
    assert max(b - a for a, b in zip(stamps, stamps[1:], strict=False)) < 20 + run["targets_up_s"]
    assert {v for _, v in raw[0]["values"]} == {"0"}

    assert one(prom, f"max_over_time({idle}[2h])") == 0
    count = one(prom, f"count_over_time({idle}[2h])")
    assert 0.98 * 7200 / INTERVAL <= count <= 7200 / INTERVAL + 1
    busy = f'DCGM_FI_DEV_GPU_UTIL{{{pod_l}="train-0",gpu="0"}}'
    assert one(prom, f"max_over_time({busy}[2h])") == 97
    assert one(prom, f"max_over_time({busy}[30m])") == 0

    series = prom.custom_query_range(
        f"max_over_time({idle}[1m])", start_time=_dt(started - 600), end_time=_dt(time.time()), step="15")
    assert len(series) == 1 and len(series[0]["values"]) >= 600 / 15

    cpu = 'container_cpu_usage_seconds_total{pod="train-0",container="trainer"}'
    assert one(prom, f"resets({cpu}[2h])") == 0
    cpu_raw = prom.custom_query(f"{cpu}[2h]")
    assert len(cpu_raw) == 1
    used = float(cpu_raw[0]["values"][-1][1]) - float(cpu_raw[0]["values"][0][1])
    assert used == pytest.approx(3600 * 4.0, rel=0.01)
    print(f"\nprometheus ready after {run['ready_s']:.2f}s, targets up after {run['targets_up_s']:.1f}s; "
          f"backfilled {report.samples} samples")


def _dt(t: float) -> datetime:
    return datetime.fromtimestamp(t, tz=timezone.utc)
