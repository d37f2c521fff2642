"""Prometheus' answers, as the janitor reads them: a result, or an error with a kind.

The janitor must never mistake "could not read" for "idle" (DESIGN.md, observe), so every answer
of the HTTP API becomes exactly one of two things: a `QueryResult` (possibly empty, possibly
`partial`) or a `PrometheusError` with a `kind`. There is no third outcome such as an empty list
standing in for an error. Pure: bytes in, values out (`prometheus.PrometheusSource` sends).
"""

from __future__ import annotations

import enum
import json
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

MESSAGE_MAX = 300


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
    stats: Mapping[str, Any] | None = None
    """Prometheus' own statistics of the query (`data.stats`: `timings`, `samples`), present only
    when the request asked for them (`PrometheusSource(query_stats=True)`)."""

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
        stats = data.get("stats")
    except (KeyError, TypeError, ValueError, IndexError) as e:
        raise PrometheusError(ErrorKind.MALFORMED, f"unexpected answer shape: {e!r}", status=status,
                              query=query) from e
    return QueryResult(query, result_type, series, warnings, infos, stats if isinstance(stats, dict) else None)


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
