"""The daemon's watch cache against the sandbox's real apiserver, through the fault proxy.

Aspects covered:
- an object created, changed and deleted between cycles is seen correctly by the next cycle with
  no list in between (the proxy's journal shows one list and watches only);
- a watch the connection drops is opened again from its resourceVersion, without a list, and
  misses nothing; a watch answered 410 Gone (as an HTTP status, and as an ERROR event in the
  stream) lists the kind again and sees what changed meanwhile, deletions included;
- while a kind cannot be read the cache is not synced and a cycle does nothing, even with an
  expired object in the cache; once it reads again the cycle acts;
- the re-check before acting still reads fresh: an object whose `janitor/expires` was removed
  after the cycle's read is kept, whatever the cache said;
- the daemon's metrics and /readyz say whether the cache is synced.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from kubernetes import client
from runner import Runner
from test_daemon import get
from test_faults_apiserver import daemon, metric, proxied
from test_observe_prometheus_live import gpu_pod
from test_ttl_cleanup import configmap, exists, settings

from devenv.faults import FaultProxy
from devenv.procs import free_port, wait_until
from janitor import annotations as a
from janitor import kubeapi
from janitor.decide.model import PodView, ResourceKind
from janitor.observe.cache import ClusterCache, NotSynced
from janitor.observe.kind_status import KindStatus
from janitor.settings import Settings

CONFIG_MAPS = ResourceKind("", "v1", "ConfigMap", "configmaps")
EXPIRED = {a.EXPIRES: "2020-01-01T00:00:00Z"}


def cached_runner(sandbox, tmp_path: Path, namespace: str) -> tuple[Runner, FaultProxy, ClusterCache]:  # noqa: ANN001
    proxy, kubeconfig = proxied(sandbox, tmp_path)
    api = kubeapi.connect(str(kubeconfig), (3.0, 10.0))
    config: Settings = settings(namespace, kinds=(CONFIG_MAPS,))
    runner = Runner(api, config)
    cache = ClusterCache(api, config)
    runner.ports.cache = cache
    return runner, proxy, cache


def lists(proxy: FaultProxy, namespace: str) -> list[str]:
    """The configmap collection GETs that were lists, not watches."""
    return [s.query for s in proxy.requests(method="GET", path=f"/api/v1/namespaces/{namespace}/configmaps")
            if s.path.endswith("/configmaps") and "watch=true" not in s.query]


def names(cache: ClusterCache) -> set[str]:
    """The ConfigMaps the cache holds now, less the one every namespace gets and the janitor's state."""
    return {v.ref.name for v in cache.snapshot().objects if v.ref.name not in ("kube-root-ca.crt", "janitor-state")}


def watch_of(cache: ClusterCache, kind: str) -> KindStatusView:
    return KindStatusView(cache, kind)


class KindStatusView:
    """One kind's status in the cache, read anew at each call (as /metrics reads it)."""

    def __init__(self, cache: ClusterCache, kind: str) -> None:
        self.cache, self.kind = cache, kind

    def status(self) -> KindStatus:
        return next(s for s in self.cache.status() if s.key.split("@")[0] == self.kind)


def deleted(runner: Runner) -> set[str]:
    assert runner.last is not None
    return {r.action.target.name for r in runner.last.results if r.action.type.deletes}


@pytest.fixture
def cached(sandbox, tmp_path: Path, namespace: str):  # noqa: ANN001
    runner, proxy, cache = cached_runner(sandbox, tmp_path, namespace)
    try:
        yield runner, proxy, cache
    finally:
        cache.stop()
        proxy.stop()


def test_changes_between_cycles_are_seen_without_a_list(cached, core: client.CoreV1Api, namespace: str) -> None:
    runner, proxy, cache = cached
    configmap(core, namespace, "changed-later", {})
    configmap(core, namespace, "gone-later", EXPIRED | {a.OPT_OUT: "true"})
    runner.run_cycle()
    assert deleted(runner) == set()
    assert len(lists(proxy, namespace)) == 1
    # ConfigMaps are listed as metadata in pages four times --page-size: 250 of them stayed under
    # the apiserver's 128 KiB compression threshold, and travelled uncompressed.
    assert f"limit={4 * runner.settings.cluster.page_size}" in lists(proxy, namespace)[0], lists(proxy, namespace)

    configmap(core, namespace, "created-later", EXPIRED)
    core.patch_namespaced_config_map("changed-later", namespace, {"metadata": {"annotations": EXPIRED}})
    core.delete_namespaced_config_map("gone-later", namespace)
    wait_until(lambda: names(cache) == {"changed-later", "created-later"},
               timeout=10, what="the watch to bring the three changes")
    runner.run_cycle()

    assert deleted(runner) == {"changed-later", "created-later"}
    assert not exists(core.read_namespaced_config_map, "created-later", namespace)
    assert len(lists(proxy, namespace)) == 1, lists(proxy, namespace)
    assert watch_of(cache, "ConfigMap").status().expired == 0


