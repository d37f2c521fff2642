"""`janitor keep` against a small apiserver that serves one Job and records every write.

Aspects covered:
- a time within the cap the mark's janitor/why counts (maxExtension after the first mark) is
  written as janitor/keep-until, an absolute UTC time;
- a time past that cap is refused before anything is written: one line on stderr naming the cap
  and the command that keeps to it, exit 1; so is any time when the policy lets no one keep a
  workload, and any time on a mark whose janitor/marked-at someone else wrote (no cap can be
  counted from it);
- a workload not marked, or marked without janitor/why (an older janitor), has no cap here: the
  keep is written, and the janitor caps it when it reads it.
"""

from __future__ import annotations

import datetime
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml

from janitor import annotations as a
from janitor import cli
from janitor.why_note import WhyNote

H = datetime.timedelta(hours=1)
DAY = 24 * H
JOB_PATH = "/apis/batch/v1/namespaces/team-a/jobs/train"
# The janitor's own keys, as the apiserver records who wrote them last.
MARK_KEYS = (a.DEADLINE, a.POLICY, a.REASON, a.WHY, a.MARKED_AT, a.MARKED_UID)


def t(when: datetime.datetime) -> str:
    return a.format_expires(when)


class Apiserver:
    """Serves one Job (`annotations`, written by the janitor's field manager unless `foreign`) and
    records the merge patches it is sent, answering them as the apiserver would."""

    def __init__(self) -> None:
        self.annotations: dict[str, str] = {}
        self.foreign: tuple[str, ...] = ()
        self.patches: list[dict[str, Any]] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def _answer(self, status: int, body: dict[str, Any]) -> None:
                text = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(text)))
                self.end_headers()
                self.wfile.write(text)

            def do_GET(self) -> None:  # noqa: N802
                if self.path.split("?")[0] != JOB_PATH:
                    self._answer(404, {"kind": "Status", "apiVersion": "v1", "status": "Failure",
                                       "reason": "NotFound", "code": 404, "message": f"{self.path} not found"})
                    return
                self._answer(200, server.job())

            def do_PATCH(self) -> None:  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                server.patches.append(body)
                server.annotations.update(body["metadata"]["annotations"])
                self._answer(200, server.job())

        self.http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.http.daemon_threads = True
        threading.Thread(target=self.http.serve_forever, daemon=True).start()

    def job(self) -> dict[str, Any]:
        mine = [k for k in self.annotations if k in MARK_KEYS and k not in self.foreign]
        fields = {"f:metadata": {"f:annotations": {f"f:{k}": {} for k in mine}}}
        managed = [{"manager": a.FIELD_MANAGER, "operation": "Update", "fieldsType": "FieldsV1", "fieldsV1": fields}]
        if self.foreign:
            managed.append({"manager": "kubectl-annotate", "operation": "Update", "fieldsType": "FieldsV1",
                            "fieldsV1": {"f:metadata": {"f:annotations": {f"f:{k}": {} for k in self.foreign}}}})
        return {"apiVersion": "batch/v1", "kind": "Job",
                "metadata": {"name": "train", "namespace": "team-a", "uid": "uid-train", "resourceVersion": "100",
                             "creationTimestamp": "2026-01-01T00:00:00Z", "annotations": dict(self.annotations),
                             "managedFields": managed},
                "spec": {"template": {"spec": {"containers": []}}}}

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.http.server_address[1]}"

    def stop(self) -> None:
        self.http.shutdown()


@pytest.fixture
def apiserver() -> Iterator[Apiserver]:
    made = Apiserver()
    yield made
    made.stop()


@pytest.fixture
def kubeconfig(apiserver: Apiserver, tmp_path: Path) -> Path:
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "lab",
        "clusters": [{"name": "lab", "cluster": {"server": apiserver.url}}],
        "users": [{"name": "admin", "user": {"token": "t0ken"}}],
        "contexts": [{"name": "lab", "context": {"cluster": "lab", "user": "admin"}}],
    }))
    return path


def now() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0)


