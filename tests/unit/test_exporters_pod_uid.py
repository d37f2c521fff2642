"""The sandbox's dcgm-exporter labels pods' series with `pod_uid` when switched on, as
`--kubernetes-enable-pod-uid` does.

Aspects covered:
- off by default: no series carries `pod_uid`;
- switched on for every node, or for one node (a node's own setting beats the all-nodes one):
  each pod's series carry its UID, after `pod` (the attributes are sorted by name); unassigned
  GPUs carry no pod labels at all;
- a timeline like every value: a history segment turns it on for a stretch of the past, so a
  backfill and a live scrape agree, and the render cache re-renders when it changes; a reset
  forgets it, past included (a flag, not a counter);
- after scraping: behind a ServiceMonitor the label stays `pod_uid` (no target label of that
  name), and becomes `exported_pod_uid` only where a target label `pod_uid` clashes;
- a re-created pod of the same name gets its new UID.
"""

from __future__ import annotations

from dataclasses import replace

from prometheus_client.parser import text_string_to_metric_families

from devenv.exporters.cache import RenderCache
from devenv.exporters.model import ContainerView, NodeView, PodView
from devenv.exporters.render import dcgm_text
from devenv.exporters.targets import node_target, stored_labels
from devenv.exporters.values import ALL_NODES, Kind, Segment, Values

T0 = 1_795_000_000.0
NODE = NodeView("gpu-node-1", gpus=2)
OTHER = NodeView("gpu-node-2", gpus=2)


def nb0(uid: str = "uid-a", node: str = "gpu-node-1") -> PodView:
    return PodView("ml", "nb-0", uid, node, "Running", T0 - 3 * 3600, "StatefulSet", "nb",
                   (ContainerView("main", 1.0, 1),), None, False)


def util(text: str) -> list[dict[str, str]]:
    return [dict(s.labels) for fam in text_string_to_metric_families(text) for s in fam.samples
            if s.name == "DCGM_FI_DEV_GPU_UTIL"]


def uids(values: Values, node: NodeView = NODE, pod: PodView | None = None, at: float = T0) -> list[str | None]:
    return [labels.get("pod_uid") for labels in util(dcgm_text(node, [pod or nb0(node=node.name)], values, at))]


def test_off_by_default() -> None:
    assert uids(Values(clock=lambda: T0)) == [None, None]


def test_on_for_every_node_or_one() -> None:
    values = Values(clock=lambda: T0)
    values.set_pod_uid()
    assert uids(values) == ["uid-a", None] and uids(values, OTHER) == ["uid-a", None]  # GPU 1 is unassigned
    line = next(line for line in dcgm_text(NODE, [nb0()], values, T0).splitlines()
                if line.startswith("DCGM_FI_DEV_GPU_UTIL{") and "pod=" in line)
    assert line.index('pod="nb-0"') < line.index('pod_uid="uid-a"')
    values.set_pod_uid(False, node=OTHER.name)
    assert uids(values) == ["uid-a", None] and uids(values, OTHER) == [None, None]
    assert uids(values, pod=nb0("uid-b")) == ["uid-b", None]  # re-created under the same name


def test_a_history_segment_switches_it_for_a_stretch() -> None:
    values = Values(clock=lambda: T0)
    values.add_history(Kind.POD_UID, (ALL_NODES,), [Segment(T0 - 3600, T0 - 600, 1)])
    assert uids(values, at=T0 - 1800)[0] == "uid-a"
    assert uids(values, at=T0 - 4000)[0] is None and uids(values, at=T0)[0] is None
    restored = Values.from_json(values.to_json())
    assert uids(restored, at=T0 - 1800)[0] == "uid-a"


def test_a_reset_forgets_the_switch_past_too() -> None:
    """The switch is the exporter's flag, not a counter: after a reset (a sandbox test's teardown)
    the next backfill of the same past renders no `pod_uid`, or every later test in the shared
    sandbox would find its pods' series half labelled."""
    values = Values(clock=lambda: T0)
    values.add_history(Kind.POD_UID, (ALL_NODES,), [Segment(T0 - 4 * 3600, T0 + 3600, 1)])
    values.set_pod_uid(node=NODE.name)
    values.add_history(Kind.GPU_UTIL, ("ml", "nb-0", None), [Segment(T0 - 3600, T0 + 3600, 40)])
    values.reset()
    assert uids(values, at=T0 - 1800) == [None, None] and uids(values, at=T0 + 60) == [None, None]
    assert values.resolve(Kind.GPU_UTIL, ("ml", "nb-0", None), T0 - 1800) == 40  # the rest of the past is kept


def test_the_render_cache_follows_the_switch() -> None:
    values = Values(clock=lambda: T0)
    cache = RenderCache(lambda: [nb0()], lambda: [NODE], values)
    assert "pod_uid" not in cache.body("dcgm", NODE.name, T0).decode()
    values.set_pod_uid()
    assert 'pod_uid="uid-a"' in cache.body("dcgm", NODE.name, T0 + 1).decode()


def test_stored_labels_behind_a_service_monitor() -> None:
    values = Values(clock=lambda: T0)
    values.set_pod_uid()
    scraped = next(labels for labels in util(dcgm_text(NODE, [nb0()], values, T0)) if "pod" in labels)
    target = node_target("dcgm", NODE, dcgm_style="servicemonitor")
    assert target is not None
    stored = stored_labels(scraped, target)
    assert stored["pod_uid"] == "uid-a" and stored["exported_pod"] == "nb-0" and "exported_pod_uid" not in stored
    relabelled = replace(target, labels=(*target.labels, ("pod_uid", "exporter-uid")))
    stored = stored_labels(scraped, relabelled)
    assert stored["exported_pod_uid"] == "uid-a" and stored["pod_uid"] == "exporter-uid"
