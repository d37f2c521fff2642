"""The janitor's own Kubernetes API errors, classified by what the caller does next.

Both `observe` (reading) and `act` (writing) talk to the apiserver, and they must not import
each other (DESIGN.md, "Layers"). So the error family lives here, outside both, and this module
imports no client library: it classifies an HTTP status and a response body, which is all an
`ApiException` or a raw response carries. Each side turns its client library's failures into
these with `from_status(...)` and raises them `from` the original error.

The classes follow kopf's `clients/errors.py`: `NotFound` is usually the outcome *gone* rather
than a failure, `Conflict` means "re-read and decide again", `Forbidden` and `Unauthorized` mean
RBAC or credentials (an admin must act), and `temporary` marks the ones worth retrying later
(throttled, server-side, network).
Server messages are cut to `MESSAGE_MAX` characters: an apiserver error can quote a whole object.
"""

from __future__ import annotations

import json

MESSAGE_MAX = 300
FORBIDDEN_MAX = 1000


class KubeError(Exception):
    """A Kubernetes API call failed; `doing` says which call, in words."""

    temporary = False

    def __init__(self, message: str, *, status: int | None = None, doing: str = "") -> None:
        self.status = status
        self.doing = doing
        self.date: str | None = None  # the answer's Date header, where one came: the apiserver's clock
        self.server_message = cut(message, FORBIDDEN_MAX if status == 403 else MESSAGE_MAX)
        prefix = f"{doing}: " if doing else ""
        code = f"HTTP {status}: " if status else ""
        super().__init__(f"{prefix}{code}{self.server_message}")


class ConfigError(Exception):
    """The janitor cannot start talking to the cluster: no kubeconfig, a broken one, an unknown
    context. The message is one line a person can act on; no HTTP status, nothing to retry."""


class NotFound(KubeError):
    """404: the object (or its namespace, or the whole API group) is not there."""


class Conflict(KubeError):
    """409: a precondition (uid, resourceVersion) failed or the object changed; re-read first."""


class Forbidden(KubeError):
    """403: RBAC does not let the janitor do this; only an admin can grant it."""


class Unauthorized(KubeError):
    """401: the apiserver does not accept the janitor's credentials at all (expired token).

    Not a `Forbidden`: a kind we may not list is skipped, but bad credentials would skip every
    kind and make an empty cluster out of a full one.
    """


class Expired(KubeError):
    """410: a list continuation token expired (etcd compacted); start the list again."""

    temporary = True


class TooManyRequests(KubeError):
    """429: the apiserver throttles us (API Priority and Fairness); try again later."""

    temporary = True


class ServerError(KubeError):
    """5xx, or no answer at all: the apiserver or the network failed; try again later."""

    temporary = True


_BY_STATUS: dict[int, type[KubeError]] = {
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    410: Expired,
    429: TooManyRequests,
}


def from_status(status: int | None, body: str | bytes | None, *, doing: str) -> KubeError:
    """The error for a failed call: the class by HTTP status, the message from the body.

    `status` None or 0 means no HTTP answer (connection refused, TLS failure): a ServerError.
    """
    # A refusal (RBAC, an admission policy) says what to do about it: keep all of it.
    message = server_message(body, FORBIDDEN_MAX if status == 403 else MESSAGE_MAX)
    if not status:
        return ServerError(message or "no answer from the apiserver", status=None, doing=doing)
    cls = _BY_STATUS.get(status) or (ServerError if status >= 500 else KubeError)
    return cls(message or f"HTTP {status}", status=status, doing=doing)


def server_message(body: str | bytes | None, limit: int = MESSAGE_MAX) -> str:
    """The `message` of a `Status` body, or the body itself when it is not one (e.g. plain
    `404 page not found` for an API group that is not served)."""
    if body is None:
        return ""
    text = body.decode("utf-8", "replace") if isinstance(body, bytes) else body
    try:
        status = json.loads(text)
    except ValueError:
        return cut(text.strip(), limit)
    if isinstance(status, dict) and isinstance(status.get("message"), str):
        return cut(status["message"], limit)
    return cut(text.strip(), limit)


def cut(text: str, limit: int = MESSAGE_MAX) -> str:
    """Shorten `text` for logs, Events and results; long server messages quote whole objects."""
    return text if len(text) <= limit else text[: limit - 3] + "..."
