"""A thin, strict wrapper over `prometheus-api-client` for the evidence code.

The janitor must never mistake "could not read" for "idle" (DESIGN.md, observe). So this module
turns every Prometheus answer into exactly one of two things: a `QueryResult` (possibly empty,
possibly `partial`) or a `PrometheusError` with a `kind`. There is no third outcome such as an
empty list standing in for an error.

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

import enum
import json
import logging
import math
import re
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Literal

import requests
from prometheus_api_client import PrometheusConnect
from urllib3.util.retry import Retry

logger = logging.getLogger(__name__)

MESSAGE_MAX = 300
_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
_METRIC_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_MATCHER_TEXT = re.compile(r"\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*(.*?)\s*")

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
    """

    pod: str = "pod"
    namespace: str = "namespace"
    container: str = "container"
    hostname: str = "Hostname"

    def __post_init__(self) -> None:
        for name in (self.pod, self.namespace, self.container, self.hostname):
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
SERVICE_MONITOR = LabelMap(pod="exported_pod", namespace="exported_namespace", container="exported_container")

# ----------------------------------------------------------------------------- results and errors


class ErrorKind(enum.StrEnum):
    BAD_DATA = "bad_data"  # 400: the query or a parameter is wrong; retrying will not help
    EXECUTION = "execution"  # 422: valid PromQL that cannot be evaluated (e.g. many-to-many)
    TIMEOUT = "timeout"  # 503 timeout/canceled, or no answer within the read timeout
    UNAVAILABLE = "unavailable"  # 503 unavailable (e.g. a querier without stores)
    INTERNAL = "internal"  # 500 internal, and any errorType this code does not know
    TRANSPORT = "transport"  # no HTTP answer at all: refused, DNS, TLS, connect timeout
    MALFORMED = "malformed"  # an answer that is not a Prometheus API envelope (proxy page…)


_TEMPORARY = {ErrorKind.TIMEOUT, ErrorKind.UNAVAILABLE, ErrorKind.TRANSPORT, ErrorKind.INTERNAL}
_ERROR_TYPES = {
    "bad_data": ErrorKind.BAD_DATA, "execution": ErrorKind.EXECUTION, "timeout": ErrorKind.TIMEOUT,
    "canceled": ErrorKind.TIMEOUT, "unavailable": ErrorKind.UNAVAILABLE,
}


class PrometheusError(Exception):
    """A query gave no usable answer. Never means "no data": callers treat the signal as unknown."""

    def __init__(
        self, kind: ErrorKind, message: str, *, status: int | None = None, error_type: str | None = None,
        query: str = "",
    ) -> None:
        self.kind = kind
        self.message = _cut(message)
        self.status = status
        self.error_type = error_type
        self.query = query
        code = f" (HTTP {status})" if status is not None else ""
        super().__init__(f"Prometheus {kind.value}{code}: {self.message}")

    @property
    def temporary(self) -> bool:
        """Worth trying again next cycle (as opposed to a query the janitor got wrong)."""
        return self.kind in _TEMPORARY


@dataclass(frozen=True, slots=True)
class Series:
    """One series: its labels and its samples `(unix seconds, value)`, a single one for a vector.

    Values are floats as Prometheus sent them, NaN and ±Inf included; `non_finite` flags those so
    the evidence code can treat the series as unknown rather than as a number.
    """

    labels: Mapping[str, str]
    samples: tuple[tuple[float, float], ...]
    non_finite: bool = False

    @property
    def value(self) -> float:
        """The latest sample's value (the only one for an instant query)."""
        return self.samples[-1][1]


@dataclass(frozen=True, slots=True)
class QueryResult:
    """A successful answer. Empty `series` is a real "no such series", distinct from an error.

    `partial` is true whenever Prometheus (or Thanos/Mimir in front of it) sent warnings: the data
    may lack some stores, so no destructive decision may rest on it.
    """

    query: str
    result_type: Literal["vector", "matrix", "scalar"]
    series: tuple[Series, ...]
    warnings: tuple[str, ...] = ()
    infos: tuple[str, ...] = ()

    @property
    def partial(self) -> bool:
        return bool(self.warnings)

    @property
    def non_finite(self) -> bool:
        return any(s.non_finite for s in self.series)


RowSink = Callable[[Mapping[str, str], float], None]
"""Takes the rows of a vector answer one by one as they are decoded: a series' labels and value."""


class _BadRow(Exception):
    """A row a sink was handed could not be read; the answer is malformed."""


def _rows_to(sink: RowSink) -> Callable[[list[tuple[str, Any]]], Any]:
    """A decoder hook that hands each vector row to `sink` and keeps nothing of it.

    Why: the usage answers hold a row per GPU and statistic at tens of thousands of pods, and
    decoding one whole (dicts per row and per label set, then a `Series` each) took about eight
    times its size in memory at once, the daemon's peak. The stdlib decoder still does the parsing;
    it calls this for every object, innermost first, so a row's labels arrive already decoded.
    A row is an object of exactly `metric` (an object) and `value` (an array): a label set never
    has an array value, so a label named `metric` or `value` is not taken for a row."""
    def hook(pairs: list[tuple[str, Any]]) -> Any:
        if len(pairs) == 2:
            found = dict(pairs)
            labels, pair = found.get("metric"), found.get("value")
            if type(pair) is list and isinstance(labels, dict):
                try:
                    _, value = pair
                    if not all(type(v) is str for v in labels.values()):
                        labels = {str(k): str(v) for k, v in labels.items()}
                    sink(labels, float(value))
                except (TypeError, ValueError) as e:
                    raise _BadRow(f"a row that is not a sample: {e!r}") from e
                return None
            return found
        return dict(pairs)
    return hook


