"""One request to the apiserver, for `observe` and `act` alike, with failures as `KubeError`.

Both edges speak to the API through the generic `ApiClient.call_api`, so custom resources work
exactly like built-in kinds; this is the one place that builds their REST paths and turns the
client library's exceptions into the project's own error types (`janitor.errors`).

It also builds the client itself (`connect`): one whose every request, typed or raw, carries a
connect and a read timeout, since the client library waits forever by default and a request the
apiserver never answers would otherwise hold a cycle, and the lease, for good.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import urllib3
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException

from janitor import errors
from janitor.decide.model import ResourceKind

Timeout = tuple[float, float]  # (connect, read) seconds
DEFAULT_TIMEOUT: Timeout = (5.0, 30.0)
# urllib3's default tries a request that timed out, was reset or got a 429 three more times: one
# unanswered read would cost four read timeouts. A connection that could not be made is tried
# once more (nothing was sent); anything else fails now, and the next cycle asks again.
ONE_TRY = urllib3.Retry(total=1, connect=1, read=0, status=0, other=0, redirect=0, raise_on_status=False,
                        respect_retry_after_header=False)


class TimedApiClient(ApiClient):
    """An ApiClient whose requests without an explicit `_request_timeout` get `timeout`."""

    def __init__(self, configuration: k8s.Configuration | None = None, timeout: Timeout = DEFAULT_TIMEOUT) -> None:
        super().__init__(configuration)
        self.timeout = timeout

    def call_api(self, method: Any, url: Any, header_params: Any = None, body: Any = None, post_params: Any = None,
                 _request_timeout: Any = None) -> Any:
        return super().call_api(method, url, header_params, body, post_params,
                                _request_timeout if _request_timeout is not None else self.timeout)


def connect(kubeconfig: str | None, timeout: Timeout = DEFAULT_TIMEOUT) -> TimedApiClient:
    """The client of `kubeconfig`, else of the in-cluster ServiceAccount; every request timed."""
    configuration = k8s.Configuration()
    if kubeconfig:
        k8s_config.load_kube_config(config_file=kubeconfig,  # type: ignore[no-untyped-call]
                                    client_configuration=configuration)
    else:
        k8s_config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
    configuration.retries = ONE_TRY
    return TimedApiClient(configuration, timeout)


@dataclass(frozen=True, slots=True)
class Response:
    status: int
    data: bytes
    headers: Mapping[str, str]


def path(kind: ResourceKind, namespace: str | None = None, name: str | None = None) -> str:
    """The REST path of a collection (all namespaces when `namespace` is None) or of one object."""
    result = f"/apis/{kind.group}/{kind.version}" if kind.group else f"/api/{kind.version}"
    if kind.namespaced and namespace is None and name is not None:
        raise ValueError(f"{kind.key} is namespaced: {name!r} needs a namespace")
    if kind.namespaced and namespace is not None:
        result += f"/namespaces/{quote(namespace, safe='')}"
    result += f"/{kind.plural}"
    return result + f"/{quote(name, safe='')}" if name is not None else result


def request(
    api: ApiClient,
    method: str,
    url_path: str,
    *,
    query: Sequence[tuple[str, Any]] = (),
    body: Any = None,
    content_type: str = "application/json",
    accept: str = "application/json",
    doing: str,
) -> Response:
    """Send one request; any failure (HTTP status or transport) raises a KubeError `from` it.

    Answers come gzip-compressed when the apiserver compresses (it does for large ones): a list of
    pods shrinks about seventeen times on the wire; urllib3 inflates it."""
    headers = {"Accept": accept, "Accept-Encoding": "gzip"}
    if body is not None:
        headers["Content-Type"] = content_type
    try:
        serialized = api.param_serialize(
            method, url_path, query_params=list(query), header_params=headers, body=body,
            auth_settings=["BearerToken"],
        )
        response = api.call_api(*serialized)
        data: bytes = response.read()  # type: ignore[no-untyped-call]
    except ApiException as e:
        raise errors.from_status(e.status, e.body or e.reason, doing=doing) from e
    except urllib3.exceptions.HTTPError as e:
        raise errors.from_status(None, str(e), doing=doing) from e
    if not 200 <= response.status <= 299:
        raise errors.from_status(response.status, data, doing=doing)
    return Response(response.status, data or b"", dict(response.headers or {}))


def open_stream(api: ApiClient, url_path: str, *, query: Sequence[tuple[str, Any]], accept: str, timeout: Timeout,
                doing: str) -> Any:
    """A GET whose answer is read as it arrives (a watch): the open urllib3 response, whose every
    read waits at most `timeout[1]`. A failure to open it, or an error status, raises a KubeError."""
    headers = {"Accept": accept, "Accept-Encoding": "gzip"}
    try:
        serialized = api.param_serialize("GET", url_path, query_params=list(query), header_params=headers,
                                         auth_settings=["BearerToken"])
        response = api.call_api(*serialized, _request_timeout=timeout)
    except ApiException as e:
        raise errors.from_status(e.status, e.body or e.reason, doing=doing) from e
    except urllib3.exceptions.HTTPError as e:
        raise errors.from_status(None, str(e), doing=doing) from e
    if not 200 <= response.status <= 299:
        try:
            data = response.read()  # type: ignore[no-untyped-call]
        except urllib3.exceptions.HTTPError:
            data = b""
        raise errors.from_status(response.status, data, doing=doing)
    return response.response
