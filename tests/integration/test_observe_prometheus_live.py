"""`PrometheusSource` against a real Prometheus scraping the sandbox, 2.x and 3.x (ids `prom2`, `prom3`):
every evidence query goes through it, so its reading of answers and errors must hold on both.

Covered:
- an instant query returns one series per GPU of a 2-GPU pod, in the ServiceMonitor label style
  (`exported_pod`, `exported_namespace`, `Hostname`), with the values the test set, not partial;
- a range query over the last minute gives a matrix of in-window samples per GPU;
- an empty result is an empty result, not an error; quoted odd label values and an extra matcher
  (`cluster="mn2"`, which this Prometheus does not have) are valid PromQL that match nothing;
- a syntax error is `bad_data` (HTTP 400) with Prometheus's own message, a many-to-many match is
  `execution` (HTTP 422);
- NaN computed by Prometheus comes back as NaN, flagged;
- an unreachable URL fails as `transport` within the connect timeout.
"""

from __future__ import annotations

import math
import socket
import time
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone

import pytest
from kubernetes import client

from devenv.exporters.server import ValuesControl
from devenv.procs import wait_until
from janitor.observe.prometheus import (
    SERVICE_MONITOR,
    ErrorKind,
    Matcher,
    PrometheusConfig,
    PrometheusError,
    PrometheusSource,
    QueryResult,
)

METRIC = "DCGM_FI_DEV_GPU_UTIL"


@pytest.fixture
def prom(sandbox_prometheus: str) -> Iterator[PrometheusSource]:
    with PrometheusSource(PrometheusConfig(url=sandbox_prometheus, label_map=SERVICE_MONITOR,
                                           connect_timeout=2, read_timeout=10)) as source:
        yield source


def now() -> datetime:
    return datetime.now(timezone.utc)


def gpu_pod(core: client.CoreV1Api, namespace: str, name: str, gpus: int) -> client.V1Pod:
    core.create_namespaced_pod(namespace, client.V1Pod(
        metadata=client.V1ObjectMeta(name=name),
        spec=client.V1PodSpec(containers=[client.V1Container(
            name="trainer", image="registry.example/train:1",
            resources=client.V1ResourceRequirements(limits={"nvidia.com/gpu": str(gpus)}),
        )]),
    ))
    wait_until(lambda: core.read_namespaced_pod(name, namespace).status.phase == "Running", timeout=60,
               what=f"{name} Running")
    return core.read_namespaced_pod(name, namespace)


def by_gpu(result: QueryResult) -> dict[str, float]:
    return {s.labels.get("gpu", ""): s.value for s in result.series}


def in_slot_order(result: QueryResult) -> list[float]:
    """Values of a pod's GPUs in the order of their device indices (its slot 0 first). Which
    devices a pod gets depends on its neighbours on the node, so tests name slots, not indices."""
    return [v for _, v in sorted(by_gpu(result).items(), key=lambda kv: int(kv[0]))]


def test_instant_and_range_queries_return_per_gpu_series(
    core: client.CoreV1Api, namespace: str, exporter_values: ValuesControl, prom: PrometheusSource
) -> None:
    pod = gpu_pod(core, namespace, "trainer", gpus=2)
    exporter_values.set_gpu_util(namespace, "trainer", 71, gpu=0)
    exporter_values.set_gpu_util(namespace, "trainer", 0, gpu=1)
    query = prom.selector(METRIC, *prom.config.label_map.matchers(namespace=namespace, pod="trainer"))
    assert query == f'{METRIC}{{exported_namespace="{namespace}",exported_pod="trainer"}}'

    wait_until(lambda: in_slot_order(prom.instant(query, now())) == [71.0, 0.0], timeout=30,
               what="both GPUs with the set values")
    result = prom.instant(query, now())
    assert result.result_type == "vector" and not result.partial and not result.non_finite
    for series in result.series:
        assert series.labels["exported_pod"] == "trainer"
        assert series.labels["exported_namespace"] == namespace
        assert series.labels["Hostname"] == pod.spec.node_name
        assert series.labels["__name__"] == METRIC

    # Scrapes come every 2 s: wait until the range since the values were set holds a few samples per
    # GPU (a range reaching back before it would hold the exporter's samples from before they were set).
    since = now()

    def ranged() -> QueryResult | None:
        answer = prom.range(query, since, now(), timedelta(seconds=2))
        return answer if len(answer.series) == 2 and all(len(s.samples) >= 3 for s in answer.series) else None

    wait_until(lambda: ranged() is not None, timeout=30, what="three range samples per GPU")
    end = now()
    start = since
    matrix = prom.range(query, start, end, timedelta(seconds=2))
    assert matrix.result_type == "matrix" and not matrix.partial
    values = {s.labels["gpu"]: {v for _, v in s.samples} for s in matrix.series}
    assert [v for _, v in sorted(values.items(), key=lambda kv: int(kv[0]))] == [{71.0}, {0.0}]
    for series in matrix.series:
        times = [t for t, _ in series.samples]
        assert times == sorted(times)
        assert start.timestamp() - 1 <= times[0] and times[-1] <= end.timestamp() + 1


def test_empty_result_is_not_an_error(prom: PrometheusSource, sandbox_prometheus: str) -> None:
    odd = prom.config.label_map.matchers(pod='no"such\\pod', namespace="nowhere")
    result = prom.instant(prom.selector(METRIC, *odd), now())
    assert result.series == () and result.result_type == "vector" and not result.partial

    # The same series the sandbox has, restricted to a cluster it is not: nothing, and no error.
    every = prom.instant(f'count({METRIC}{{exported_pod!=""}})', now())
    assert every.series, "the sandbox's GPU series should exist"
    mn2 = PrometheusSource(PrometheusConfig(url=sandbox_prometheus, extra_matchers=(Matcher("cluster", "mn2"),)))
    with mn2:
        query = mn2.selector(METRIC, Matcher("exported_pod", "", "!="))
        assert query == f'{METRIC}{{exported_pod!="",cluster="mn2"}}'
        assert mn2.instant(query, now()).series == ()


def test_syntax_error_is_bad_data_with_prometheus_message(prom: PrometheusSource) -> None:
    with pytest.raises(PrometheusError) as caught:
        prom.instant("sum(", now())
    assert caught.value.kind == ErrorKind.BAD_DATA and caught.value.status == 400
    assert caught.value.error_type == "bad_data"
    assert "parse error" in caught.value.message and not caught.value.temporary


def test_many_to_many_is_an_execution_error(prom: PrometheusSource) -> None:
    # `up` has one series per scrape target; all match the empty group on the right side.
    with pytest.raises(PrometheusError) as caught:
        prom.instant("vector(1) + on() group_left() up", now())
    assert caught.value.kind == ErrorKind.EXECUTION and caught.value.status == 422
    assert "duplicate series" in caught.value.message


def test_nan_from_prometheus_is_flagged(prom: PrometheusSource) -> None:
    result = prom.instant("vector(0) / 0", now())
    assert len(result.series) == 1 and math.isnan(result.series[0].value) and result.non_finite


def test_unreachable_url_is_a_transport_error_within_the_timeout() -> None:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    dead = PrometheusSource(PrometheusConfig(url=f"http://127.0.0.1:{port}", connect_timeout=2, read_timeout=5))
    started = time.monotonic()
    with pytest.raises(PrometheusError) as caught:
        dead.instant("up", now())
    assert caught.value.kind == ErrorKind.TRANSPORT and caught.value.status is None and caught.value.temporary
    assert time.monotonic() - started < 2
