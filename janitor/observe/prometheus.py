"""A thin, strict wrapper over `prometheus-api-client` for the evidence code.

Every answer becomes a `QueryResult` or a `PrometheusError` with a kind (`observe.answers`), never
an empty list standing in for an error.

Why not `PrometheusConnect.custom_query`? It returns only `data.result`: it drops `warnings`
(how Thanos and Mimir say "HTTP 200, but some stores did not answer"), and on a non-200 it puts
`errorType`/`error` only inside an exception message string. By default it also retries a GET
answered 503 four times (~6 s) and then raises `requests.RetryError`. So we let the library build
and own the HTTP session (URL, headers, auth, TLS verify, the retry adapter mounted on the URL),
and send the same HTTP API requests through that session ourselves, reading the whole envelope.

Requests are POSTs with a form body (the API accepts both): queries with several extra
matchers get long, and the library's POST mode still puts them in the URL.
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Literal

import requests
from prometheus_api_client import PrometheusConnect
from urllib3.util.retry import Retry

from janitor.observe.answers import (
    MESSAGE_MAX,
    ErrorKind,
    PrometheusError,
    QueryResult,
    RowSink,
    Series,
    parse_answer,
)

__all__ = [
    "HONOR_LABELS", "MESSAGE_MAX", "SERVICE_MONITOR", "ErrorKind", "LabelMap", "Matcher", "PrometheusConfig",
    "PrometheusError", "PrometheusSource", "QueryResult", "QueryStat", "RowSink", "Series", "parse_answer", "quote",
    "selector",
]

logger = logging.getLogger(__name__)

_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
_METRIC_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_MATCHER_TEXT = re.compile(r"\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*(.*?)\s*")

# ----------------------------------------------------------------------------- form bodies

_FORM_UNSAFE = re.compile(r"[^A-Za-z0-9_.~-]+")
FORM_TYPE = "application/x-www-form-urlencoded"


def _escaped(found: re.Match[str]) -> str:
    return "".join("+" if b == 0x20 else f"%{b:02X}" for b in found.group().encode())


def form_body(form: Mapping[str, str]) -> str:
    """`form` as `urllib.parse.urlencode` writes it, byte for byte, in a fraction of its time.

    Why: a whole read names every pod it reads (megabytes of names at 50,000 pods), and the
    stdlib quotes a string one byte at a time in Python (0.04 s a megabyte); a query's names are
    almost all safe characters, so only the runs that are not are rewritten."""
    return "&".join(f"{_FORM_UNSAFE.sub(_escaped, k)}={_FORM_UNSAFE.sub(_escaped, v)}" for k, v in form.items())


# ----------------------------------------------------------------------------- selectors

MatchOp = Literal["=", "!=", "=~", "!~"]


def quote(value: str) -> str:
    """A PromQL double-quoted string literal for `value` (backslash, quote and newline escaped)."""
    escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{escaped}"'


def _check_label(name: str) -> str:
    if not _LABEL_NAME.fullmatch(name):
        raise ValueError(f"not a Prometheus label name: {name!r}")
    return name


@dataclass(frozen=True, slots=True)
class Matcher:
    """One label matcher, e.g. `cluster="mn2"`; the value is quoted when rendered, never trusted."""

    label: str
    value: str
    op: MatchOp = "="

    def __post_init__(self) -> None:
        _check_label(self.label)
        if self.op not in ("=", "!=", "=~", "!~"):
            raise ValueError(f"not a label matcher operator: {self.op!r}")

    def render(self) -> str:
        return f"{self.label}{self.op}{quote(self.value)}"

    @classmethod
    def parse(cls, text: str) -> Matcher:
        """Read a matcher as an admin writes it in settings: `cluster="mn2"` or `cluster=mn2`."""
        found = _MATCHER_TEXT.fullmatch(text)
        if not found:
            raise ValueError(f'not a label matcher (expected label="value"): {text!r}')
        label, op, raw = found.groups()
        value = raw
        if raw.startswith('"'):
            try:
                value = json.loads(raw)
            except ValueError:
                value = None
            if not isinstance(value, str):
                raise ValueError(f"bad quoted value in label matcher: {text!r}")
        return cls(label, value, op)  # type: ignore[arg-type]


def selector(metric: str, matchers: Iterable[Matcher] = (), extra: Iterable[Matcher] = ()) -> str:
    """`metric{m1,m2,…,extra…}`; `extra` are the site-wide matchers (e.g. one cluster of many)."""
    if metric and not _METRIC_NAME.fullmatch(metric):
        raise ValueError(f"not a Prometheus metric name: {metric!r}")
    rendered = [m.render() for m in (*matchers, *extra)]
    if not rendered:
        if not metric:
            raise ValueError("a selector needs a metric name or at least one matcher")
        return metric
    return f"{metric}{{{','.join(rendered)}}}"


@dataclass(frozen=True, slots=True)
class LabelMap:
    """Which label carries the workload's pod, namespace, container and node in a metric.

    dcgm-exporter scraped with `honor_labels` keeps `pod`/`namespace`/`container`; behind a
    ServiceMonitor (the chart default) they become `exported_*` and `pod`/`namespace` name the
    exporter itself. The node label is `Hostname` in dcgm-exporter, `hostname` in some setups.
    Queries are written against logical names and mapped through this.

    `pod_uid` names the labels that may carry the pod's UID (dcgm-exporter's `pod_uid`, with
    `--kubernetes-enable-pod-uid`), the first set one winning. Prometheus renames a scraped label
    to `exported_*` only where a target label of that name clashes: behind the chart's
    ServiceMonitor there is none, so the UID stays `pod_uid`, and a relabelling that adds a
    `pod_uid` target label turns the workload's into `exported_pod_uid`. Both are read there.
    """

    pod: str = "pod"
    namespace: str = "namespace"
    container: str = "container"
    hostname: str = "Hostname"
    pod_uid: tuple[str, ...] = ("pod_uid",)

    def __post_init__(self) -> None:
        for name in (self.pod, self.namespace, self.container, self.hostname, *self.pod_uid):
            _check_label(name)

    def label(self, logical: Literal["pod", "namespace", "container", "hostname"]) -> str:
        return str(getattr(self, logical))

    def matchers(self, op: MatchOp = "=", **logical: str) -> tuple[Matcher, ...]:
        """Matchers on logical labels: `matchers(namespace="ml", pod="train-0")`."""
        unknown = set(logical) - {"pod", "namespace", "container", "hostname"}
        if unknown:
            raise ValueError(f"unknown logical label(s): {sorted(unknown)}")
        return tuple(Matcher(self.label(k), v, op) for k, v in logical.items())  # type: ignore[arg-type]


HONOR_LABELS = LabelMap()
SERVICE_MONITOR = LabelMap(pod="exported_pod", namespace="exported_namespace", container="exported_container",
                           pod_uid=("exported_pod_uid", "pod_uid"))

# ----------------------------------------------------------------------------- the source


@dataclass(frozen=True)
class PrometheusConfig:
    """How to reach Prometheus (or a Thanos/Mimir query frontend) and what to add to selectors."""

    url: str
    connect_timeout: float = 3.0
    """Seconds to open a connection; short, so a dead endpoint fails the cycle's evidence fast."""
    read_timeout: float = 30.0
    """Seconds to wait for an answer. The server is told a slightly shorter query `timeout`, so
    it gives up first and says so (errorType timeout) instead of the client hanging up."""
    bearer_token: str | None = field(default=None, repr=False)
    basic_auth: tuple[str, str] | None = field(default=None, repr=False)
    client_cert: tuple[str, str] | None = None
    """(certificate file, key file) for TLS client authentication."""
    headers: Mapping[str, str] = field(default_factory=dict)
    """Extra headers, e.g. `X-Scope-OrgID` for Mimir tenants."""
    verify: bool | str = True
    """TLS verification: True, False, or the path of a CA bundle."""
    extra_matchers: tuple[Matcher, ...] = ()
    """Added to every selector built with `PrometheusSource.selector` (e.g. `cluster="mn2"`)."""
    label_map: LabelMap = HONOR_LABELS
    retries: int = 0
    """The one place that retries: connection failures and 502/503/504, with backoff. Default 0:
    the next cycle is the retry, and a slow Prometheus should not be hit harder."""
    retry_backoff: float = 0.5

    def __post_init__(self) -> None:
        if self.connect_timeout <= 0 or self.read_timeout <= 0 or self.retries < 0:
            raise ValueError("timeouts must be positive and retries not negative")


