"""The exporter HTTP server and its control client, in-process on 127.0.0.1.

Aspects covered:
- every exporter path serves the text format (parsable) and reflects the providers' pods;
- unknown nodes and paths are 404, a failing provider is a 500 (a failed scrape, not empty data);
- a target set down answers 503 while its neighbours still serve, and recovers; a backfill
  leaves its down stretch empty;
- `ValuesControl` setters change what is served (same calls as on `Values`), `reset()` works;
- `GET /_values` round-trips through `Values.from_json`; invalid updates are 400 with the reason;
- `stored_labels` and `scrape_config` give the label sets Prometheus stores for each job style;
- `backfill` writes OpenMetrics with second timestamps and stored labels, and promtool turns it
  into blocks (no Prometheus needed).
"""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest
from prometheus_client.parser import text_string_to_metric_families

from devenv.exporters.model import ContainerView, NodeView, PodView
from devenv.exporters.server import ControlError, ExporterServer, ValuesControl
from devenv.exporters.values import Kind, Values
from devenv.prometheus import backfill, scrape_config, scrape_targets, stored_labels

NOW = time.time()
PODS = [
    PodView("ml", "train-0", "0b6c1f2e-3a4b-4c5d-8e9f-0a1b2c3d4e5f", "gpu-node-1", "Running", NOW - 7200,
            "Job", "train", (ContainerView("trainer", 8, 2),), None, False),
]
NODES = [NodeView("gpu-node-1", 4), NodeView("cpu-node-1", 0)]


@pytest.fixture
def server() -> Iterator[ExporterServer]:
    with ExporterServer(lambda: PODS, lambda: NODES, Values()) as srv:
        yield srv


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def series(text: str, name: str) -> list:
    return [s for fam in text_string_to_metric_families(text) for s in fam.samples if s.name == name]


@pytest.mark.parametrize(("path", "metric"), [
    ("/dcgm/gpu-node-1/metrics", "DCGM_FI_DEV_GPU_UTIL"),
    ("/cadvisor/gpu-node-1/metrics", "container_cpu_usage_seconds_total"),
    ("/node-exporter/cpu-node-1/metrics", "node_cpu_seconds_total"),
    ("/kube-state-metrics/metrics", "kube_pod_info"),
])
def test_paths_serve_parsable_text(server: ExporterServer, path: str, metric: str) -> None:
    status, text = get(server.url + path)
    assert status == 200
    assert series(text, metric)


@pytest.mark.parametrize("path", ["/dcgm/no-such-node/metrics", "/metrics", "/dcgm/gpu-node-1", "/nope/x/metrics"])
def test_unknown_paths_are_404(server: ExporterServer, path: str) -> None:
    assert get(server.url + path)[0] == 404


def test_failing_provider_is_a_failed_scrape() -> None:
    def broken() -> list[PodView]:
        raise RuntimeError("apiserver down")

    with ExporterServer(broken, lambda: NODES, Values()) as srv:
        status, body = get(srv.url + "/kube-state-metrics/metrics")
    assert status == 500 and "apiserver down" in body


def test_control_client_changes_what_is_served(server: ExporterServer) -> None:
    control = ValuesControl(server.url)
    control.set_gpu_util("ml", "train-0", 97, gpu=1)
    control.set_cpu("ml", "train-0", "trainer", 3.5)
    control.set_node_dstate("gpu-node-1", 2)
    util = {s.labels["gpu"]: s.value for s in series(get(server.url + "/dcgm/gpu-node-1/metrics")[1],
                                                     "DCGM_FI_DEV_GPU_UTIL") if s.labels.get("pod") == "train-0"}
    assert util == {"0": 0.0, "1": 97.0}
    states = {s.labels["state"]: s.value for s in series(get(server.url + "/node-exporter/gpu-node-1/metrics")[1],
                                                         "node_processes_state")}
    assert states["D"] == 2.0
    copy = Values.from_json(control.get())
    assert copy.level(Kind.CPU, ("ml", "train-0", "trainer"), time.time()) == 3.5
    control.reset()
    util = [s.value for s in series(get(server.url + "/dcgm/gpu-node-1/metrics")[1], "DCGM_FI_DEV_GPU_UTIL")]
    assert util == [0.0, 0.0, 0.0, 0.0]


def test_target_down_fails_only_that_target_and_recovers(server: ExporterServer) -> None:
    control = ValuesControl(server.url)
    control.set_target_down("dcgm", "gpu-node-1")
    assert get(server.url + "/dcgm/gpu-node-1/metrics")[0] == 503
    assert get(server.url + "/cadvisor/gpu-node-1/metrics")[0] == 200
    control.set_target_down("dcgm", "gpu-node-1", down=False)
    assert get(server.url + "/dcgm/gpu-node-1/metrics")[0] == 200


def test_backfill_skips_a_target_while_it_is_down(tmp_path) -> None:
    start = float(int(NOW) - 60)
    values = Values()
    values.add_history(Kind.TARGET_DOWN, ("dcgm/gpu-node-1",), [(start + 10, start + 20, 1)])
    report = backfill(values, PODS, NODES, start, start + 30, 10, tmp_path / "data", exporters=["dcgm"],
                      keep_openmetrics=True)
    assert report.openmetrics is not None
    stamps = {line.rsplit(" ", 1)[1] for line in report.openmetrics.read_text().splitlines()[:-1]}
    assert stamps == {f"{start:.3f}", f"{start + 20:.3f}"}


