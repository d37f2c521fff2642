"""The whole local sandbox: control plane, kwok nodes, exporters, Prometheus, Slack stand-in.

One `Sandbox` is what `python -m devenv up`, the demo and the pytest fixtures all start, so the
tests run against exactly what a developer looks at. Everything listens on 127.0.0.1 and lives
in one run directory; `env_file` carries KUBECONFIG, PROMETHEUS_URL and SLACK_API_URL for
anything that wants to talk to it (the janitor included).

`scale=True` (`python -m devenv up --scale`) is the same sandbox sized for thousands of nodes
(`python -m devenv populate` makes them): control-plane flags for that size, exporters that
follow pods and nodes with a watch and serve one aggregate target per exporter kind, and a 15 s
scrape interval. Nodes created later are covered without touching Prometheus' configuration.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubernetes import client

from devenv import access, crds, testbin
from devenv.controlplane import ControlPlane
from devenv.exporters.server import ExporterServer
from devenv.exporters.values import Values
from devenv.nodes import DEFAULT_NODES, NodeSpec, all_ready, create_nodes, kwok_component
from devenv.podviews import CachedPods, Watched, node_view, watched_nodes, watched_pods
from devenv.procs import Component
from devenv.prometheus import PrometheusServer, scrape_config
from devenv.slack_standin import SlackStandIn

SLACK_TOKEN = "xoxb-sandbox"
SLACK_ADMIN_CHANNEL = ("C0ADMINS", "gpu-admins")


@dataclass
class Sandbox:
    run_dir: Path
    nodes: tuple[NodeSpec, ...] = DEFAULT_NODES
    dcgm_style: str = "servicemonitor"
    scrape_interval: str = "2s"
    bin_dir: Path | None = None
    scale: bool = False
    prometheus_release: str | None = None  # "prom2"/"prom3"; None: $JANITOR_PROMETHEUS, else 2.x
    timings: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.run_dir = self.run_dir.resolve()
        self.control_plane: ControlPlane | None = None
        self.kwok: Component | None = None
        self.values = Values()
        self.exporters: ExporterServer | None = None
        self.prometheus: PrometheusServer | None = None
        self.slack: SlackStandIn | None = None
        self._admin: client.ApiClient | None = None
        self._watch_api: client.ApiClient | None = None
        self._watches: list[Watched[Any]] = []

    # ---- lifecycle -------------------------------------------------------------------------

    def start(self) -> None:
        """Start every component; on any failure stop what already runs, then re-raise."""
        self.run_dir.mkdir(parents=True, exist_ok=True)
        # Every start is a new cluster: etcd and Prometheus data of an earlier run would bring
        # back its nodes, pods and series.
        for stale in ("control-plane", "prometheus"):
            shutil.rmtree(self.run_dir / stale, ignore_errors=True)
        try:
            self._start()
        except BaseException:
            self.stop()
            raise

    def _timed(self, name: str, began: float) -> None:
        self.timings[name] = round(time.monotonic() - began, 1)

    def _start(self) -> None:
        t0 = time.monotonic()
        self.bin_dir = self.bin_dir or testbin.ensure_binaries()
        self._timed("binaries", t0)

        t = time.monotonic()
        self.control_plane = ControlPlane(self.bin_dir, self.run_dir / "control-plane", scale=self.scale)
        self.control_plane.start()
        self._timed("control_plane", t)
        self._admin = access.api_client(self.control_plane.admin_kubeconfig)
        core = client.CoreV1Api(self._admin)
        crds.install(self._admin)

        t = time.monotonic()
        create_nodes(core, self.nodes)
        self.kwok = kwok_component(
            self.bin_dir, self.control_plane.admin_kubeconfig, self.run_dir / "control-plane/logs/kwok.log",
            scale=self.scale,
        )
        self.kwok.start()
        names = [n.name for n in self.nodes]
        self.kwok.wait_ready(lambda: all_ready(core, names), timeout=90)
        self._timed("nodes", t)
        # The exporters see the nodes as the apiserver has them, as backfills (devenv.history) do.
        node_views = [node_view(n) for n in core.list_node().items]

        t = time.monotonic()
        self.slack = SlackStandIn(tokens=(SLACK_TOKEN,), channels=dict([SLACK_ADMIN_CHANNEL]))
        self.slack.start()
        if self.scale:
            # Its own client: two long watches must not wait for connections of the admin's pool.
            self._watch_api = access.api_client(self.control_plane.admin_kubeconfig)
            watch_core = client.CoreV1Api(self._watch_api)
            self._watches = [watched_pods(watch_core).start(), watched_nodes(watch_core).start()]
            self.exporters = ExporterServer(
                pods_provider=self._watches[0], nodes_provider=self._watches[1], values=self.values,
                aggregate=self.dcgm_style,  # type: ignore[arg-type]
            )
        else:
            self.exporters = ExporterServer(
                pods_provider=CachedPods(core),
                nodes_provider=lambda: node_views,
                values=self.values,
            )
        self.exporters.start()
        self.prometheus = PrometheusServer(
            data_dir=self.run_dir / "prometheus",
            config=scrape_config(
                self.exporters.url, node_views,
                dcgm_style=self.dcgm_style, interval=self.scrape_interval,  # type: ignore[arg-type]
                aggregate=self.scale,
            ),
            release=self.prometheus_release,
        )
        self.prometheus.start()
        self.prometheus.wait_ready(timeout=60)
        self.prometheus.wait_for_targets_up(timeout=60)
        self._timed("prometheus_exporters_slack", t)
        self._timed("total", t0)
        self.write_env_file()

    def stop(self) -> None:
        for part in (self.prometheus, self.exporters, *self._watches, self.slack, self.kwok):
            if part is not None:
                try:
                    part.stop()
                except Exception as e:  # keep stopping the rest; a leaked process is worse
                    print(f"sandbox: stopping {type(part).__name__} failed: {e}", file=sys.stderr)
        self._watches = []
        if self._watch_api is not None:
            self._watch_api.close()  # type: ignore[no-untyped-call]
            self._watch_api = None
        if self.control_plane is not None:
            self.control_plane.stop()
        if self._admin is not None:
            self._admin.close()  # type: ignore[no-untyped-call]
            self._admin = None

    def __enter__(self) -> Sandbox:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ---- what clients need -----------------------------------------------------------------

    @property
    def kubeconfig(self) -> Path:
        assert self.control_plane is not None
        return self.control_plane.admin_kubeconfig

    @property
    def admin(self) -> client.ApiClient:
        assert self._admin is not None, "sandbox not started"
        return self._admin

    @property
    def env_file(self) -> Path:
        return self.run_dir / "sandbox.env"

    def environment(self) -> dict[str, str]:
        assert self.control_plane and self.prometheus and self.slack and self.exporters
        return {
            "KUBECONFIG": str(self.kubeconfig),
            "PROMETHEUS_URL": self.prometheus.url,
            "PROMETHEUS_CONFIG": str(self.prometheus.config_path),
            "SLACK_API_URL": self.slack.base_url,
            "SLACK_BOT_TOKEN": SLACK_TOKEN,
            "SLACK_ADMIN_CHANNEL": SLACK_ADMIN_CHANNEL[0],
            "SANDBOX_EXPORTERS_URL": self.exporters.url,
            "SANDBOX_RUN_DIR": str(self.run_dir),
            "SANDBOX_PID": str(os.getpid()),
            **({"SANDBOX_SCALE": "1"} if self.scale else {}),
        }

    def write_env_file(self) -> None:
        env = self.environment()
        self.env_file.write_text("".join(f"{k}={v}\n" for k, v in env.items()))
        state = {
            **env,
            "components": {
                c.name: c.pid for c in [*(self.control_plane.components if self.control_plane else []), self.kwok] if c
            },
            "prometheus_pid": self.prometheus.pid if self.prometheus else None,
            "timings": self.timings,
        }
        (self.run_dir / "state.json").write_text(json.dumps(state, indent=2))


def read_env_file(path: Path) -> dict[str, str]:
    return dict(
        line.split("=", 1) for line in path.read_text().splitlines() if line and not line.startswith("#")
    )
