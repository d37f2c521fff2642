"""Wait until the controllers have stopped writing what populate made, before a benchmark's first cycle.

Why: at 2,500 nodes the controller manager (20 requests a second to the apiserver, its default)
was still writing the status of populate's 3,750 Deployments and 10,000 ReplicaSets minutes after
a fixed wait: one run's first cycle met 20 MB of their watch events and two steady cycles 10-19 MB,
which the table then counted as the janitor's steady cost (CPU, bytes, RSS). So the wait lasts at
least the given seconds and then until a short watch of each kind brings next to nothing.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from kubernetes import client


def _writes(lister: Callable[..., Any], seconds: int) -> int:
    """The events one watch of a collection brings over `seconds`, from its current version."""
    version = lister(limit=1).metadata.resource_version
    answer = lister(watch=True, resource_version=version, timeout_seconds=seconds, _preload_content=False)
    try:
        return sum(chunk.count(b"\n") for chunk in answer.stream(65536))
    finally:
        answer.release_conn()


def wait(api: client.ApiClient, *, least: float, window: int = 20, quiet_below: int = 10, at_most: float = 1800.0,
         say: Callable[[str], None] = print) -> float:
    """Sleep `least` seconds, then watch Deployments and ReplicaSets `window` seconds at a time
    until each brings fewer than `quiet_below` events (or `at_most` seconds have gone); the
    seconds waited in all."""
    began = time.monotonic()
    time.sleep(least)
    apps = client.AppsV1Api(api)
    kinds = {"Deployments": apps.list_deployment_for_all_namespaces,
             "ReplicaSets": apps.list_replica_set_for_all_namespaces}
    while True:
        counts = {kind: _writes(lister, window) for kind, lister in kinds.items()}
        waited = time.monotonic() - began
        if all(n < quiet_below for n in counts.values()):
            say(f"controllers settled after {waited:.0f} s")
            return waited
        if waited > at_most:
            say(f"controllers still writing after {waited:.0f} s; measuring anyway")
            return waited
        say("controllers still writing: " + ", ".join(f"{n} {kind} events in {window} s" for kind, n in counts.items()))
