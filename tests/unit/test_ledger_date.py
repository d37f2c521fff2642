"""The apiserver's clock comes with the ledger's read, also before the ledger exists.

A steady cycle reads the apiserver's Date from its ledger's answer; while the ledger ConfigMap did
not exist yet (a janitor that has never recorded a deletion: shadow mode, dry run, a new install)
the 404 was taken as no date, and every cycle asked `/version` again for one.
"""

from __future__ import annotations

import datetime
import json
from typing import Any

from janitor import errors
from janitor.observe import cluster

DATE = "Sat, 28 Nov 2026 19:12:05 GMT"
LEDGER = "/api/v1/namespaces/kube-idle-janitor/configmaps/janitor-state"


class _Answer:
    def __init__(self, status: int, headers: dict[str, str]) -> None:
        self.status, self.headers = status, headers
        self.body = json.dumps({"kind": "Status", "message": f"HTTP {status}"}).encode()

    def read(self) -> bytes:
        return self.body


class _Api:
    """Answers every GET with `status` and the Date header; records the paths."""

    def __init__(self, status: int) -> None:
        self.status, self.asked = status, []

    def param_serialize(self, method: str, path: str, **kwargs: Any) -> tuple[str, str]:
        return method, path

    def call_api(self, method: str, path: str, *args: Any, **kwargs: Any) -> _Answer:
        self.asked.append(path)
        return _Answer(self.status, {"Date": DATE})


def test_a_ledger_not_written_yet_still_gives_the_apiservers_date() -> None:
    api = _Api(404)
    ledger, at = cluster.read_ledger_at(api, "kube-idle-janitor", "janitor-state")  # type: ignore[arg-type]
    assert at == datetime.datetime(2026, 11, 28, 19, 12, 5, tzinfo=datetime.timezone.utc)
    assert not ledger.unreadable
    assert api.asked == [LEDGER]


def test_an_error_answer_carries_its_date() -> None:
    from janitor import kubeapi

    try:
        kubeapi.request(_Api(403), "GET", LEDGER, doing="read")  # type: ignore[arg-type]
    except errors.Forbidden as e:
        assert e.date == DATE
    else:
        raise AssertionError("a 403 raises")