def mark(marked: datetime.datetime, *, cap: datetime.timedelta | None = 7 * DAY, why: bool = True) -> dict[str, str]:
    """A warned mark as the janitor writes it; its janitor/why records the policy's cap."""
    deadline = marked + DAY
    notes = {a.DEADLINE: t(deadline), a.POLICY: "idle-gpu", a.REASON: "idle: GPU 0 peak 0",
             a.MARKED_AT: t(marked), a.MARKED_UID: "uid-train"}
    if why:
        notes[a.WHY] = WhyNote("idle-gpu", "idleGpu", "delete", "all-idle", "GPU 0 peaked at 0 %", {}, marked,
                               deadline, marked + cap if cap else None,
                               a.format_duration(cap) if cap else "0s").encode()
    return notes


def keep(kubeconfig: Path, until: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = cli.main(["keep", "Job/team-a/train", until, "--kubeconfig", str(kubeconfig)])
    out, err = capsys.readouterr()
    return code, out, err


def test_a_time_within_the_cap_is_written(apiserver: Apiserver, kubeconfig: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    apiserver.annotations = mark(now() - 3 * H)
    code, out, err = keep(kubeconfig, "2d", capsys)
    assert (code, err) == (0, "")
    [patch] = apiserver.patches
    until = a.parse_expires(patch["metadata"]["annotations"][a.KEEP_UNTIL])
    assert now() + 2 * DAY - 5 * H < until <= now() + 2 * DAY
    assert out.startswith(f"Job/team-a/train: {a.KEEP_UNTIL}={t(until)}.")


def test_a_time_past_the_cap_is_refused_and_nothing_written(apiserver: Apiserver, kubeconfig: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    marked = now() - 3 * H
    apiserver.annotations = mark(marked)
    wanted = t(marked + 30 * DAY)
    code, out, err = keep(kubeconfig, wanted, capsys)
    assert code == 1 and out == "" and apiserver.patches == []
    assert err == (f"janitor keep: Job/team-a/train: {wanted} is past the cap of policy idle-gpu, "
                   f"{t(marked + 7 * DAY)} (maxExtension 1w after it was first marked); keep it until then at "
                   f"most: janitor keep Job/team-a/train {t(marked + 7 * DAY)}\n")


def test_the_cap_itself_is_written(apiserver: Apiserver, kubeconfig: Path,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    marked = now() - 3 * H
    apiserver.annotations = mark(marked)
    code, _, err = keep(kubeconfig, t(marked + 7 * DAY), capsys)
    assert (code, err) == (0, "")
    assert [p["metadata"]["annotations"] for p in apiserver.patches] == [{a.KEEP_UNTIL: t(marked + 7 * DAY)}]


def test_a_policy_that_keeps_nothing_refuses_every_time(apiserver: Apiserver, kubeconfig: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    apiserver.annotations = mark(now() - 3 * H, cap=None)
    code, out, err = keep(kubeconfig, "1h", capsys)
    assert code == 1 and out == "" and apiserver.patches == []
    assert err == ("janitor keep: Job/team-a/train: policy idle-gpu lets no one keep a workload (maxExtension 0s); "
                   "raise its maxExtension to allow keeping\n")


def test_a_mark_whose_marked_at_someone_else_wrote_has_no_cap(apiserver: Apiserver, kubeconfig: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    apiserver.annotations = mark(now() + 300 * DAY)  # forward-dated, by hand: no time can be counted from it
    apiserver.foreign = (a.MARKED_AT,)
    code, out, err = keep(kubeconfig, "1d", capsys)
    assert code == 1 and out == "" and apiserver.patches == []
    assert err == (f"janitor keep: Job/team-a/train: {a.MARKED_AT} on it was not written by the janitor (someone "
                   "else wrote it last), so the janitor honours no keep-until on this mark; `janitor unmark` starts "
                   "the mark again\n")


@pytest.mark.parametrize("notes", [pytest.param({}, id="not-marked"),
                                   pytest.param(mark(now() - 3 * H, why=False), id="no-janitor-why")])
def test_without_a_known_cap_the_keep_is_written(notes: dict[str, str], apiserver: Apiserver, kubeconfig: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    apiserver.annotations = dict(notes)
    code, _, err = keep(kubeconfig, "30d", capsys)
    assert (code, err) == (0, "")
    assert [list(p["metadata"]["annotations"]) for p in apiserver.patches] == [[a.KEEP_UNTIL]]