def parse_answer(status: int, body: bytes, query: str, sink: RowSink | None = None) -> QueryResult:
    """Turn one HTTP answer of `/api/v1/query[_range]` into a result or raise `PrometheusError`.

    With `sink`, the rows of a vector answer go to it as they are decoded and the result holds no
    series; warnings and errors are known only once the whole answer is read, so the caller must
    still look at the result before trusting what its sink gathered."""
    try:
        envelope = json.loads(body, object_pairs_hook=_rows_to(sink)) if sink is not None else json.loads(body)
    except _BadRow as e:
        raise PrometheusError(ErrorKind.MALFORMED, str(e), status=status, query=query) from e
    except ValueError:
        envelope = None
    if not isinstance(envelope, dict) or envelope.get("status") not in ("success", "error"):
        snippet = body[:80].decode("utf-8", "replace").strip()
        kind = ErrorKind.UNAVAILABLE if status >= 500 else ErrorKind.MALFORMED
        raise PrometheusError(kind, f"not a Prometheus API answer: {snippet!r}", status=status, query=query)
    if envelope["status"] == "error":
        error_type = str(envelope.get("errorType") or "")
        kind = _ERROR_TYPES.get(error_type, ErrorKind.INTERNAL)
        message = str(envelope.get("error") or f"errorType {error_type!r} without a message")
        raise PrometheusError(kind, message, status=status, error_type=error_type, query=query)
    if not 200 <= status < 300:
        raise PrometheusError(ErrorKind.MALFORMED, "status success on a non-2xx answer", status=status, query=query)
    try:
        data = envelope["data"]
        result_type = data["resultType"]
        streamed = sink is not None and result_type == "vector"
        if streamed and not all(row is None for row in data["result"]):
            raise ValueError("a vector row that is not a sample")
        series = () if streamed else _parse_series(result_type, data["result"])
        warnings = tuple(str(w) for w in envelope.get("warnings") or ())
        infos = tuple(str(i) for i in envelope.get("infos") or ())
    except (KeyError, TypeError, ValueError, IndexError) as e:
        raise PrometheusError(ErrorKind.MALFORMED, f"unexpected answer shape: {e!r}", status=status,
                              query=query) from e
    return QueryResult(query, result_type, series, warnings, infos)


def _parse_series(result_type: str, result: Any) -> tuple[Series, ...]:
    if result_type == "scalar":
        return (_series({}, [result]),)
    if result_type == "vector":
        return tuple([_sample(item["metric"], item["value"]) for item in result])
    if result_type == "matrix":
        return tuple(_series(item["metric"], item["values"]) for item in result)
    raise ValueError(f"result type {result_type!r} is not supported")


def _series(labels: Mapping[str, Any], pairs: Iterable[Any]) -> Series:
    if not isinstance(labels, Mapping):
        raise TypeError("metric is not an object")
    samples = tuple((float(t), float(v)) for t, v in pairs)
    # The decoded object itself when it holds only strings, as it does: an answer of 100,000 series
    # would otherwise be held twice at its peak.
    plain = all(type(v) is str for v in labels.values())
    return Series(
        labels=labels if plain else {str(k): str(v) for k, v in labels.items()},
        samples=samples,
        non_finite=any(not math.isfinite(v) for _, v in samples),
    )


def _sample(labels: Mapping[str, Any], pair: Any) -> Series:
    """`_series` of one sample, the shape of every row of an instant query (the usage queries'
    answers hold hundreds of thousands)."""
    if type(labels) is not dict or not all(type(v) is str for v in labels.values()):
        return _series(labels, [pair])
    t, v = pair
    value = float(v)
    return Series(labels, ((float(t), value),), not math.isfinite(value))


def _cut(text: str) -> str:
    return text if len(text) <= MESSAGE_MAX else text[: MESSAGE_MAX - 1] + "…"


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
    """One request to Prometheus: which API, how long it took, how many bytes came back."""

    api: str  # "query", "query_range", "targets"
    seconds: float
    bytes: int
    ok: bool


class PrometheusSource:
    """Instant and range queries with whole-envelope reading, typed errors and explicit timeouts.

    `stats` records every request made, for the query-time metrics and the scale benchmark."""

    def __init__(self, config: PrometheusConfig, *, session: requests.Session | None = None) -> None:
        self.config = config
        self.stats: list[QueryStat] = []
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
        started = time.monotonic()
        size = 0
        try:
            response = self._send("POST", path, query, data=form)
            size = len(response.content)
            result = parse_answer(response.status_code, response.content, query, sink)
        except PrometheusError as error:
            self._log(path, query, started, error)
            self.stats.append(QueryStat(path.rsplit("/", 1)[-1], time.monotonic() - started, size, False))
            raise
        self._log(path, query, started, result)
        self.stats.append(QueryStat(path.rsplit("/", 1)[-1], time.monotonic() - started, size, True))
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

    def _send(self, method: str, path: str, query: str, *, data: Mapping[str, str] | None = None,
              params: Mapping[str, str] | None = None) -> requests.Response:
        """One HTTP request within the connect and read timeouts; transport trouble as `PrometheusError`."""
        conn = self._connection
        try:
            response: requests.Response = conn._session.request(
                method, f"{conn.url}{path}", data=data, params=params, headers=conn.headers, auth=conn.auth,
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


def _unix(moment: datetime, name: str) -> str:
    """Unix seconds for the API. Naive datetimes are refused: the library reads them as local time."""
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise ValueError(f"{name} must be a timezone-aware datetime")
    return repr(moment.timestamp())
