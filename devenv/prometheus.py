"""A real Prometheus for the sandbox: scrape configs, label semantics, backfill, process control.

The janitor must see the labels a production Prometheus stores, so the scrape jobs reproduce
the target labels of common deployments (reference §1.2, §2.1, §2.2, §3): dcgm-exporter either
scraped "direct" (`honor_labels: true`, workload labels stay `pod`/`namespace`/`container`) or
behind the chart's ServiceMonitor (`honor_labels: false`, so Prometheus renames them to
`exported_*` and adds the exporter pod's own), the kubelet like kube-prometheus (`job="kubelet"`,
`metrics_path`, `honor_labels: true`, `honor_timestamps: false`), kube-state-metrics with
`honor_labels: true`, node-exporter with `instance=<node name>`.

History: `backfill` renders the same exporters at past timestamps, applies `stored_labels` (the
same honor_labels/target-label rules Prometheus applies at scrape time) and runs
`promtool tsdb create-blocks-from openmetrics` into the data directory *before* Prometheus
starts. Backfilled and live samples then form one series. Facts checked on 2.42:
- no flag is needed: overlapping blocks are always allowed since 2.39 (the docs require
  `--storage.tsdb.allow-overlapping-blocks` only for <= 2.38; 2.42 still accepts it, hidden);
- the backfill must end before Prometheus' first scrape: on open the head only accepts samples
  newer than the newest block's max time; earlier scrapes are dropped ("out of bounds", logged
  as "Error on ingesting samples that are too old or are too far into the future");
- blocks written into a *running* server's data dir (even overlapping the head's range) are
  loaded by its periodic reload, about a minute later, and merge with the head samples at query
  time (`PrometheusServer.wait_blocks_loaded`). The docs call backfilling the head's last 3 hours
  unsafe, so prefer backfilling before start.

Prometheus 3 (`release="prom3"`, 3.16 built by `prometheus3/ensure.sh`; `devenv.prometheus_release`)
runs the same scrape config, flags and promtool backfill, checked by tests/unit/test_prometheus_sandbox.py,
with one difference: the retention goes into the config file (`storage.tsdb.retention.time`), as
3.x deprecates the flag and 2.x rejects that section. 3.x's strict scrape Content-Type accepts the
exporters' `text/plain; version=0.0.4`, and every metric and label name here is a legacy one, so
3.x's UTF-8 names change nothing.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from devenv.exporters.exposition import Sample, openmetrics_lines
from devenv.exporters.model import NodeView, PodView
from devenv.exporters.render import EXPORTERS, render_exporter
from devenv.exporters.targets import (
    AGGREGATE_JOBS,
    AGGREGATE_PATHS,
    DcgmStyle,
    ScrapeTarget,
    scrape_targets,
    stored_labels,
)
from devenv.exporters.values import Values
from devenv.procs import Component, StartError, free_port, wait_until
from devenv.prometheus_release import DEBIAN, Release
from devenv.prometheus_release import release as choose_release

PROMETHEUS = DEBIAN.prometheus
PROMTOOL = DEBIAN.promtool
# Target labels moved to devenv.exporters.targets (the aggregate exporters need them); still importable here.
__all__ = ["PROMETHEUS", "PROMTOOL", "BackfillReport", "DcgmStyle", "PrometheusServer", "Release", "ScrapeTarget",
           "backfill", "scrape_config", "scrape_targets", "stored_labels"]


def scrape_config(
    exporter_url: str, nodes: Iterable[NodeView], *, dcgm_style: DcgmStyle = "direct", interval: str = "5s",
    aggregate: bool = False,
) -> dict[str, Any]:
    """A prometheus.yml (as a dict) scraping an `ExporterServer` at `exporter_url`.

    All targets share one address, so each carries its own `instance` and `__metrics_path__`
    (static labels win over the job defaults), which keeps `up` and every series distinct.

    `aggregate`: one target per per-node exporter instead of one per node and exporter (a big
    sandbox: 2,000 nodes would be 6,000 targets). The exporter then writes each node target's
    stored labels into the series itself (`ExporterServer(aggregate=...)`), so the job honours
    scraped labels; `nodes` is not needed, as the aggregate covers whatever nodes exist.
    """
    address = exporter_url.split("://", 1)[-1].rstrip("/")
    jobs: dict[str, dict[str, Any]] = {}

    def job(name: str, honor_labels: bool, honor_timestamps: bool) -> dict[str, Any]:
        return jobs.setdefault(name, {
            "job_name": name,
            "honor_labels": honor_labels,
            "honor_timestamps": honor_timestamps,
            "scrape_interval": interval,
            "scrape_timeout": interval,
            "static_configs": [],
        })

    for t in scrape_targets([] if aggregate else nodes, dcgm_style=dcgm_style):
        labels = {k: v for k, v in t.labels if k != "job"}
        job(t.job, t.honor_labels, t.honor_timestamps)["static_configs"].append(
            {"targets": [address], "labels": {"__metrics_path__": t.path, **labels}})
    if aggregate:
        for exporter, path in AGGREGATE_PATHS.items():
            job(AGGREGATE_JOBS[exporter], True, exporter != "cadvisor")["static_configs"].append(
                {"targets": [address], "labels": {"__metrics_path__": path, "instance": f"{address}{path}"}})
    return {
        "global": {"scrape_interval": interval, "scrape_timeout": interval, "evaluation_interval": interval},
        "scrape_configs": list(jobs.values()),
    }


@dataclass
class BackfillReport:
    """What `backfill` wrote: the OpenMetrics file, sample count and promtool's block listing."""

    openmetrics: Path | None  # kept only with keep_openmetrics=True (or when promtool failed)
    samples: int
    timestamps: int
    blocks: tuple[str, ...]  # ULIDs of the blocks this run added to data_dir
    promtool_output: str = field(repr=False)


