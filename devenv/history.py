"""A Prometheus that already holds hours of history, for tests of "idle for the last 2 hours".

Prometheus accepts backfilled blocks only for times before its first scrape, so history cannot
be added to the sandbox's running Prometheus without waiting for its next block reload. Instead
a test describes the past on the sandbox's exporters (`ValuesControl.add_history`), and gets a
second Prometheus, backfilled from those same values and then started, scraping the same
exporters: backfilled and live samples form one series (counters included), as if the workload
had been running, and measured, for hours.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from kubernetes import client

from devenv.exporters.server import ValuesControl
from devenv.exporters.values import Values
from devenv.podviews import node_view, pod_view
from devenv.prometheus import BackfillReport, DcgmStyle, PrometheusServer, backfill, scrape_config


def prometheus_with_history(
    api: client.ApiClient,
    exporters_url: str,
    *,
    hours: float = 2.0,
    step: float = 15.0,
    dcgm_style: DcgmStyle = "servicemonitor",
    scrape_interval: str = "2s",
    work_dir: Path | None = None,
) -> tuple[PrometheusServer, BackfillReport]:
    """Backfill the last `hours` for the pods that exist now, then start Prometheus.

    The caller stops the returned server. Pods and nodes are read from the apiserver, so the
    series carry the same names, UIDs and GPU slots the live exporters serve.
    """
    history = Values.from_json(ValuesControl(exporters_url).get())
    core = client.CoreV1Api(api)
    pods = [pod_view(p) for p in core.list_pod_for_all_namespaces().items]
    nodes = [node_view(n) for n in core.list_node().items]
    data_dir = Path(tempfile.mkdtemp(prefix="prometheus-history-", dir=work_dir))
    end = time.time()
    report = backfill(history, pods, nodes, end - hours * 3600, end, step, data_dir, dcgm_style=dcgm_style)
    server = PrometheusServer(
        data_dir, scrape_config(exporters_url, nodes, dcgm_style=dcgm_style, interval=scrape_interval)
    )
    server.start()
    try:
        server.wait_ready(timeout=60)
        server.wait_for_targets_up(timeout=60)
    except BaseException:
        server.stop()
        raise
    return server, report