def test_a_dropped_watch_resumes_from_its_version_without_a_list(cached, core: client.CoreV1Api,
                                                                   namespace: str) -> None:
    runner, proxy, cache = cached
    runner.run_cycle()
    # The watch's connection is reset, and so is the first attempt to open it again.
    proxy.reset(method="GET", regex=f"/namespaces/{namespace}/configmaps\\?.*watch=true", times=2)
    watches_before = [s for s in proxy.requests(path=f"/api/v1/namespaces/{namespace}/configmaps")
                      if "watch=true" in s.query]
    assert proxy.drop_connections() >= 1  # the established watch stream drops
    configmap(core, namespace, "while-dropped", EXPIRED)
    wait_until(lambda: "while-dropped" in names(cache), timeout=20,
               what="the re-opened watch to bring the object created while it was down")
    runner.run_cycle()
    assert deleted(runner) == {"while-dropped"}
    assert len(lists(proxy, namespace)) == 1
    watches = [s for s in proxy.requests(path=f"/api/v1/namespaces/{namespace}/configmaps") if "watch=true" in s.query]
    assert len(watches) >= len(watches_before) + 2


@pytest.mark.parametrize("form", ["http-status", "error-event"])
def test_a_watch_answered_410_lists_again_and_sees_what_changed(cached, core: client.CoreV1Api, namespace: str,
                                                                 form: str) -> None:
    runner, proxy, cache = cached
    configmap(core, namespace, "deleted-while-away", EXPIRED | {a.OPT_OUT: "true"})
    runner.run_cycle()
    gone = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "reason": "Expired",
            "message": "too old resource version: 1 (2)", "code": 410}
    if form == "http-status":
        rule = proxy.status(410, gone, method="GET", regex="configmaps.*watch=true")
    else:
        rule = proxy.status(200, json.dumps({"type": "ERROR", "object": gone}) + "\n", method="GET",
                            regex="configmaps.*watch=true")
    cache_watch = watch_of(cache, "ConfigMap")
    proxy.drop_connections()
    wait_until(lambda: cache_watch.status().expired >= 1, timeout=20, what="the 410 to be seen")
    proxy.clear(rule)
    configmap(core, namespace, "created-while-away", EXPIRED)
    core.delete_namespaced_config_map("deleted-while-away", namespace)
    wait_until(lambda: cache_watch.status().synced, timeout=20, what="the kind to be listed again")
    wait_until(lambda: names(cache) == {"created-while-away"}, timeout=20,
               what="the list to show the change")
    runner.run_cycle()
    assert deleted(runner) == {"created-while-away"}
    assert len(lists(proxy, namespace)) >= 2


def test_an_unsynced_cache_takes_no_action(cached, core: client.CoreV1Api, namespace: str) -> None:
    runner, proxy, cache = cached
    configmap(core, namespace, "expired", EXPIRED | {a.OPT_OUT: "true"})
    runner.run_cycle()
    assert deleted(runner) == set()
    # The apiserver refuses every configmaps request from now on; the watch breaks and cannot reopen.
    rule = proxy.status(503, method="GET", regex=f"/namespaces/{namespace}/configmaps\\?")
    core.patch_namespaced_config_map("expired", namespace, {"metadata": {"annotations": {a.OPT_OUT: None}}})
    cache_watch = watch_of(cache, "ConfigMap")
    proxy.drop_connections()
    wait_until(lambda: not cache_watch.status().synced, timeout=20, what="the cache to know it is not synced")
    with pytest.raises(NotSynced, match="ConfigMap.*not synced|not synced.*ConfigMap"):
        runner.run_cycle()
    assert exists(core.read_namespaced_config_map, "expired", namespace)

    proxy.clear(rule)
    wait_until(lambda: cache_watch.status().synced, timeout=40, what="the watch to come back")
    runner.run_cycle()
    assert deleted(runner) == {"expired"}


def test_the_recheck_reads_fresh_whatever_the_cache_says(cached, core: client.CoreV1Api, namespace: str) -> None:
    runner, proxy, cache = cached
    configmap(core, namespace, "kept-at-the-last-moment", EXPIRED)

    def keep() -> None:  # after the cycle read the cache, before it acts
        core.patch_namespaced_config_map("kept-at-the-last-moment", namespace,
                                         {"metadata": {"annotations": {a.EXPIRES: None}}})

    result = runner.plan_then_act(keep)
    assert [act.target.name for act in result.plan.deletions()] == ["kept-at-the-last-moment"]
    assert result.deleted() == []
    assert exists(core.read_namespaced_config_map, "kept-at-the-last-moment", namespace)
    reads = proxy.requests(method="GET", path=f"/api/v1/namespaces/{namespace}/configmaps/kept-at-the-last-moment")
    assert reads, "the re-check read the object by name"