def backfill(
    history: Values,
    pods: Sequence[PodView],
    nodes: Sequence[NodeView],
    start: float,
    end: float,
    step: float,
    data_dir: Path,
    *,
    dcgm_style: DcgmStyle = "direct",
    hostname_label: str | None = "Hostname",
    exporters: Iterable[str] = EXPORTERS,
    promtool: str | None = None,
    keep_openmetrics: bool = False,
    release: Release | str | None = None,
) -> BackfillReport:
    """Write what the exporters would have been scraped as at `start, start+step, ... < end`.

    Pods appear from their creation time on (with their current state). Labels are the stored
    ones for the same targets `scrape_config` creates, so the live scrapes continue these series.
    Run this before `PrometheusServer.start()` and keep `end` before its first scrape. Into a
    running server it works too, but only after `wait_blocks_loaded(n + len(report.blocks))`.
    `release` picks the promtool (`devenv.prometheus_release`; `promtool` overrides it): blocks
    are read by the same major version that wrote them.
    """
    if step <= 0 or end <= start:
        raise ValueError("backfill needs step > 0 and end > start")
    promtool = promtool or choose_release(release).promtool
    wanted = set(exporters)
    targets = [t for t in scrape_targets(nodes, dcgm_style=dcgm_style) if t.exporter in wanted]
    data_dir = Path(data_dir)
    data_dir.mkdir(parents=True, exist_ok=True)
    before = _block_dirs(data_dir)
    fd, name = tempfile.mkstemp(prefix="backfill-", suffix=".om", dir=data_dir.parent)
    om_path = Path(name)
    count = steps = 0
    with os.fdopen(fd, "w") as out:
        t = start
        while t < end:
            ts = int(round(t * 1000))
            alive = [p for p in pods if p.created <= t]
            for target in targets:
                if history.target_down(target.exporter, target.node, t):
                    continue  # a failed scrape stores no samples
                for fam in render_exporter(target.exporter, target.node, alive, nodes, history, t,
                                           hostname_label=hostname_label):
                    stored = [
                        Sample(s.name, tuple(sorted(stored_labels(s.labels, target).items())), s.value, ts)
                        for s in fam.samples
                    ]
                    for line in openmetrics_lines(stored):
                        out.write(line + "\n")
                    count += len(stored)
            steps += 1
            t = start + steps * step
        out.write("# EOF\n")
    proc = subprocess.run([promtool, "tsdb", "create-blocks-from", "openmetrics", str(om_path), str(data_dir)],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"promtool failed ({proc.returncode}) on {om_path}: "
                           f"{proc.stderr.strip() or proc.stdout.strip()}")
    added = tuple(sorted(_block_dirs(data_dir) - before))
    if not keep_openmetrics:
        om_path.unlink()  # tens of MB for a few nodes over 2 h; the blocks hold the data
    return BackfillReport(om_path if keep_openmetrics else None, count, steps, added, proc.stdout)


