"""`janitor run` with the fault proxy in front of the sandbox's apiserver.

Aspects covered:
- a request the apiserver never answers (black-holed by the proxy) does not hold the daemon: the
  cycle is abandoned within its budget, counted, and /healthz reports it; nothing is deleted
  while the janitor cannot see;
- once the fault heals, the next cycle acts normally (the expired object is deleted) and
  /healthz is 200 again; SIGTERM then stops it cleanly.
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import yaml
from kubernetes import client
from test_daemon import get

from devenv.faults import FaultProxy, ProxyTls, repoint_kubeconfig
from devenv.pki import Pki
from devenv.procs import free_port, wait_until
from janitor import annotations as a


def proxied(sandbox, tmp_path: Path) -> tuple[FaultProxy, Path]:  # noqa: ANN001
    config = yaml.safe_load(sandbox.kubeconfig.read_text())
    server = config["clusters"][0]["cluster"]["server"]
    keys = sandbox.kubeconfig.parent / "pki"
    pki = Pki(keys / "ca.crt", keys / "ca.key", keys / "apiserver.crt", keys / "apiserver.key",
              keys / "sa.pub", keys / "sa.key")
    proxy = FaultProxy(server, tls=ProxyTls.from_pki(pki))
    proxy.start()
    return proxy, repoint_kubeconfig(sandbox.kubeconfig, tmp_path / "proxied.kubeconfig", proxy.url)


@contextlib.contextmanager
def daemon(kubeconfig: Path, port: int, namespace: str, log: Path, *flags: str) -> Iterator[subprocess.Popen[bytes]]:
    """`janitor run` on ConfigMaps of `namespace` every second, stopped by SIGTERM at the end,
    which it must survive with exit code 0 (the log's tail says why not)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "janitor.cli", "run", "--kubeconfig", str(kubeconfig), "--interval", "1",
         "--metrics-port", str(port), "--namespaces", namespace, "--state-namespace", namespace,
         "--kinds", "ConfigMap", *flags], stdout=log.open("w"), stderr=subprocess.STDOUT)
    try:
        yield proc
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=40)
    assert code == 0, log.read_text()[-3000:]


def metric(port: int, name: str) -> float:
    text = get(f"http://127.0.0.1:{port}/metrics")[1]
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name))


def test_a_black_holed_request_is_abandoned_and_the_next_cycle_after_healing_acts(
        sandbox, core: client.CoreV1Api, namespace: str, tmp_path: Path) -> None:
    proxy, kubeconfig = proxied(sandbox, tmp_path)
    port = free_port()
    log = tmp_path / "janitor.log"
    try:
        hole = proxy.blackhole(method="GET", path=f"/api/v1/namespaces/{namespace}/configmaps")
        core.create_namespaced_config_map(namespace, client.V1ConfigMap(
            metadata=client.V1ObjectMeta(name="later", annotations={a.EXPIRES: "2020-01-01"})))
        with daemon(kubeconfig, port, namespace, log, "--cycle-budget", "4", "--kube-timeout", "600"):
            wait_until(lambda: get(f"http://127.0.0.1:{port}/healthz")[0] == 503, timeout=60,
                       what="/healthz to report the abandoned cycle")
            assert "abandoned" in get(f"http://127.0.0.1:{port}/healthz")[1]
            assert metric(port, 'janitor_cycles_total{result="abandoned"}') >= 1
            assert "later" in {c.metadata.name for c in core.list_namespaced_config_map(namespace).items}
            assert proxy.requests(path=f"/api/v1/namespaces/{namespace}/configmaps")[0].fault == "blackhole"

            proxy.clear(hole)
            wait_until(lambda: "later" not in {c.metadata.name
                                               for c in core.list_namespaced_config_map(namespace).items},
                       timeout=60, what="the first cycle after the fault healed to delete the expired ConfigMap")
            wait_until(lambda: get(f"http://127.0.0.1:{port}/healthz")[0] == 200, timeout=30,
                       what="/healthz to be 200 again")
    finally:
        proxy.stop()