def test_invalid_update_is_refused_with_reason(server: ExporterServer) -> None:
    control = ValuesControl(server.url)
    with pytest.raises(ControlError, match="400.*needs a key"):
        control._send({"set": [{"kind": "gpu_util", "key": ["ml"], "value": 1}]})
    req = urllib.request.Request(server.url + "/_values", data=b"[1]", method="POST")
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(req, timeout=10)
    assert err.value.code == 400


def _target(exporter: str, style: str = "direct"):
    return next(t for t in scrape_targets(NODES, dcgm_style=style)  # type: ignore[arg-type]
                if t.exporter == exporter and t.node in ("gpu-node-1", None))


def test_stored_labels_servicemonitor_renames_workload_labels() -> None:
    target = _target("dcgm", "servicemonitor")
    mapped = stored_labels({"gpu": "0", "container": "trainer", "namespace": "ml", "pod": "train-0"}, target)
    assert (mapped["exported_pod"], mapped["exported_namespace"], mapped["exported_container"]) == (
        "train-0", "ml", "trainer")
    assert (mapped["pod"], mapped["namespace"], mapped["container"]) == (
        "dcgm-exporter-gpu-node-1", "gpu-operator", "exporter")
    assert mapped["job"] == "dcgm-exporter" and mapped["service"] == "dcgm-exporter"
    free_gpu = stored_labels({"gpu": "2"}, target)  # reference §4.2 q5: inherits the exporter's pod
    assert free_gpu["pod"] == "dcgm-exporter-gpu-node-1" and "exported_pod" not in free_gpu


def test_stored_labels_honor_labels_keeps_scraped_and_drops_empty() -> None:
    direct = stored_labels({"gpu": "0", "pod": "train-0", "namespace": "ml"}, _target("dcgm"))
    assert direct["pod"] == "train-0" and not any(k.startswith("exported_") for k in direct)
    kubelet = stored_labels({"container": "", "image": "", "namespace": "ml", "pod": "p"}, _target("cadvisor"))
    assert "container" not in kubelet and "image" not in kubelet
    assert kubelet["namespace"] == "ml" and kubelet["job"] == "kubelet"
    assert kubelet["metrics_path"] == "/metrics/cadvisor" and kubelet["node"] == "gpu-node-1"
    ksm = stored_labels({"namespace": "ml", "pod": "p"}, _target("kube-state-metrics"))
    assert ksm["job"] == "kube-state-metrics" and ksm["namespace"] == "ml"


def test_stored_labels_prefix_repeats_until_free() -> None:
    target = _target("dcgm", "servicemonitor")
    mapped = stored_labels({"pod": "a", "exported_pod": "b"}, target)
    assert (mapped["pod"], mapped["exported_pod"], mapped["exported_exported_pod"]) == (
        "dcgm-exporter-gpu-node-1", "b", "a")


def test_scrape_config_jobs() -> None:
    cfg = scrape_config("http://127.0.0.1:1234", NODES, dcgm_style="servicemonitor", interval="5s")
    jobs = {j["job_name"]: j for j in cfg["scrape_configs"]}
    assert set(jobs) == {"dcgm-exporter", "kubelet", "node-exporter", "kube-state-metrics"}
    assert jobs["dcgm-exporter"]["honor_labels"] is False
    assert len(jobs["dcgm-exporter"]["static_configs"]) == 1  # GPU nodes only
    assert jobs["kubelet"]["honor_labels"] is True and jobs["kubelet"]["honor_timestamps"] is False
    assert jobs["kube-state-metrics"]["honor_labels"] is True
    node_instances = {sc["labels"]["instance"] for sc in jobs["node-exporter"]["static_configs"]}
    assert node_instances == {"gpu-node-1", "cpu-node-1"}
    for job in jobs.values():
        for sc in job["static_configs"]:
            assert sc["targets"] == ["127.0.0.1:1234"] and sc["labels"]["__metrics_path__"].endswith("/metrics")
    direct = scrape_config("http://127.0.0.1:1234", NODES, dcgm_style="direct")
    assert next(j for j in direct["scrape_configs"] if j["job_name"] == "dcgm-exporter")["honor_labels"] is True
    with pytest.raises(ValueError, match="dcgm_style"):
        scrape_config("http://127.0.0.1:1", NODES, dcgm_style="podmonitor")  # type: ignore[arg-type]


def test_backfill_writes_stored_series_and_blocks(tmp_path) -> None:
    start = float(int(NOW) - 60)
    report = backfill(Values(), PODS, NODES, start, start + 30, 10, tmp_path / "data",
                      dcgm_style="servicemonitor", exporters=["dcgm"], keep_openmetrics=True)
    assert report.timestamps == 3 and len(report.blocks) == 1
    assert (tmp_path / "data" / report.blocks[0] / "meta.json").exists()
    assert report.openmetrics is not None
    lines = report.openmetrics.read_text().splitlines()
    assert lines[-1] == "# EOF" and report.samples == len(lines) - 1 == 3 * 4 * 6  # 3 steps, 4 GPUs, 6 metrics
    first = lines[0]
    assert first.endswith(f" {start:.3f}")
    assert 'exported_pod="train-0"' in first and 'pod="dcgm-exporter-gpu-node-1"' in first
    assert 'job="dcgm-exporter"' in first and 'instance="' in first
    with pytest.raises(ValueError, match="end > start"):
        backfill(Values(), PODS, NODES, start, start, 10, tmp_path / "data")