def _block_dirs(data_dir: Path) -> set[str]:
    return {p.parent.name for p in data_dir.glob("*/meta.json")}


class PrometheusServer:
    """Prometheus as a child process on 127.0.0.1, with readiness and target polling.

    `release` is Debian's 2.x unless told (`devenv.prometheus_release`: a `Release`, "prom3", or
    $JANITOR_PROMETHEUS); `binary` overrides its `prometheus`. Files live next to `data_dir`:
    `<data_dir>.yml` (config) and `<data_dir>.log`.
    """

    def __init__(
        self,
        data_dir: Path,
        config: Mapping[str, Any],
        port: int = 0,
        extra_flags: Sequence[str] = (),
        *,
        binary: str | None = None,
        retention: str = "3650d",
        throwaway: bool = False,
        release: Release | str | None = None,
    ) -> None:
        self.data_dir = Path(data_dir)
        self.throwaway = throwaway  # stop() removes the data (the log and config stay, to read)
        self.config = dict(config)
        self.port = port or free_port()
        self.extra_flags = list(extra_flags)
        self.release = choose_release(release)
        self.binary = binary or self.release.prometheus
        self.retention = retention
        self.config_path = self.data_dir.with_name(self.data_dir.name + ".yml")
        self.log_path = self.data_dir.with_name(self.data_dir.name + ".log")
        self._component: Component | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        return self._component.pid if self._component else None

    def write_config(self) -> None:
        self.config_path.write_text(yaml.safe_dump(self._served_config(), sort_keys=False))

    def _served_config(self) -> dict[str, Any]:
        """The config as written: 3.x takes the retention from the file (its flag is deprecated
        there), while 2.x rejects that section, so it keeps the flag (`_retention_flags`)."""
        if self.release.major < 3:
            return self.config
        storage = dict(self.config.get("storage") or {})
        tsdb = dict(storage.get("tsdb") or {})
        tsdb["retention"] = {"time": self.retention, **(tsdb.get("retention") or {})}
        return {**self.config, "storage": {**storage, "tsdb": tsdb}}

    def _retention_flags(self) -> list[str]:
        return [f"--storage.tsdb.retention.time={self.retention}"] if self.release.major < 3 else []

    @staticmethod
    def read_config(path: Path) -> dict[str, Any]:
        """The config a server wrote to `path`, as given to it: fit to start a server of either
        major with (not the API's dump, where 3.x spells out defaults 2.x rejects)."""
        config = dict(yaml.safe_load(Path(path).read_text()))
        tsdb = (config.get("storage") or {}).get("tsdb") or {}
        if set(tsdb) == {"retention"} and set(config["storage"]) == {"tsdb"}:
            config.pop("storage")  # only what `_served_config` added
        return config

    def start(self) -> PrometheusServer:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.write_config()
        argv = [
            self.binary,
            f"--config.file={self.config_path}",
            f"--storage.tsdb.path={self.data_dir}",
            *self._retention_flags(),
            f"--web.listen-address=127.0.0.1:{self.port}",
            "--web.enable-lifecycle",
            *self.extra_flags,
        ]
        self._component = Component("prometheus", argv, self.log_path)
        self._component.start()
        return self

    def _get(self, path: str, timeout: float = 5.0) -> tuple[int, bytes]:
        try:
            with urllib.request.urlopen(self.url + path, timeout=timeout) as resp:
                return resp.status, resp.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()

    def wait_ready(self, timeout: float = 60.0) -> float:
        """Poll `/-/ready` until 200 (fails fast with the log tail if the process exits); returns seconds waited."""
        if self._component is None:
            raise RuntimeError("PrometheusServer.start() was not called")
        began = time.monotonic()
        self._component.wait_ready(lambda: self._get("/-/ready", timeout=2.0)[0] == 200, timeout=timeout)
        return time.monotonic() - began

    def targets(self) -> list[dict[str, Any]]:
        status, body = self._get("/api/v1/targets?state=active")
        if status != 200:
            raise RuntimeError(f"/api/v1/targets answered HTTP {status}")
        return list(json.loads(body)["data"]["activeTargets"])

    def wait_for_targets_up(self, timeout: float = 60.0, expected: int | None = None,
                            down: int = 0) -> list[dict[str, Any]]:
        """Poll until every active target (at least `expected` of them) has health "up".

        `down` targets are meant to fail (an exporter a test switched off): then all but that many
        must be up and exactly that many down.
        """
        found: list[dict[str, Any]] = []

        def all_up() -> bool:
            nonlocal found
            found = self.targets()
            enough = len(found) >= (expected if expected is not None else 1)
            health = [t["health"] for t in found]
            return enough and health.count("down") == down and health.count("up") == len(found) - down

        try:
            wait_until(all_up, timeout=timeout, what="prometheus targets up")
        except TimeoutError as e:
            summary = [(t["labels"].get("job"), t["labels"].get("instance"), t["health"], t.get("lastError"))
                       for t in found]
            raise TimeoutError(f"{e}; targets: {summary}") from e
        return found

    def blocks_loaded(self) -> int:
        """`prometheus_tsdb_blocks_loaded` from the server's own /metrics (it need not scrape itself)."""
        status, body = self._get("/metrics")
        if status != 200:
            raise RuntimeError(f"/metrics answered HTTP {status}")
        for line in body.decode().splitlines():
            if line.startswith("prometheus_tsdb_blocks_loaded "):
                return int(float(line.split()[1]))
        raise RuntimeError("prometheus_tsdb_blocks_loaded not found in /metrics")

    def wait_blocks_loaded(self, count: int, timeout: float = 120.0) -> None:
        """Wait until at least `count` blocks are loaded: blocks backfilled into a *running*
        server are only picked up by its periodic reload (once a minute in 2.42)."""
        wait_until(lambda: self.blocks_loaded() >= count, timeout=timeout, what=f"{count} TSDB blocks loaded",
                   interval=1.0)

    def reload(self, config: Mapping[str, Any] | None = None) -> None:
        """Rewrite the config (optionally a new one) and POST `/-/reload`."""
        if config is not None:
            self.config = dict(config)
        self.write_config()
        req = urllib.request.Request(self.url + "/-/reload", data=b"", method="POST")
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                resp.read()
        except urllib.error.HTTPError as e:
            raise StartError(f"reload failed: HTTP {e.code}: {e.read().decode(errors='replace')}") from e

    def stop(self, timeout: float = 15.0) -> None:
        """SIGTERM, wait up to `timeout`, then SIGKILL (see `devenv.procs.Component.stop`)."""
        if self._component is not None:
            self._component.stop(timeout=timeout)
        if self.throwaway:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def __enter__(self) -> PrometheusServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
