"""The freshness bound of a watch against the sandbox's real apiserver: a quiet kind's watch is
ended by the server within `watch_seconds` (its timeoutSeconds), and opened again from its version,
so a watch holding nothing new stays synced within `fresh_seconds` and is never listed again.

Aspects covered:
- a watch on a namespace where nothing happens, ended every 8-10 s by the server and held to a
  15 s bound, is still synced after 45 s, listed once, opened again several times (the documented
  bound is the same shape: 240 s and 270 s). The apiserver sends a watch no bookmark while nothing
  of the kind changed anywhere since it began (a bookmark's version must pass the watch's), so on a
  quiet sandbox these watches end without a word: a watch that lasted the client's timeout (8 s
  here, as 30 s does the daemon's 192-240 s watches) is word enough.
"""

from __future__ import annotations

import time

from kubernetes import client

from janitor.decide.model import ResourceKind
from janitor.observe.watch import KindWatch

CONFIG_MAPS = ResourceKind("", "v1", "ConfigMap", "configmaps")


def test_a_quiet_watch_ended_by_the_server_stays_fresh_without_a_list(kube: client.ApiClient, namespace: str) -> None:
    kind = KindWatch(kube, CONFIG_MAPS, lambda item: item["metadata"]["name"], namespace=namespace,
                     fresh_seconds=15.0, watch_seconds=10.0, timeout=(5.0, 8.0)).start()
    try:
        deadline = time.monotonic() + 20
        while not kind.status().synced and time.monotonic() < deadline:
            time.sleep(0.2)
        assert kind.status().synced
        time.sleep(45)
        status = kind.status()
        assert status.synced and status.lists == 1 and status.reopened >= 3, status
    finally:
        kind.stop()