@dataclass(frozen=True, slots=True)
class QueryStat:
    """One request to Prometheus: which API, how long it took, how many bytes came back.

    With `PrometheusSource(query_stats=True)` a query's stat also holds its text and what
    Prometheus says the query cost: samples read (`totalQueryableSamples`), the most held in
    memory at once (`peakSamples`, what `--query.max-samples` limits) and its evaluation time.
    None where Prometheus did not say (not asked, an error, an older server)."""

    api: str  # "query", "query_range", "targets"
    seconds: float
    bytes: int
    ok: bool
    query: str = ""
    samples: int | None = None
    peak_samples: int | None = None
    eval_seconds: float | None = None


@dataclass(frozen=True, slots=True)
class Runtime:
    """What Prometheus says of itself: when it started and when it last loaded its config (None:
    it cannot say). A change of either is what the carried verdicts and kept scrape intervals
    watch for (`janitor.observe.carry`)."""

    start: datetime | None = None
    config: datetime | None = None


def _moment(data: Any, key: str) -> datetime | None:
    text = data.get(key) if isinstance(data, Mapping) else None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")) if isinstance(text, str) else None
    except ValueError:
        return None


class PrometheusSource:
    """Instant and range queries with whole-envelope reading, typed errors and explicit timeouts.

    `stats` records every request made, for the query-time metrics and the scale benchmark.
    `query_stats` (off unless asked, as the daemon runs) sends every query with `stats=all` and
    records Prometheus' own figures of its cost in each `QueryStat`: the scale benchmark's
    measure of what a cycle makes Prometheus read."""

    def __init__(self, config: PrometheusConfig, *, session: requests.Session | None = None,
                 query_stats: bool = False) -> None:
        self.config = config
        self.stats: list[QueryStat] = []
        self.query_stats = query_stats
        headers = dict(config.headers)
        if config.bearer_token:
            headers["Authorization"] = f"Bearer {config.bearer_token}"
        retry = Retry(
            total=config.retries, connect=config.retries, read=False, status=config.retries,
            backoff_factor=config.retry_backoff, status_forcelist=(502, 503, 504),
            allowed_methods=frozenset({"GET", "POST"}),  # queries are reads, safe to repeat
            # read=False: a read timeout is raised as is, never retried (the query may still run)
            raise_on_status=False,  # after the last try, hand back the answer so we read its envelope
        )
        self._connection = PrometheusConnect(
            url=config.url.rstrip("/"), headers=headers, retry=retry, session=session, auth=config.basic_auth,
            timeout=None, method="POST",  # timeouts are passed per request below, as (connect, read)
        )
        self._connection._session.verify = config.verify
        if config.client_cert is not None:
            self._connection._session.cert = config.client_cert
        self._server_timeout = max(config.read_timeout - 1.0, config.read_timeout * 0.5)

    def close(self) -> None:
        self._connection.close()

    def __enter__(self) -> PrometheusSource:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def selector(self, metric: str, *matchers: Matcher) -> str:
        """A selector with this site's extra matchers appended."""
        return selector(metric, matchers, self.config.extra_matchers)

    def instant(self, query: str, at: datetime, sink: RowSink | None = None) -> QueryResult:
        """Evaluate `query` at `at` (an aware datetime: the caller's one `now` of the cycle). With
        `sink`, the rows go to it as they are decoded (`parse_answer`)."""
        return self._request("/api/v1/query", query, {"time": _unix(at, "at")}, sink)

    def range(self, query: str, start: datetime, end: datetime, step: timedelta | float) -> QueryResult:
        """Evaluate `query` at every `step` from `start` to `end` (both included); a matrix."""
        seconds = step.total_seconds() if isinstance(step, timedelta) else float(step)
        if seconds <= 0:
            raise ValueError("step must be positive")
        params = {"start": _unix(start, "start"), "end": _unix(end, "end"), "step": repr(seconds)}
        return self._request("/api/v1/query_range", query, params)

    def _request(self, path: str, query: str, params: dict[str, str], sink: RowSink | None = None) -> QueryResult:
        form = {"query": query, "timeout": f"{self._server_timeout:g}s", **params}
        if self.query_stats:
            form["stats"] = "all"
        api = path.rsplit("/", 1)[-1]
        started = time.monotonic()
        size = 0
        try:
            response = self._send("POST", path, query, data=form_body(form), form=True)
            size = len(response.content)
            result = parse_answer(response.status_code, response.content, query, sink)
        except PrometheusError as error:
            self._log(path, query, started, error)
            self.stats.append(QueryStat(api, time.monotonic() - started, size, False,
                                        _shown(query) if self.query_stats else ""))
            raise
        self._log(path, query, started, result)
        took = time.monotonic() - started
        self.stats.append(_cost(api, took, size, query, result.stats) if self.query_stats
                          else QueryStat(api, took, size, True))
        return result

    def active_targets(self) -> list[Mapping[str, Any]]:
        """`/api/v1/targets?state=active`: what Prometheus scrapes, how often, under which labels.
        Thanos Query answers it too; a store without it (Mimir) raises `PrometheusError`."""
        what = "targets"
        started = time.monotonic()
        response = self._send("GET", "/api/v1/targets", what, params={"state": "active"})
        self.stats.append(QueryStat("targets", time.monotonic() - started, len(response.content),
                                    response.status_code == 200))
        try:
            envelope = json.loads(response.content)
            if response.status_code != 200 or envelope.get("status") != "success":
                raise ValueError(f"HTTP {response.status_code}")
            targets = envelope["data"]["activeTargets"]
            if not isinstance(targets, list):
                raise TypeError("activeTargets is not a list")
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise PrometheusError(ErrorKind.MALFORMED, f"no targets answer: {e}", status=response.status_code,
                                  query=what) from e
        return [t for t in targets if isinstance(t, Mapping)]

    def runtime(self) -> Runtime:
        """When this Prometheus started and last loaded its config (`/api/v1/status/runtimeinfo`),
        each None where it cannot say (a store without the endpoint, an error)."""
        what = "runtimeinfo"
        started = time.monotonic()
        try:
            response = self._send("GET", "/api/v1/status/runtimeinfo", what)
        except PrometheusError as error:
            logger.debug("Prometheus' runtime information unknown: %s", error)
            return Runtime()
        self.stats.append(QueryStat(what, time.monotonic() - started, len(response.content),
                                    response.status_code == 200))
        try:
            data = json.loads(response.content)["data"] if response.status_code == 200 else {}
        except (ValueError, KeyError, TypeError):
            return Runtime()
        return Runtime(_moment(data, "startTime"), _moment(data, "lastConfigTime"))

    def _send(self, method: str, path: str, query: str, *, data: str | None = None,
              params: Mapping[str, str] | None = None, form: bool = False) -> requests.Response:
        """One HTTP request within the connect and read timeouts; transport trouble as
        `PrometheusError`. With `form`, `data` is a form body already encoded (`form_body`)."""
        conn = self._connection
        headers = {**(conn.headers or {}), "Content-Type": FORM_TYPE} if form else conn.headers
        try:
            response: requests.Response = conn._session.request(
                method, f"{conn.url}{path}", data=data, params=params, headers=headers, auth=conn.auth,
                verify=conn._session.verify, timeout=(self.config.connect_timeout, self.config.read_timeout),
            )
            return response
        except requests.ConnectTimeout as e:
            raise PrometheusError(ErrorKind.TRANSPORT, f"no connection within {self.config.connect_timeout:g}s",
                                  query=query) from e
        except requests.ReadTimeout as e:
            raise PrometheusError(ErrorKind.TIMEOUT, f"no answer within {self.config.read_timeout:g}s",
                                  query=query) from e
        except requests.RequestException as e:
            raise PrometheusError(ErrorKind.TRANSPORT, f"{type(e).__name__}: {e}", query=query) from e

    @staticmethod
    def _log(path: str, query: str, started: float, outcome: QueryResult | PrometheusError) -> None:
        took = time.monotonic() - started
        if isinstance(outcome, PrometheusError):
            logger.debug("prometheus %s failed in %.3fs: %s; query: %s", path, took, outcome, query)
        else:
            logger.debug("prometheus %s %s: %d series, %d warnings in %.3fs; query: %s", path,
                         outcome.result_type, len(outcome.series), len(outcome.warnings), took, query)


