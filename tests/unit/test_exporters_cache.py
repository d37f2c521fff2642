"""The exporters render once per change of their inputs, and serve what the renderers would.

Aspects covered:
- every target's cached text is byte for byte what the plain renderers give, through value
  changes, history segments, ABSENT values, resets, pods coming and going and time passing
  (counters included: the cAdvisor and node CPU seconds);
- an unchanged scrape does not render again (render counters), also when only time passes for
  targets whose series do not depend on it; the counters' plans are kept while time passes;
- a change of values shows in the next scrape; so does a change stamped for later, or a history
  segment, once its time comes;
- a change of pods re-renders only the nodes whose pods changed, and kube-state-metrics only the
  changed pods' lines; a provider with a `generation` is not called while it stays the same;
- the aggregate targets carry, per series, exactly the labels Prometheus stores for that node's
  own target (both dcgm label styles), leave out nodes whose target is set down, and are served
  over HTTP only when the server is started with `aggregate`; `scrape_config(aggregate=True)`.

No timings: work is counted, never timed.
"""

from __future__ import annotations

import collections
import random
import urllib.error
import urllib.request
import uuid
from collections.abc import Sequence

import pytest
from prometheus_client.parser import text_string_to_metric_families

from devenv.exporters.cache import RenderCache
from devenv.exporters.exposition import to_text
from devenv.exporters.model import ContainerView, NodeView, PodView
from devenv.exporters.render import render_exporter
from devenv.exporters.server import ExporterServer
from devenv.exporters.targets import node_target, stored_labels
from devenv.exporters.values import ABSENT, Kind, Values
from devenv.prometheus import scrape_config

T0 = 1_795_000_000.0
NODES = [NodeView("gpu-1", 4), NodeView("gpu-2", 8), NodeView("mig-1", 2, mig_profile="3g.40gb"),
         NodeView("cpu-1", 0)]


class Clock:
    def __init__(self) -> None:
        self.t = T0

    def __call__(self) -> float:
        return self.t


def pod(name: str, node: str | None = "gpu-1", gpus: int = 1, *, ns: str = "ml", phase: str = "Running",
        created: float = T0 - 3600, containers: tuple[ContainerView, ...] | None = None) -> PodView:
    return PodView(ns, name, str(uuid.uuid5(uuid.NAMESPACE_DNS, f"{ns}/{name}")), node, phase, created, "Job", "j",
                   containers or (ContainerView("main", 1.0, gpus),), None, False)


def render(exporter: str, node: str | None, pods: Sequence[PodView], values: Values, now: float) -> str:
    return to_text(render_exporter(exporter, node, pods, NODES, values, now))


def targets() -> list[tuple[str, str | None]]:
    return [(e, n.name) for e in ("dcgm", "cadvisor", "node-exporter") for n in NODES] + [("kube-state-metrics", None)]


def test_cached_text_is_what_the_renderers_give_through_changes_and_time() -> None:
    rng = random.Random(7)
    clock = Clock()
    values = Values(clock=clock)
    counter = iter(range(10_000))

    def random_pod() -> PodView:
        i = next(counter)
        containers = tuple(ContainerView(f"c{k}", rng.choice([0, 0.5, 2]), rng.choice([0, 1, 2]))
                           for k in range(rng.randint(1, 3)))
        return pod(f"p{i}", rng.choice([n.name for n in NODES] + [None]), ns=f"ns{i % 3}",
                   phase=rng.choice(["Running", "Running", "Pending", "Succeeded"]),
                   created=T0 - rng.randint(-30, 20_000), containers=containers)

    pods = [random_pod() for _ in range(30)]
    cache = RenderCache(lambda: pods, lambda: NODES, values)
    for _ in range(150):
        clock.t += rng.choice([0, 0.001, 0.5, 1, 7, 60])
        p = rng.choice(pods)
        action = rng.random()
        if action < 0.1:
            values.set_cpu(p.namespace, p.name, rng.choice([None, p.containers[0].name]),
                           rng.choice([0, 0.3, 2.5, ABSENT, None]))
        elif action < 0.15:
            values.set_gpu_util(p.namespace, p.name, rng.choice([0, 50, 99, ABSENT]), gpu=rng.choice([None, 0, 1]))
        elif action < 0.2:
            start = clock.t + rng.uniform(-100, 100)
            values.add_history(Kind.CPU, (p.namespace, p.name, None),
                               [(start, start + rng.uniform(1, 30), rng.choice([1.0, 0.0, ABSENT]))])
        elif action < 0.22:
            values.set_node_dstate(rng.choice(NODES).name, rng.choice([0, 3, ABSENT]))
        elif action < 0.3:
            pods = [*pods[1:], random_pod()]
        elif action < 0.32:
            values.reset()
        for exporter, node in targets():
            assert cache.body(exporter, node, clock.t).decode() == render(exporter, node, pods, values, clock.t)