def test_the_daemon_says_on_readyz_and_in_metrics_while_its_cache_is_not_synced(
        sandbox, core: client.CoreV1Api, namespace: str, tmp_path: Path) -> None:
    proxy, kubeconfig = proxied(sandbox, tmp_path)
    port = free_port()
    log = tmp_path / "janitor.log"
    try:
        refused = proxy.status(503, method="GET", regex=f"/namespaces/{namespace}/configmaps\\?")
        configmap(core, namespace, "expired", EXPIRED)
        with daemon(kubeconfig, port, namespace, log, "--kube-timeout", "5"):
            wait_until(lambda: metric(port, 'janitor_cycles_total{result="unsynced"}') >= 2, timeout=60,
                       what="cycles to be skipped while the cache cannot list")
            code, body = get(f"http://127.0.0.1:{port}/readyz")
            assert code == 503 and "watch cache not synced" in body and "ConfigMap" in body, body
            assert metric(port, f'janitor_watch_cache_synced{{kind="ConfigMap@{namespace}"}}') == 0
            assert metric(port, "janitor_watch_cache_failures_total") >= 1
            assert exists(core.read_namespaced_config_map, "expired", namespace)

            proxy.clear(refused)
            wait_until(lambda: not exists(core.read_namespaced_config_map, "expired", namespace), timeout=90,
                       what="the first cycle with the cache synced to delete the expired ConfigMap")
            wait_until(lambda: get(f"http://127.0.0.1:{port}/readyz")[0] == 200, timeout=30, what="/readyz 200")
            assert metric(port, f'janitor_watch_cache_synced{{kind="ConfigMap@{namespace}"}}') == 1
    finally:
        proxy.stop()


def test_an_unchanged_pod_is_the_same_view_in_the_next_cycle(cached, core: client.CoreV1Api, namespace: str) -> None:
    """A cycle's snapshot holds the cache's own views, not copies: while a pod is unchanged the
    next cycle gets the very view the cycle before had (copies would hold every pod twice at a
    cycle's peak, tens of MB at 50,000 pods), and a new one once it changes."""
    _, _, cache = cached
    cache.ensure(pods=True, nodes=False, oom=False)
    assert cache.wait(30)
    gpu_pod(core, namespace, "steady", 1)

    def view() -> PodView | None:
        return next((p for p in cache.snapshot().pods if p.ref.name == "steady" and p.ref.namespace == namespace),
                    None)

    def settled() -> bool:  # kwok has written the pod's status, and the watch brought it
        seen = view()
        return seen is not None and seen.resource_version == core.read_namespaced_pod(
            "steady", namespace).metadata.resource_version

    wait_until(settled, timeout=30, what="the cache to hold the running pod")
    first = view()
    time.sleep(2)  # a cycle later, nothing changed
    assert view() is first
    core.patch_namespaced_pod("steady", namespace, {"metadata": {"annotations": {"example.com/note": "touched"}}})
    wait_until(lambda: view() is not first, timeout=10, what="the watch to bring the change")
    changed = view()
    assert changed is not None and changed.annotations.get("example.com/note") == "touched"


@pytest.mark.parametrize("refresh", [1.0, 0.0], ids=["listed-every-second", "watched"])
def test_nodes_are_listed_again_every_refresh_not_watched(sandbox, tmp_path: Path, core: client.CoreV1Api,  # noqa: ANN001
                                                         namespace: str, refresh: float) -> None:
    """Nodes are listed (compressed) every --node-refresh instead of watched: each kubelet status
    report would come whole on a watch. A node's change is seen by the next list; 0 watches them."""
    import dataclasses
    import datetime

    proxy, kubeconfig = proxied(sandbox, tmp_path)
    api = kubeapi.connect(str(kubeconfig), (3.0, 10.0))
    config = settings(namespace, kinds=(CONFIG_MAPS,))
    config = dataclasses.replace(config, cluster=dataclasses.replace(
        config.cluster, node_refresh=datetime.timedelta(seconds=refresh)))
    cache = ClusterCache(api, config)
    node = core.list_node().items[0].metadata.name
    try:
        cache.ensure(pods=False, nodes=True, oom=False)
        assert cache.wait(30)
        core.patch_node(node, {"metadata": {"labels": {"janitor-test/mark": namespace}}})
        wait_until(lambda: any(n.name == node and n.labels.get("janitor-test/mark") == namespace
                               for n in cache.snapshot().nodes), timeout=15, what="the node's new label seen")
        asked = [s.query for s in proxy.requests(method="GET", path="/api/v1/nodes") if s.path == "/api/v1/nodes"]
        watches = [q for q in asked if "watch=true" in q]
        status = watch_of(cache, "Node").status()
        nodes_at = cache.snapshot().nodes_at
        if refresh:
            assert not watches and len(asked) >= 2 and status.refreshed == len(asked) - 1, asked
            assert f"limit={2 * config.cluster.page_size}" in asked[0]
            # What the nodes say is as of their list: deciding judges the agent's report against it.
            assert nodes_at is not None
            assert 0 <= (datetime.datetime.now(datetime.timezone.utc) - nodes_at).total_seconds() < 5
        else:
            assert watches and len(asked) - len(watches) == 1 and status.refreshed == 0, asked
            assert nodes_at is None  # watched: current
        assert status.synced
    finally:
        cache.stop()
        proxy.stop()
        core.patch_node(node, {"metadata": {"labels": {"janitor-test/mark": None}}})
