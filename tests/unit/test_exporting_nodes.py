"""Which nodes export a signal, read across the cluster for a policy that reads several signals.

A cycle's usage queries read the namespaces the policies cover (a re-check only its pods), so the
pods read cannot tell whether a node exports a field: its other GPUs may be held by pods of other
namespaces, or by none. Covered:
- a policy reading several signals gets, per signal, one query naming no namespace and no pod,
  and its answer's nodes in the evidence (the cycle's and a re-check's);
- a policy reading one signal asks no such query (it never leaves a signal out), unless it enforces
  a PROF field: its in-use check reads GPUs held without a request on GPU_UTIL and that field
  (decide.usage), so which nodes export each is read for it too, without reading either whole;
- an answer that is not whole (an error, warnings) tells no node: every missing series is unknown
  that cycle, and the signal's read (its busy series, which veto) stays.
"""

from __future__ import annotations

import datetime
import json
from typing import Any

from janitor.decide.evidence import PodKey
from janitor.decide.model import Observation, SafetyLedger
from janitor.decide.plan import plan
from janitor.observe import observation
from janitor.observe.answers import ErrorKind, PrometheusError, QueryResult, RowSink, parse_answer
from janitor.observe.prometheus import PrometheusConfig, PrometheusSource
from janitor.policy.model import GpuSignal, IdleGpu, Match, Policy
from janitor.settings import PrometheusSettings, Settings

NOW = datetime.datetime(2026, 5, 1, 12, 0, tzinfo=datetime.timezone.utc)
WINDOW = datetime.timedelta(hours=2)
SEVERAL = Policy("idle", (IdleGpu(threshold=5.0, window=WINDOW, also=((GpuSignal.SM_ACTIVE, 0.05),)),),
                 match=Match())
SETTINGS = Settings(prometheus=PrometheusSettings(url="http://127.0.0.1:9", query_samples=0))


class _Nodes(PrometheusSource):
    """A Prometheus whose nodes `Hostname` lists export every field; other queries find nothing."""

    def __init__(self, nodes: tuple[str, ...], *, fail: str | None = None) -> None:
        super().__init__(PrometheusConfig(url="http://127.0.0.1:9"))
        self.nodes, self.fail = nodes, fail
        self.queries: list[str] = []

    def active_targets(self) -> list[Any]:
        return [{"labels": {"job": "dcgm-exporter"}, "scrapeInterval": "15s"}]

    def instant(self, query: str, at: datetime.datetime, sink: RowSink | None = None) -> QueryResult:
        self.queries.append(query)
        rows: list[dict[str, Any]] = []
        warnings: list[str] = []
        if query.startswith("count by (Hostname)"):
            if self.fail == "error":
                raise PrometheusError(ErrorKind.TIMEOUT, "no answer within 30s", query=query)
            rows = [{"metric": {"Hostname": n}, "value": [NOW.timestamp(), "8"]} for n in self.nodes]
            warnings = ["store gpu-east did not answer"] if self.fail == "partial" else []
        body = {"status": "success", "data": {"resultType": "vector", "result": rows}, "warnings": warnings}
        return parse_answer(200, json.dumps(body).encode(), query, sink)


def _exporting(source: _Nodes, policy: Policy, **scope: Any) -> dict[str, Any]:
    found = observation.read_evidence(source, SETTINGS, observation.needs([policy]), NOW, **scope)
    return {signal: (e.exporting, e.failed) for (signal, _), e in found.gpu.items()}


def test_a_policy_reading_several_signals_learns_which_nodes_export_each() -> None:
    source = _Nodes(("gpu-1", "gpu-2"))
    found = _exporting(source, SEVERAL, namespaces=["team-a"])
    assert found == {str(GpuSignal.GPU_UTIL): (frozenset({"gpu-1", "gpu-2"}), None),
                     str(GpuSignal.SM_ACTIVE): (frozenset({"gpu-1", "gpu-2"}), None)}
    asked = [q for q in source.queries if q.startswith("count by (Hostname)")]
    assert sorted(asked) == ["count by (Hostname) (DCGM_FI_DEV_GPU_UTIL)",
                             "count by (Hostname) (DCGM_FI_PROF_SM_ACTIVE)"]
    recheck = _exporting(_Nodes(("gpu-1",)), SEVERAL, pods=[PodKey("team-a", "train-0")])
    assert recheck[str(GpuSignal.SM_ACTIVE)] == (frozenset({"gpu-1"}), None)


def test_a_policy_reading_one_signal_asks_nothing_more() -> None:
    source = _Nodes(("gpu-1",))
    found = _exporting(source, Policy("idle", (IdleGpu(threshold=5.0, window=WINDOW),), match=Match()),
                       namespaces=["team-a"])
    assert found == {str(GpuSignal.GPU_UTIL): (None, None)}
    assert not [q for q in source.queries if q.startswith("count by")]


def test_an_enforcing_policy_on_a_prof_field_learns_which_nodes_export_it_and_gpu_util() -> None:
    """Its in-use check reads a GPU held through a DRA claim on GPU_UTIL and GR beside it: a claim
    pod without a GR series, on a node that exports GR for another namespace's pod, is unknown on
    it, in the cycle and in the re-check (whose read holds only its workload's pods)."""
    from janitor.policy.model import Mode

    on_gr = Policy("idle", (IdleGpu(signal=GpuSignal.GR_ENGINE_ACTIVE, threshold=0.05, window=WINDOW),),
                   match=Match(), mode=Mode.ENFORCE)
    need = observation.needs([on_gr])
    assert not need.gpu_whole, "the busy carry still reads them since the last cycle"
    for scope in ({"namespaces": ["team-a"]}, {"pods": [PodKey("team-a", "train-0")]}):
        found = _exporting(_Nodes(("gpu-1", "gpu-2")), on_gr, **scope)
        assert found == {str(GpuSignal.GPU_UTIL): (frozenset({"gpu-1", "gpu-2"}), None),
                         str(GpuSignal.GR_ENGINE_ACTIVE): (frozenset({"gpu-1", "gpu-2"}), None)}, scope


def test_an_answer_that_is_not_whole_tells_no_node_and_keeps_the_read() -> None:
    """A node left out of a partial answer would be taken for one without the field; and failing
    the signal's whole read would throw away its busy series, which veto (a GPU a pod holds through
    a DRA claim, seen only there). So every missing series is unknown that cycle (a node named ""
    exports it: which node exports what cannot be told), and the read stays."""
    for fail in ("error", "partial"):
        found = _exporting(_Nodes(("gpu-1",), fail=fail), SEVERAL, namespaces=["team-a"])
        for signal in (GpuSignal.GPU_UTIL, GpuSignal.SM_ACTIVE):
            assert found[str(signal)] == (frozenset({""}), None), fail
        # ... and it is said, per signal, as what it is: not a failed read (its series still judge),
        # but pods missing a series unknown on it (the cycle's notes; the evidence failures metric).
        read = observation.read_evidence(_Nodes(("gpu-1",), fail=fail), SETTINGS, observation.needs([SEVERAL]), NOW,
                                         namespaces=["team-a"])
        assert read.failures == ()
        assert [f.split(" (")[0] for f in read.exporting_failures] == [
            f"which nodes export {s} is unknown" for s in sorted((str(GpuSignal.GPU_UTIL), str(GpuSignal.SM_ACTIVE)))]
        planned = plan(Observation(NOW, evidence=read), [SEVERAL], SafetyLedger(), NOW)
        assert set(read.exporting_failures) <= set(planned.notices) and not planned.evidence_failures
        assert all("a pod missing its series is unknown on it" in f for f in read.exporting_failures)