def test_an_unchanged_scrape_does_not_render_again() -> None:
    pods = [pod("a", "gpu-1"), pod("b", "gpu-2", 2)]
    clock = Clock()
    cache = RenderCache(lambda: pods, lambda: NODES, Values(clock=clock))
    first = {t: cache.body(*t, clock.t) for t in targets()}
    renders = sum(cache.renders.values())
    assert renders == len(targets())
    assert {t: cache.body(*t, clock.t) for t in targets()} == first
    clock.t += 30  # time passes: counters move, but nothing is rendered from scratch
    later = {t: cache.body(*t, clock.t) for t in targets()}
    assert sum(cache.renders.values()) == renders
    assert later[("dcgm", "gpu-1")] is first[("dcgm", "gpu-1")]  # the very same bytes
    assert later[("kube-state-metrics", None)] is first[("kube-state-metrics", None)]
    assert later[("cadvisor", "gpu-1")] != first[("cadvisor", "gpu-1")]  # ...and the counters did move
    assert later[("cadvisor", "gpu-1")].decode() == render("cadvisor", "gpu-1", pods, cache.values, clock.t)


def test_a_change_of_values_shows_in_the_next_scrape() -> None:
    pods = [pod("a", "gpu-1")]
    clock = Clock()
    values = Values(clock=clock)
    cache = RenderCache(lambda: pods, lambda: NODES, values)
    assert b'pod="a"} 0\n' in cache.body("dcgm", "gpu-1", clock.t)
    values.set_gpu_util("ml", "a", 87)
    assert b'pod="a"} 87\n' in cache.body("dcgm", "gpu-1", clock.t)
    assert cache.renders[("dcgm", "gpu-1")] == 2


def test_a_change_stamped_for_later_or_a_segment_shows_when_its_time_comes() -> None:
    pods = [pod("a", "gpu-1")]
    clock = Clock()
    values = Values(clock=clock)
    cache = RenderCache(lambda: pods, lambda: NODES, values)
    values.apply({"set": [{"kind": "gpu_util", "key": ["ml", "a", None], "value": 55, "at": T0 + 10}]})
    values.add_history(Kind.GPU_UTIL, ("ml", "a", None), [(T0 + 20, T0 + 30, 99)])
    seen = []
    for t in (T0, T0 + 5, T0 + 10, T0 + 15, T0 + 20, T0 + 29, T0 + 30):
        clock.t = t
        text = cache.body("dcgm", "gpu-1", t).decode()
        seen.append(next(line.rsplit(" ", 1)[1] for line in text.splitlines()
                         if line.startswith("DCGM_FI_DEV_GPU_UTIL{") and 'pod="a"' in line))
    assert seen == ["0", "0", "55", "55", "99", "99", "55"]
    assert cache.renders[("dcgm", "gpu-1")] == 4  # at T0, T0+10, T0+20 and T0+30 only


def test_a_change_of_pods_renders_only_what_it_touches() -> None:
    pods = [pod(f"p{i}", "gpu-1" if i % 2 else "gpu-2") for i in range(6)]
    cache = RenderCache(lambda: pods, lambda: NODES, Values())
    for t in targets():
        cache.body(*t, T0)
    before, pods_rendered = dict(cache.renders), cache.ksm_pod_renders
    assert pods_rendered == 6
    pods = [*pods, pod("new", "gpu-2")]
    for t in targets():
        cache.body(*t, T0)
    changed = {k for k, n in cache.renders.items() if n != before.get(k)}
    assert changed == {("dcgm", "gpu-2"), ("cadvisor", "gpu-2"), ("kube-state-metrics", None)}
    assert cache.ksm_pod_renders == pods_rendered + 1  # only the new pod's lines were rendered
    assert b'pod="new"' in cache.body("kube-state-metrics", None, T0)


