"""Fixtures shared by all tests: one sandbox per test run, a fresh namespace per test.

The sandbox fixture is the same `devenv.Sandbox` that `python -m devenv up` runs. To iterate
quickly against an already running sandbox, start one with `python -m devenv up --detach` and
set JANITOR_SANDBOX_ENV=.devenv/sandbox.env; the tests then attach to it instead of starting one.
"""

from __future__ import annotations

import json
import os
import re
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from kubernetes import client

from devenv import access
from devenv.exporters.server import ValuesControl
from devenv.procs import wait_until
from devenv.prometheus import PrometheusServer
from devenv.prometheus_release import NAMES, Release, release
from devenv.sandbox import Sandbox, read_env_file
from devenv.slack_standin import SlackStandInControl

INTEGRATION_DIR = Path(__file__).parent / "integration"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests under tests/integration need the sandbox; mark them and run them after the unit tier."""
    for item in items:
        if INTEGRATION_DIR in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.sandbox)
    items.sort(key=lambda item: item.get_closest_marker("sandbox") is not None)


@dataclass(frozen=True)
class SandboxHandle:
    """What a test needs from a running sandbox, whether this run started it or not."""

    env: dict[str, str]

    @property
    def kubeconfig(self) -> Path:
        return Path(self.env["KUBECONFIG"])

    @property
    def prometheus_url(self) -> str:
        return self.env["PROMETHEUS_URL"]

    @property
    def prometheus_config(self) -> Path:
        return Path(self.env["PROMETHEUS_CONFIG"])

    @property
    def slack_api_url(self) -> str:
        return self.env["SLACK_API_URL"]

    @property
    def slack_token(self) -> str:
        return self.env["SLACK_BOT_TOKEN"]

    @property
    def exporters_url(self) -> str:
        return self.env["SANDBOX_EXPORTERS_URL"]

    @property
    def run_dir(self) -> Path:
        return Path(self.env["SANDBOX_RUN_DIR"])


@pytest.fixture(scope="session")
def sandbox(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SandboxHandle]:
    attach = os.environ.get("JANITOR_SANDBOX_ENV")
    if attach:
        yield SandboxHandle(read_env_file(Path(attach)))
        return
    box = Sandbox(tmp_path_factory.mktemp("sandbox"))
    box.start()
    try:
        yield SandboxHandle(box.environment())
    finally:
        box.stop()


@pytest.fixture(scope="session")
def kube(sandbox: SandboxHandle) -> Iterator[client.ApiClient]:
    api = access.api_client(sandbox.kubeconfig)
    yield api
    api.close()


@pytest.fixture(scope="session")
def core(kube: client.ApiClient) -> client.CoreV1Api:
    return client.CoreV1Api(kube)


@pytest.fixture
def namespace(request: pytest.FixtureRequest, core: client.CoreV1Api) -> Iterator[str]:
    """A fresh namespace, ready for pods (its default ServiceAccount exists), deleted afterwards."""
    base = re.sub(r"[^a-z0-9-]+", "-", request.node.name.lower()).strip("-")[:40].strip("-")
    name = f"{base}-{uuid.uuid4().hex[:6]}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))

    def has_default_sa() -> bool:
        return any(sa.metadata.name == "default" for sa in core.list_namespaced_service_account(name).items)

    # The ServiceAccount admission plugin rejects pods until the controller made `default`.
    wait_until(has_default_sa, timeout=30, what=f"default ServiceAccount in {name}")
    yield name
    core.delete_namespace(name)


@pytest.fixture
def exporter_values(sandbox: SandboxHandle) -> Iterator[ValuesControl]:
    control = ValuesControl(sandbox.exporters_url)
    yield control
    control.reset()


@pytest.fixture
def slack(sandbox: SandboxHandle) -> Iterator[SlackStandInControl]:
    control = SlackStandInControl(sandbox.slack_api_url)
    control.reset()
    yield control
    control.reset()


@pytest.fixture(scope="module", params=NAMES)
def prometheus_release(request: pytest.FixtureRequest) -> Release:
    """Each Prometheus major in turn (test ids `prom2`, `prom3`), for the tests of the janitor's
    evidence queries: 3.x's left-open ranges change how many samples a window holds. 3.x is
    built on first use if `devenv/install.sh` has not built it yet."""
    return release(request.param)


def _prometheus_api(url: str, path: str) -> dict:
    with urllib.request.urlopen(f"{url}/api/v1/{path}", timeout=10) as resp:
        return dict(json.load(resp)["data"])


@pytest.fixture(scope="module")
def sandbox_prometheus(sandbox: SandboxHandle, prometheus_release: Release,
                       tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The URL of a Prometheus of `prometheus_release` scraping the sandbox's exporters: the
    sandbox's own where it runs that major, else a twin started with its very configuration
    (same jobs, target labels and interval), stopped after the module."""
    own = _prometheus_api(sandbox.prometheus_url, "status/buildinfo")["version"]
    if own.split(".")[0] == str(prometheus_release.major):
        yield sandbox.prometheus_url
        return
    config = PrometheusServer.read_config(sandbox.prometheus_config)
    twin = PrometheusServer(tmp_path_factory.mktemp(prometheus_release.name) / "data", config,
                            release=prometheus_release, throwaway=True)
    twin.start()
    try:
        twin.wait_ready(timeout=60)
        twin.wait_for_targets_up(timeout=60)
        yield twin.url
    finally:
        twin.stop()
