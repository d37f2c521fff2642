"""A kind whose requests get no answer, or answers it cannot use (observe/watch.py, observe/cache.py),
against the local list-and-watch server of test_watch_fresh.

- a watch whose head never comes is a failure within the client's read timeout: the kind is not
  synced and says why in words ("the apiserver did not answer the watch within 1s"), the list it
  has stands and only the watch is asked again, after a pause; once answered it is synced. The
  log says it once (WARNING) and once when it is read again (INFO); the client's outage does not
  count it (the apiserver answered everything else);
- a list that never answers: the same for the list, and a cache waits for it no longer than the
  timeout, not the seconds it was given;
- every watch answered 410 Gone (as a status, or as an ERROR event in a 200): the kind is listed
  again at once the first time, then fails, saying so once, with pauses between lists, never in
  a loop;
- a watch that ends at once, having delivered nothing, is opened again after pauses, never in a
  loop, and the kind stays synced meanwhile (what it holds is still its last version).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator

import pytest
from kubernetes import client
from test_watch_fresh import CONFIG_MAPS, Server, watching

from devenv.procs import wait_until
from janitor import errors, kubeapi
from janitor.observe.cache import ClusterCache
from janitor.observe.watch import KindWatch
from janitor.outage import Outage
from janitor.settings import ClusterSettings, Settings


@pytest.fixture
def server() -> Iterator[Server]:
    made = Server()
    yield made
    made.stop()


def test_a_watch_whose_head_never_comes_fails_within_the_timeout_said_once(
        server: Server, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="janitor.observe.watch")
    api = kubeapi.TimedApiClient(client.Configuration(host=server.url), timeout=(2.0, 1.0))
    api.outage = Outage()
    server.head_held.set()
    kind = KindWatch(api, CONFIG_MAPS, lambda item: item["metadata"]["name"], namespace="ns",
                     timeout=api.timeout).start()
    try:
        wait_until(lambda: kind.status().failing, timeout=10, what="the kind to fail")
        status = kind.status()
        assert not status.synced and status.error == "the apiserver did not answer the watch within 1s"
        wait_until(lambda: kind.status().failures >= 2, timeout=15, what="the watch asked again")
        assert server.lists == 1 and kind.values() == ["a"]  # the list stands; only the watch is asked again
        assert not api.outage.ongoing  # the kind says it; the apiserver answered all else
        server.head_held.clear()
        wait_until(lambda: kind.status().synced, timeout=15, what="synced once the watch is answered")
    finally:
        kind.stop()
    said = [(r.levelname, r.getMessage()) for r in caplog.records
            if r.name == "janitor.observe.watch" and r.levelno >= logging.INFO]
    assert [level for level, _ in said] == ["WARNING", "INFO"], said
    assert said[0][1].startswith("ConfigMap@ns: the apiserver did not answer the watch within 1s; the watch cache "
                                 "is not synced, so cycles do nothing until it is read again"), said
    assert said[1][1].startswith("ConfigMap@ns: read again, after "), said


def test_a_cache_waits_for_a_list_without_answer_no_longer_than_the_timeout(server: Server) -> None:
    server.list_held.set()
    settings = Settings(cluster=ClusterSettings(kinds=(CONFIG_MAPS,), namespaces=("ns",)))
    cache = ClusterCache(client.ApiClient(client.Configuration(host=server.url)), settings, timeout=(2.0, 1.0))
    try:
        cache.ensure(pods=False, nodes=False, oom=False)
        began = time.monotonic()
        assert not cache.wait(120)
        assert time.monotonic() - began < 60, "it waited for the list as long as it was allowed to"
        failing = {s.key: s.error for s in cache.failing()}
        assert failing.get("ConfigMap@ns") == "the apiserver did not answer the list within 1s", failing
        with pytest.raises(errors.KubeError, match="not synced: .*ConfigMap@ns .*did not answer the list within 1s"):
            cache.snapshot()
    finally:
        cache.stop()


@pytest.mark.parametrize("form", ["status", "event"])
def test_a_kind_whose_every_watch_is_answered_410_is_not_listed_in_a_loop(
        server: Server, form: str, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="janitor.observe.watch")
    (server.gone if form == "status" else server.gone_in_stream).set()
    kind = watching(server, fresh=30.0)
    try:
        wait_until(lambda: kind.status().failing, timeout=10, what="the kind to fail")
        status = kind.status()
        assert status.error.startswith("the apiserver answered 410 Gone again, to a watch from the version it had "
                                       "just listed"), status
        time.sleep(2)
        assert server.lists < 6, f"{server.lists} lists: listed again in a loop"
        server.gone.clear()
        server.gone_in_stream.clear()
        wait_until(lambda: kind.status().synced, timeout=40, what="synced once the watch is answered")
    finally:
        kind.stop()
    loud = [r.getMessage() for r in caplog.records
            if r.name == "janitor.observe.watch" and r.levelno >= logging.WARNING]
    assert len(loud) == 1 and "410 Gone again" in loud[0], loud  # said once, not at each try


def test_a_watch_that_ends_at_once_delivering_nothing_is_opened_again_after_pauses(server: Server) -> None:
    kind = watching(server, fresh=30.0)
    try:
        wait_until(lambda: kind.status().synced, timeout=10, what="synced")
        server.barren.set()
        opened = server.watches
        time.sleep(3)
        assert server.watches - opened < 8, f"{server.watches - opened} watches: opened again in a loop"
        assert kind.status().synced  # what it holds is still its last version
        server.barren.clear()
    finally:
        kind.stop()