class Watching:
    """A provider kept current elsewhere: it says so with `generation`, and counts its calls."""

    def __init__(self, items: Sequence[object]) -> None:
        self.items = tuple(items)
        self.generation = 1
        self.calls = 0

    def __call__(self) -> tuple[object, ...]:
        self.calls += 1
        return self.items


def test_a_provider_with_a_generation_is_only_called_when_it_moved() -> None:
    pods, nodes = Watching([pod("a", "gpu-1")]), Watching(NODES)
    cache = RenderCache(pods, nodes, Values())  # type: ignore[arg-type]
    for _ in range(5):
        cache.body("dcgm", "gpu-1", T0)
    assert (pods.calls, nodes.calls) == (1, 1)
    pods.items, pods.generation = (*pods.items, pod("b", "gpu-1")), 2
    assert b'pod="b"' in cache.body("dcgm", "gpu-1", T0)
    assert pods.calls == 2


def series(text: bytes) -> list[tuple[str, frozenset[tuple[str, str]], float]]:
    return [(s.name, frozenset(s.labels.items()), s.value)
            for fam in text_string_to_metric_families(text.decode()) for s in fam.samples]


@pytest.mark.parametrize("style", ["direct", "servicemonitor"])
def test_aggregate_series_carry_the_labels_stored_for_each_nodes_own_target(style: str) -> None:
    pods = [pod("a", "gpu-1", 2), pod("b", "gpu-2"), pod("c", "cpu-1", 0), pod("m", "mig-1")]
    clock = Clock()
    values = Values(clock=clock)
    cache = RenderCache(lambda: pods, lambda: NODES, values, aggregate=style)  # type: ignore[arg-type]
    for exporter in ("dcgm", "cadvisor", "node-exporter"):
        expected = []
        for node in NODES:
            target = node_target(exporter, node, dcgm_style=style)  # type: ignore[arg-type]
            if target is None:
                continue
            for name, labels, value in series(cache.body(exporter, node.name, clock.t)):
                expected.append((name, frozenset(stored_labels(dict(labels), target).items()), value))
        assert collections.Counter(series(cache.aggregate_body(exporter, clock.t))) == collections.Counter(expected)
    values.set_target_down("dcgm", "gpu-1")
    hosts = {dict(labels)["Hostname"] for _, labels, _ in series(cache.aggregate_body("dcgm", clock.t))}
    assert hosts == {"gpu-2", "mig-1"}


def get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=10) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def test_aggregate_paths_are_served_only_in_aggregate_mode() -> None:
    pods = [pod("a", "gpu-1")]
    with ExporterServer(lambda: pods, lambda: NODES, Values()) as plain:
        assert get(plain.url + "/dcgm/metrics")[0] == 404
    with ExporterServer(lambda: pods, lambda: NODES, Values(), aggregate="servicemonitor") as agg:
        status, body = get(agg.url + "/dcgm/metrics")
        assert status == 200 and b'exported_pod="a"' in body and b'pod="dcgm-exporter-gpu-1"' in body
        assert get(agg.url + "/cadvisor/metrics")[0] == get(agg.url + "/node-exporter/metrics")[0] == 200
        assert get(agg.url + "/dcgm/gpu-1/metrics")[0] == 200  # per-node targets stay available


def test_scrape_config_aggregate_has_one_target_per_job_honouring_scraped_labels() -> None:
    cfg = scrape_config("http://127.0.0.1:1234", NODES, dcgm_style="servicemonitor", interval="15s", aggregate=True)
    jobs = {j["job_name"]: j for j in cfg["scrape_configs"]}
    assert set(jobs) == {"dcgm-exporter", "kubelet", "node-exporter", "kube-state-metrics"}
    assert all(len(j["static_configs"]) == 1 and j["honor_labels"] for j in jobs.values())
    assert jobs["kubelet"]["honor_timestamps"] is False and jobs["dcgm-exporter"]["honor_timestamps"] is True
    paths = {j["static_configs"][0]["labels"]["__metrics_path__"] for j in jobs.values()}
    assert paths == {"/dcgm/metrics", "/cadvisor/metrics", "/node-exporter/metrics", "/kube-state-metrics/metrics"}
    assert cfg["global"]["scrape_interval"] == "15s"
