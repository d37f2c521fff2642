"""`janitor.observe.prometheus` without a real Prometheus.

Covered:
- selectors: label values with quotes, backslashes and newlines are escaped; extra matchers are
  appended; bad label and metric names are refused; matchers parse from settings text;
  `LabelMap` maps logical labels for both dcgm label styles;
- answers, served over real HTTP by a tiny local server with the envelopes Prometheus 2.42 sends
  (reference §4.3): success vector/matrix/scalar, NaN/Inf flagged, warnings -> partial, 400
  bad_data, 422 execution, 503 timeout, an unknown errorType, non-JSON bodies, a wrong shape;
- the request itself: POST form body with the `at` time, bearer token and extra headers, the
  (connect, read) timeout, naive datetimes refused, retries only where configured.
The server stands in for error shapes only; tests/integration asks the real one.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from hypothesis import given
from hypothesis import strategies as st

from janitor.observe.prometheus import (
    SERVICE_MONITOR,
    ErrorKind,
    LabelMap,
    Matcher,
    PrometheusConfig,
    PrometheusError,
    PrometheusSource,
    form_body,
    quote,
    selector,
)

AT = datetime(2026, 11, 20, 12, 0, 0, tzinfo=timezone.utc)

# --------------------------------------------------------------------------- selectors


@pytest.mark.parametrize(
    ("value", "literal"),
    [
        pytest.param("train-0", '"train-0"', id="plain"),
        pytest.param('we"ird', '"we\\"ird"', id="quote"),
        pytest.param("a\\b", '"a\\\\b"', id="backslash"),
        pytest.param('\\"', '"\\\\\\""', id="backslash-then-quote"),
        pytest.param("two\nlines", '"two\\nlines"', id="newline"),
        pytest.param("", '""', id="empty"),
    ],
)
def test_quote_escapes_backslash_quote_newline(value: str, literal: str) -> None:
    assert quote(value) == literal
    # PromQL string escapes are JSON's for these characters: reading the literal gives the value back.
    assert json.loads(literal) == value


def test_selector_with_extra_matchers() -> None:
    text = selector(
        "DCGM_FI_DEV_GPU_UTIL",
        SERVICE_MONITOR.matchers(namespace="ml", pod='x"}or vector(1)'),
        extra=[Matcher("cluster", "mn2")],
    )
    assert text == (
        'DCGM_FI_DEV_GPU_UTIL{exported_namespace="ml",exported_pod="x\\"}or vector(1)",cluster="mn2"}'
    )


def test_selector_operators_and_bare_forms() -> None:
    assert selector("up") == "up"
    assert selector("", [Matcher("__name__", "a|b", "=~")]) == '{__name__=~"a|b"}'
    assert selector("m", [Matcher("exported_pod", "", "!="), Matcher("ns", "k.*", "!~")]) == (
        'm{exported_pod!="",ns!~"k.*"}'
    )


@pytest.mark.parametrize(
    "build",
    [
        pytest.param(lambda: selector("bad-metric"), id="metric-name"),
        pytest.param(lambda: selector(""), id="nothing"),
        pytest.param(lambda: Matcher("bad label", "x"), id="label-name"),
        pytest.param(lambda: Matcher("l", "x", "=="), id="operator"),  # type: ignore[arg-type]
        pytest.param(lambda: LabelMap(pod="exported-pod"), id="labelmap-name"),
        pytest.param(lambda: SERVICE_MONITOR.matchers(node="n1"), id="logical-name"),
        pytest.param(lambda: Matcher.parse("cluster"), id="parse-no-op"),
        pytest.param(lambda: Matcher.parse('cluster="mn2'), id="parse-unclosed"),
    ],
)
def test_bad_names_are_refused(build) -> None:
    with pytest.raises(ValueError):
        build()


@pytest.mark.parametrize(
    ("text", "matcher"),
    [
        ('cluster="mn2"', Matcher("cluster", "mn2")),
        ("cluster=mn2", Matcher("cluster", "mn2")),
        (' region =~ "eu-.*" ', Matcher("region", "eu-.*", "=~")),
        ('tenant!="a\\"b"', Matcher("tenant", 'a"b', "!=")),
    ],
)
def test_matcher_parse(text: str, matcher: Matcher) -> None:
    assert Matcher.parse(text) == matcher


def test_label_map_styles() -> None:
    assert LabelMap().matchers(pod="p", namespace="n") == (Matcher("pod", "p"), Matcher("namespace", "n"))
    assert SERVICE_MONITOR.label("container") == "exported_container"
    assert LabelMap(hostname="hostname").matchers(hostname="gpu-1") == (Matcher("hostname", "gpu-1"),)


# --------------------------------------------------------------------------- a tiny local server


@dataclass
class Answer:
    status: int
    body: bytes
    content_type: str = "application/json"


@dataclass
class Seen:
    method: str
    path: str
    form: dict[str, str]
    headers: dict[str, str]


@dataclass
class FakePrometheus:
    url: str
    answers: list[Answer] = field(default_factory=list)  # the last one repeats
    seen: list[Seen] = field(default_factory=list)
    release: threading.Event = field(default_factory=threading.Event)
    hang: bool = False

    def answer(self, status: int, envelope: object | bytes, content_type: str = "application/json") -> None:
        body = envelope if isinstance(envelope, bytes) else json.dumps(envelope).encode()
        self.answers.append(Answer(status, body, content_type))


@pytest.fixture
def fake() -> Iterator[FakePrometheus]:
    state: FakePrometheus

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            form = dict(urllib.parse.parse_qsl(self.rfile.read(length).decode()))
            state.seen.append(Seen("POST", self.path, form, dict(self.headers.items())))
            if state.hang:
                state.release.wait(10)
            answer = state.answers.pop(0) if len(state.answers) > 1 else state.answers[0]
            try:
                self.send_response(answer.status)
                self.send_header("Content-Type", answer.content_type)
                self.send_header("Content-Length", str(len(answer.body)))
                self.end_headers()
                self.wfile.write(answer.body)
            except OSError:  # the client gave up (read timeout test)
                pass

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    state = FakePrometheus(url=f"http://127.0.0.1:{server.server_port}/prom/")
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    yield state
    state.release.set()
    server.shutdown()
    server.server_close()


def source(fake: FakePrometheus, **config: object) -> PrometheusSource:
    return PrometheusSource(PrometheusConfig(url=fake.url, **config))  # type: ignore[arg-type]


def success(result_type: str, result: object, **extra: object) -> dict[str, object]:
    return {"status": "success", "data": {"resultType": result_type, "result": result}, **extra}


# --------------------------------------------------------------------------- answers


def test_vector_answer(fake: FakePrometheus, caplog: pytest.LogCaptureFixture) -> None:
    fake.answer(200, success("vector", [
        {"metric": {"exported_pod": "p", "gpu": "0"}, "value": [1795313821.091, "93"]},
        {"metric": {"exported_pod": "p", "gpu": "1"}, "value": [1795313821.091, "0"]},
    ]))
    with caplog.at_level(logging.DEBUG, logger="janitor.observe.prometheus"):
        result = source(fake).instant("DCGM_FI_DEV_GPU_UTIL", AT)
    assert result.result_type == "vector"
    assert [(s.labels["gpu"], s.value) for s in result.series] == [("0", 93.0), ("1", 0.0)]
    assert result.series[0].samples == ((1795313821.091, 93.0),)
    assert not result.partial and result.warnings == () and not result.non_finite
    assert "2 series" in caplog.text and "DCGM_FI_DEV_GPU_UTIL" in caplog.text


def test_empty_vector_is_a_result(fake: FakePrometheus) -> None:
    fake.answer(200, success("vector", []))
    result = source(fake).instant("nonexistent_metric", AT)
    assert result.series == () and result.result_type == "vector" and not result.partial


def test_matrix_and_scalar_answers(fake: FakePrometheus) -> None:
    fake.answer(200, success("matrix", [{"metric": {"job": "self"},
                                         "values": [[1795313323, "1"], [1795313328, "0.5"]]}]))
    fake.answer(200, success("scalar", [1795313323.617, "1"]))
    prom = source(fake)
    matrix = prom.range("up", AT - timedelta(minutes=5), AT, timedelta(seconds=5))
    assert matrix.result_type == "matrix"
    assert matrix.series[0].samples == ((1795313323.0, 1.0), (1795313328.0, 0.5))
    assert matrix.series[0].value == 0.5
    scalar = prom.instant("scalar(vector(1))", AT)
    assert scalar.result_type == "scalar" and scalar.series[0].labels == {} and scalar.series[0].value == 1.0


def test_nan_and_inf_are_kept_and_flagged(fake: FakePrometheus) -> None:
    fake.answer(200, success("vector", [
        {"metric": {"gpu": "0"}, "value": [1, "NaN"]},
        {"metric": {"gpu": "1"}, "value": [1, "+Inf"]},
        {"metric": {"gpu": "2"}, "value": [1, "-Inf"]},
        {"metric": {"gpu": "3"}, "value": [1, "7"]},
    ]))
    result = source(fake).instant("x", AT)
    values = [s.value for s in result.series]
    assert values[0] != values[0] and values[1:] == [float("inf"), float("-inf"), 7.0]
    assert [s.non_finite for s in result.series] == [True, True, True, False]
    assert result.non_finite


def test_warnings_make_a_partial_result(fake: FakePrometheus) -> None:
    warning = "No StoreAPIs matched for this query"
    fake.answer(200, success("vector", [{"metric": {}, "value": [1, "1"]}], warnings=[warning], infos=["i"]))
    result = source(fake).instant("up", AT)
    assert result.partial and result.warnings == (warning,) and result.infos == ("i",)
    assert len(result.series) == 1


@pytest.mark.parametrize(
    ("status", "envelope", "kind", "text"),
    [
        pytest.param(400, {"status": "error", "errorType": "bad_data",
                           "error": 'invalid parameter "query": 1:5: parse error: unclosed left parenthesis'},
                     ErrorKind.BAD_DATA, "unclosed left parenthesis", id="400-bad_data"),
        pytest.param(422, {"status": "error", "errorType": "execution",
                           "error": "found duplicate series for the match group {} on the right hand-side"},
                     ErrorKind.EXECUTION, "duplicate series", id="422-execution"),
        pytest.param(503, {"status": "error", "errorType": "timeout",
                           "error": "query timed out in expression evaluation"},
                     ErrorKind.TIMEOUT, "timed out", id="503-timeout"),
        pytest.param(503, {"status": "error", "errorType": "unavailable", "error": "no store"},
                     ErrorKind.UNAVAILABLE, "no store", id="503-unavailable"),
        pytest.param(500, {"status": "error", "errorType": "something_new", "error": "boom"},
                     ErrorKind.INTERNAL, "boom", id="unknown-errorType"),
        pytest.param(200, {"status": "error", "errorType": "execution", "error": "odd but an error"},
                     ErrorKind.EXECUTION, "odd but", id="error-on-200"),
        pytest.param(502, b"<html><body>502 Bad Gateway</body></html>",
                     ErrorKind.UNAVAILABLE, "Bad Gateway", id="proxy-html-502"),
        pytest.param(200, b"<html>login page</html>", ErrorKind.MALFORMED, "login page", id="html-200"),
        pytest.param(200, {"status": "success", "data": {"resultType": "vector"}},
                     ErrorKind.MALFORMED, "shape", id="no-result"),
        pytest.param(200, {"status": "success",
                           "data": {"resultType": "vector", "result": [{"metric": {}, "value": [1, "x"]}]}},
                     ErrorKind.MALFORMED, "shape", id="bad-value"),
        pytest.param(200, success("string", [1, "hello"]), ErrorKind.MALFORMED, "string", id="string-result"),
        pytest.param(200, {"data": []}, ErrorKind.MALFORMED, "not a Prometheus", id="no-status"),
    ],
)
def test_errors_are_typed(fake: FakePrometheus, status: int, envelope: object, kind: ErrorKind, text: str) -> None:
    fake.answer(status, envelope, "text/html" if isinstance(envelope, bytes) else "application/json")
    with pytest.raises(PrometheusError) as caught:
        source(fake).instant("q", AT)
    assert caught.value.kind == kind
    assert caught.value.status == status
    assert text in caught.value.message and text in str(caught.value)
    assert caught.value.query == "q"


def test_long_server_messages_are_cut(fake: FakePrometheus) -> None:
    fake.answer(422, {"status": "error", "errorType": "execution", "error": "x" * 5000})
    with pytest.raises(PrometheusError) as caught:
        source(fake).instant("q", AT)
    assert len(caught.value.message) <= 300 and not caught.value.temporary


# --------------------------------------------------------------------------- requests


def test_request_is_a_post_form_with_time_auth_and_headers(fake: FakePrometheus) -> None:
    fake.answer(200, success("vector", []))
    prom = source(fake, bearer_token="s3cret", headers={"X-Scope-OrgID": "mn2"}, read_timeout=20)
    prom.instant('up{job="a b"}', AT)
    prom.range("up", AT - timedelta(minutes=10), AT, 30)
    instant, ranged = fake.seen
    assert (instant.method, instant.path) == ("POST", "/prom/api/v1/query")
    assert instant.form == {"query": 'up{job="a b"}', "time": repr(AT.timestamp()), "timeout": "19s"}
    assert instant.headers["Authorization"] == "Bearer s3cret"
    assert instant.headers["X-Scope-OrgID"] == "mn2"
    assert instant.headers["Content-Type"] == "application/x-www-form-urlencoded"
    assert ranged.path == "/prom/api/v1/query_range"
    assert float(ranged.form["start"]) == AT.timestamp() - 600 and float(ranged.form["end"]) == AT.timestamp()
    assert float(ranged.form["step"]) == 30.0


@given(st.dictionaries(st.text(max_size=8), st.text(max_size=40), max_size=4),
       st.lists(st.from_regex(r"[a-z0-9.-]{1,20}", fullmatch=True), max_size=30))
def test_a_form_body_is_what_urlencode_writes(form: dict[str, str], names: list[str]) -> None:
    form = {**form, "query": 'max by (pod) (up{pod=~"' + "|".join(names) + '"}[5m] @ 1)'}
    assert form_body(form) == urllib.parse.urlencode(form)
    assert dict(urllib.parse.parse_qsl(form_body(form), keep_blank_values=True)) == form


def test_naive_datetimes_and_bad_steps_are_refused(fake: FakePrometheus) -> None:
    fake.answer(200, success("vector", []))
    prom = source(fake)
    with pytest.raises(ValueError, match="timezone-aware"):
        prom.instant("up", datetime(2026, 1, 1))
    with pytest.raises(ValueError, match="step"):
        prom.range("up", AT - timedelta(minutes=1), AT, timedelta(0))
    assert fake.seen == []


def test_no_answer_within_read_timeout_is_a_timeout(fake: FakePrometheus) -> None:
    fake.hang = True
    fake.answer(200, success("vector", []))
    started = time.monotonic()
    with pytest.raises(PrometheusError) as caught:
        source(fake, read_timeout=0.3).instant("up", AT)
    assert caught.value.kind == ErrorKind.TIMEOUT and caught.value.temporary
    assert time.monotonic() - started < 3
    assert len(fake.seen) == 1  # a read timeout is never retried


def test_no_retry_by_default(fake: FakePrometheus) -> None:
    fake.answer(503, {"status": "error", "errorType": "unavailable", "error": "busy"})
    with pytest.raises(PrometheusError) as caught:
        source(fake).instant("up", AT)
    assert caught.value.kind == ErrorKind.UNAVAILABLE and caught.value.status == 503
    assert len(fake.seen) == 1


def test_configured_retries_then_the_last_answer_counts(fake: FakePrometheus) -> None:
    fake.answer(503, {"status": "error", "errorType": "unavailable", "error": "busy"})
    fake.answer(503, {"status": "error", "errorType": "unavailable", "error": "still busy"})
    fake.answer(503, {"status": "error", "errorType": "timeout", "error": "gave up"})
    with pytest.raises(PrometheusError) as caught:
        source(fake, retries=2, retry_backoff=0).instant("up", AT)
    assert caught.value.kind == ErrorKind.TIMEOUT and caught.value.message == "gave up"
    assert len(fake.seen) == 3


def test_a_retry_can_succeed(fake: FakePrometheus) -> None:
    fake.answer(502, b"bad gateway", "text/plain")
    fake.answer(200, success("vector", []))
    assert source(fake, retries=1, retry_backoff=0).instant("up", AT).series == ()
    assert len(fake.seen) == 2


def test_config_is_validated() -> None:
    with pytest.raises(ValueError):
        PrometheusConfig(url="http://x", connect_timeout=0)
    with pytest.raises(ValueError):
        PrometheusConfig(url="http://x", retries=-1)


# --------------------------------------------------------------------------- Prometheus' own query statistics

QUERY_STATS = {
    "timings": {"evalTotalTime": 0.25, "resultSortTime": 0, "queryPreparationTime": 0.01, "innerEvalTime": 0.2,
                "execQueueTime": 0.001, "execTotalTime": 0.26},
    "samples": {"totalQueryableSamplesPerStep": [[1795313821, 48000]], "totalQueryableSamples": 48000,
                "peakSamples": 9600},
}


def test_query_stats_are_not_asked_by_default(fake: FakePrometheus) -> None:
    fake.answer(200, success("vector", []))
    prom = source(fake)
    prom.instant("up", AT)
    assert "stats" not in fake.seen[0].form
    (stat,) = prom.stats
    assert (stat.query, stat.samples, stat.peak_samples, stat.eval_seconds) == ("", None, None, None)


def test_query_stats_asked_and_recorded(fake: FakePrometheus) -> None:
    rows = [{"metric": {"pod": "p", "gpu": "0"}, "value": [1795313821.091, "93"]}]
    fake.answer(200, {"status": "success", "data": {"resultType": "vector", "result": rows, "stats": QUERY_STATS}})
    prom = PrometheusSource(PrometheusConfig(url=fake.url), query_stats=True)
    seen: list[tuple[dict[str, str], float]] = []
    result = prom.instant("max_over_time(x[4h:15s])", AT, lambda labels, value: seen.append((dict(labels), value)))
    prom.range("up", AT - timedelta(minutes=10), AT, 30)
    assert [s.form["stats"] for s in fake.seen] == ["all", "all"]
    assert seen == [({"pod": "p", "gpu": "0"}, 93.0)]  # the rows still stream past, beside the statistics
    assert result.stats == QUERY_STATS
    instant, ranged = prom.stats
    assert (instant.api, instant.query, instant.samples, instant.peak_samples, instant.eval_seconds) == (
        "query", "max_over_time(x[4h:15s])", 48000, 9600, 0.25)
    assert ranged.api == "query_range" and ranged.samples == 48000 and ranged.ok


def test_a_query_naming_thousands_of_pods_is_kept_in_its_stat_without_the_names(fake: FakePrometheus) -> None:
    """The stats of a cycle live until the next one; the query sent is whole, the stat keeps its shape."""
    names = "|".join(f"train-{i}-0" for i in range(5000))
    query = f'max by (pod) (max_over_time(DCGM_FI_DEV_GPU_UTIL{{namespace="team-a",pod=~"{names}"}}[4h:15s]))'
    fake.answer(200, success("vector", []))
    fake.answer(422, {"status": "error", "errorType": "execution", "error": "too many samples"})
    prom = PrometheusSource(PrometheusConfig(url=fake.url), query_stats=True)
    prom.instant(query, AT)
    with pytest.raises(PrometheusError):
        prom.instant(query, AT)
    assert [f.form["query"] for f in fake.seen] == [query, query]
    shown = 'max by (pod) (max_over_time(DCGM_FI_DEV_GPU_UTIL{namespace="team-a",pod=~"…"}[4h:15s]))'
    assert [(s.query, s.ok) for s in prom.stats] == [(shown, True), (shown, False)]


def test_query_stats_missing_or_odd_are_none(fake: FakePrometheus) -> None:
    fake.answer(200, success("vector", []))  # a server that says nothing of its cost
    fake.answer(200, {"status": "success", "data": {"resultType": "vector", "result": [],
                                                    "stats": {"samples": {"totalQueryableSamples": "many"}}}})
    fake.answer(422, {"status": "error", "errorType": "execution",
                      "error": "query processing would load too many samples into memory in query execution"})
    prom = PrometheusSource(PrometheusConfig(url=fake.url), query_stats=True)
    prom.instant("a", AT)
    prom.instant("b", AT)
    with pytest.raises(PrometheusError):
        prom.instant("c", AT)
    assert [(s.query, s.ok, s.samples, s.peak_samples, s.eval_seconds) for s in prom.stats] == [
        ("a", True, None, None, None), ("b", True, None, None, None), ("c", False, None, None, None)]
