"""janitor/errors.py: Kubernetes API failures classified by what the caller does next.

Aspects covered:
- each HTTP status maps to its class, and only throttling/server/network errors are temporary;
- the message is the Status `message`, or the raw text when the body is not a Status;
- long server messages are cut, and the error names the call that failed.
"""

from __future__ import annotations

import json

import pytest

from janitor import errors


@pytest.mark.parametrize(
    ("status", "cls", "temporary"),
    [
        pytest.param(401, errors.Unauthorized, False, id="401"),
        pytest.param(403, errors.Forbidden, False, id="403"),
        pytest.param(404, errors.NotFound, False, id="404"),
        pytest.param(409, errors.Conflict, False, id="409"),
        pytest.param(410, errors.Expired, True, id="410"),
        pytest.param(422, errors.KubeError, False, id="422-invalid"),
        pytest.param(429, errors.TooManyRequests, True, id="429"),
        pytest.param(503, errors.ServerError, True, id="503"),
        pytest.param(None, errors.ServerError, True, id="no-answer"),
        pytest.param(0, errors.ServerError, True, id="tls-failure"),
    ],
)
def test_classes_by_status(status: int | None, cls: type[errors.KubeError], temporary: bool) -> None:
    error = errors.from_status(status, None, doing="list Pod")
    assert type(error) is cls
    assert error.temporary is temporary
    assert str(error).startswith("list Pod")


def test_status_message_is_extracted() -> None:
    body = json.dumps({"kind": "Status", "message": 'pods "x" not found', "code": 404})
    error = errors.from_status(404, body.encode(), doing="read Pod/ns/x")
    assert error.server_message == 'pods "x" not found'
    assert str(error) == 'read Pod/ns/x: HTTP 404: pods "x" not found'


def test_plain_text_bodies_are_kept() -> None:
    assert errors.from_status(404, b"404 page not found\n", doing="x").server_message == "404 page not found"


def test_long_messages_are_cut() -> None:
    error = errors.from_status(500, json.dumps({"message": "x" * 5000}), doing="list Pod")
    assert len(error.server_message) == errors.MESSAGE_MAX and error.server_message.endswith("...")
    assert len(str(error)) < errors.MESSAGE_MAX + 50
