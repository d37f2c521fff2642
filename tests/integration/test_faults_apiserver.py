"""`janitor run` with the fault proxy in front of the sandbox's apiserver, its watch cache on (the default).

Aspects covered:
- a request the apiserver never answers (black-holed by the proxy) does not hold the daemon: the
  cycle is abandoned within its budget, counted, and /healthz reports it; nothing is deleted
  while the janitor cannot see;
- once the fault heals, the next cycle acts normally (the expired object is deleted) and
  /healthz is 200 again; SIGTERM then stops it cleanly;
- a watch the apiserver never answers (its head never comes), at start or once synced, is said
  within one --kube-timeout (plus a margin for a loaded machine) on /healthz and /readyz, with the
  kind and the reason, and in the metrics (not synced, a failure counted, cycles counted as doing
  nothing: none is held); nothing is deleted meanwhile; the log says it once, in the janitor's
  words, and no outage is declared while the apiserver answers everything else; once it answers,
  the next cycle acts.
"""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client
from test_daemon import get
from test_ttl_cleanup import configmap, exists

from devenv.faults import FaultProxy, ProxyTls, repoint_kubeconfig
from devenv.pki import Pki
from devenv.procs import free_port, wait_until
from janitor import annotations as a

KUBE_TIMEOUT = 5  # --kube-timeout of the daemons below, seconds
MARGIN = 15  # for the daemon's own start and a loaded two-core machine
EXPIRED = {a.EXPIRES: "2020-01-01T00:00:00Z"}
LIBRARY_WORDS = ("urllib3", "HTTPSConnectionPool", "Max retries", "Errno", "Traceback", "ReadTimeoutError")


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


def log_records(log: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in log.read_text().splitlines() if line.startswith("{")]


def says_unanswered(port: int, path: str, namespace: str) -> tuple[int, str]:
    code, text = get(f"http://127.0.0.1:{port}{path}")
    assert "watch cache not synced" in text and f"ConfigMap@{namespace}" in text, (path, code, text)
    assert f"the apiserver did not answer the watch within {KUBE_TIMEOUT}s" in text, (path, code, text)
    return code, text


def test_a_watch_that_never_answers_is_said_within_the_kube_timeout_and_cycles_do_nothing(
        sandbox, core: client.CoreV1Api, namespace: str, tmp_path: Path) -> None:
    proxy, kubeconfig = proxied(sandbox, tmp_path)
    port = free_port()
    log = tmp_path / "janitor.log"
    kind = f'kind="ConfigMap@{namespace}"'
    try:
        hole = proxy.blackhole(watch=True, resource="configmaps")
        configmap(core, namespace, "expired", EXPIRED)
        with daemon(kubeconfig, port, namespace, log, "--kube-timeout", str(KUBE_TIMEOUT)):
            wait_until(lambda: get(f"http://127.0.0.1:{port}/metrics")[0] == 200, timeout=30, what="/metrics")
            wait_until(lambda: "did not answer" in get(f"http://127.0.0.1:{port}/healthz")[1],
                       timeout=KUBE_TIMEOUT + MARGIN, what="/healthz to say the watch gets no answer")
            assert says_unanswered(port, "/healthz", namespace)[0] == 503  # never synced: not live either
            assert says_unanswered(port, "/readyz", namespace)[0] == 503
            assert metric(port, f"janitor_watch_cache_synced{{{kind}}}") == 0
            assert metric(port, f"janitor_watch_cache_failures_total{{{kind}}}") >= 1
            wait_until(lambda: metric(port, 'janitor_cycles_total{result="unsynced"}') >= 1, timeout=MARGIN,
                       what="a cycle that did nothing, counted: none waits for the watch")
            assert exists(core.read_namespaced_config_map, "expired", namespace)

            proxy.clear(hole)
            wait_until(lambda: not exists(core.read_namespaced_config_map, "expired", namespace), timeout=60,
                       what="the first cycle with the cache synced to delete the expired ConfigMap")
            wait_until(lambda: get(f"http://127.0.0.1:{port}/readyz")[0] == 200, timeout=30, what="/readyz 200")
            wait_until(lambda: get(f"http://127.0.0.1:{port}/healthz")[0] == 200, timeout=30, what="/healthz 200")
    finally:
        proxy.stop()
    records = log_records(log)
    said = [r["message"] for r in records if r["logger"] == "janitor.observe.watch" and r["level"] == "WARNING"]
    assert len(said) == 1 and f"did not answer the watch within {KUBE_TIMEOUT}s" in said[0], said
    assert not [r for r in records if r["logger"] == "janitor.outage"], "the apiserver answered all else"
    for words in LIBRARY_WORDS:
        assert words not in log.read_text(), words


def test_a_watch_that_stops_answering_once_synced_is_said_within_the_kube_timeout(
        sandbox, core: client.CoreV1Api, namespace: str, tmp_path: Path) -> None:
    proxy, kubeconfig = proxied(sandbox, tmp_path)
    port = free_port()
    log = tmp_path / "janitor.log"
    try:
        with daemon(kubeconfig, port, namespace, log, "--kube-timeout", str(KUBE_TIMEOUT)):
            wait_until(lambda: get(f"http://127.0.0.1:{port}/readyz")[0] == 200, timeout=60,
                       what="the daemon synced and ready")
            hole = proxy.blackhole(watch=True, resource="configmaps")
            proxy.drop_connections()  # the watch is opened again, into the black hole
            wait_until(lambda: get(f"http://127.0.0.1:{port}/readyz")[0] == 503, timeout=KUBE_TIMEOUT + MARGIN,
                       what="/readyz to say the watch gets no answer")
            says_unanswered(port, "/readyz", namespace)
            says_unanswered(port, "/healthz", namespace)  # 200 or not, by how long ago a cycle last acted
            assert metric(port, f'janitor_watch_cache_synced{{kind="ConfigMap@{namespace}"}}') == 0
            skipped = metric(port, 'janitor_cycles_total{result="unsynced"}')
            configmap(core, namespace, "while-unanswered", EXPIRED)
            wait_until(lambda: metric(port, 'janitor_cycles_total{result="unsynced"}') > skipped, timeout=MARGIN,
                       what="a cycle while the watch gets no answer, doing nothing")
            assert exists(core.read_namespaced_config_map, "while-unanswered", namespace)

            proxy.clear(hole)
            wait_until(lambda: not exists(core.read_namespaced_config_map, "while-unanswered", namespace),
                       timeout=60, what="the watch, answered again, to bring the ConfigMap to a cycle that acts")
            wait_until(lambda: get(f"http://127.0.0.1:{port}/readyz")[0] == 200, timeout=30, what="/readyz 200")
    finally:
        proxy.stop()
    for words in LIBRARY_WORDS:
        assert words not in log.read_text(), words
