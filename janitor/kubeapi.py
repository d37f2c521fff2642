"""One request to the apiserver, for `observe` and `act` alike, with failures as `KubeError`.

Both edges speak to the API through the generic `ApiClient.call_api`, so custom resources work
exactly like built-in kinds; this is the one place that builds their REST paths and turns the
client library's exceptions into the project's own error types (`janitor.errors`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import urllib3
from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException

from janitor import errors
from janitor.decide.model import ResourceKind


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
    doing: str,
) -> Response:
    """Send one request; any failure (HTTP status or transport) raises a KubeError `from` it."""
    headers = {"Accept": "application/json"}
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
