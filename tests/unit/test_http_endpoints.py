"""The health and metrics endpoints of the janitor and the node agent.

Aspects covered:
- a client that connects and sends nothing (a stalled probe, a port scanner) does not block
  /healthz, /readyz or /metrics for anyone else: the liveness probe must never restart a healthy
  janitor or agent because of one idle connection;
- many idle connections at once do not either.
"""

from __future__ import annotations

import datetime
import socket
import urllib.request
from collections.abc import Callable, Iterator

import pytest
from kubernetes import client
from prometheus_client import CollectorRegistry, Counter

from devenv.procs import free_port, wait_until
from janitor.daemon import serve_health_and_metrics
from janitor.node_agent.agent import AgentSettings, NodeAgent


def janitor_endpoints(port: int) -> None:
    registry = CollectorRegistry()
    Counter("janitor_cycles", "cycles", registry=registry).inc()
    serve_health_and_metrics(registry, port, lambda: (True, "ok"), lambda: (True, "ready"))


def agent_endpoints(port: int) -> None:
    agent = NodeAgent(client.ApiClient(), AgentSettings(node="gpu-node-1", interval=datetime.timedelta(seconds=10)))
    agent.serve(port)


def get(url: str) -> tuple[int, str]:
    with urllib.request.urlopen(url, timeout=5) as resp:
        return resp.status, resp.read().decode()


@pytest.fixture(params=[janitor_endpoints, agent_endpoints], ids=["janitor", "node-agent"])
def endpoints(request: pytest.FixtureRequest) -> Iterator[int]:
    port = free_port()
    start: Callable[[int], None] = request.param
    start(port)
    wait_until(lambda: get(f"http://127.0.0.1:{port}/healthz")[0] == 200, timeout=10, what="the endpoints")
    yield port


def test_an_idle_connection_does_not_block_the_probes(endpoints: int) -> None:
    idle = [socket.create_connection(("127.0.0.1", endpoints), timeout=5) for _ in range(5)]
    try:
        assert get(f"http://127.0.0.1:{endpoints}/healthz")[0] == 200
        status, text = get(f"http://127.0.0.1:{endpoints}/metrics")
        assert status == 200 and "# TYPE" in text
    finally:
        for s in idle:
            s.close()


def test_a_half_sent_request_does_not_block_the_probes(endpoints: int) -> None:
    stalled = socket.create_connection(("127.0.0.1", endpoints), timeout=5)
    try:
        stalled.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")  # and never the blank line
        assert get(f"http://127.0.0.1:{endpoints}/healthz")[0] == 200
    finally:
        stalled.close()