def _cost(api: str, seconds: float, size: int, query: str, stats: Mapping[str, Any] | None) -> QueryStat:
    """A successful query's `QueryStat` with what Prometheus' `data.stats` says it cost."""
    samples = stats.get("samples") if isinstance(stats, Mapping) else None
    timings = stats.get("timings") if isinstance(stats, Mapping) else None

    def number(within: Any, key: str) -> float | None:
        value = within.get(key) if isinstance(within, Mapping) else None
        return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None

    read, peak = number(samples, "totalQueryableSamples"), number(samples, "peakSamples")
    return QueryStat(api, seconds, size, True, _shown(query), None if read is None else int(read),
                     None if peak is None else int(peak), number(timings, "evalTotalTime"))


_LITERAL = re.compile(r'"(?:[^"\\]+|\\.)*"')  # runs between escapes at once: 0.01 s a megabyte


def _shown(query: str) -> str:
    """The query as a stat keeps it: each string literal of 80 characters or more as `"…"`. A
    query naming thousands of pods is megabytes, and the stats of a cycle are kept until the
    next one: they held 2.6 MB of 56 MB live at 12,500 pods. The metrics and selectors stay."""
    return _LITERAL.sub(lambda m: '"…"' if len(m.group()) > 81 else m.group(), query)


def _unix(moment: datetime, name: str) -> str:
    """Unix seconds for the API. Naive datetimes are refused: the library reads them as local time."""
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise ValueError(f"{name} must be a timezone-aware datetime")
    return repr(moment.timestamp())
