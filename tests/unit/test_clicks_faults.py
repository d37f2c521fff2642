"""A click while the apiserver does not answer: nothing changes, and the presser is told so.

Aspects covered:
- the workload cannot be read (connection refused): the verdict is `failed`, the presser alone
  sees "could not be read ... nothing changed, try again", it is counted and audited, the daemon
  is not woken; the real Slack client talks to the in-process stand-in.
"""

from __future__ import annotations

import socket
from pathlib import Path

import yaml

from devenv.slack_interactive import block_actions
from devenv.slack_standin import SlackStandIn, SlackUser
from janitor import kubeapi
from janitor.act.slack import Slack
from janitor.clicks import Clicks
from janitor.decide.clicks import ButtonValue
from janitor.settings import Settings, SlackSettings
from janitor.telemetry import Telemetry


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_click_the_apiserver_cannot_answer_changes_nothing(tmp_path: Path) -> None:
    config = tmp_path / "kubeconfig"
    config.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "x",
        "clusters": [{"name": "x", "cluster": {"server": f"https://127.0.0.1:{closed_port()}",
                                               "insecure-skip-tls-verify": True}}],
        "users": [{"name": "x", "user": {"token": "t"}}], "contexts": [{"name": "x", "context": {"cluster": "x",
                                                                                              "user": "x"}}]}))
    api = kubeapi.connect(str(config), (1.0, 2.0))
    with SlackStandIn(tokens=("xoxb-t",), users=[SlackUser("alice@lab.example", "U0ALICE1", "alice")]) as standin:
        slack = Slack.connect("xoxb-t", base_url=standin.base_url, timeout=5)
        woken: list[int] = []
        metrics = Telemetry()
        clicks = Clicks(api, slack, Settings(slack=SlackSettings(token="xoxb-t")), lambda: (), metrics,
                        lambda: woken.append(1))
        value = ButtonValue("Job", "batch/v1", "team-a", "train", "uid-1", "2026-11-24T10:00:00Z").encode()
        message = {"ts": "1.000001", "text": "warning", "blocks": [{"type": "actions", "block_id": "janitor:uid-1",
                                                                  "elements": [{"type": "button",
                                                                                "action_id": "janitor.keep.1d",
                                                                                "value": value}]}]}
        clicks.handle(block_actions({"id": "U0ALICE1"}, "U0ALICE1", message, "janitor.keep.1d"))  # in her DM
        [told] = standin.ephemeral("U0ALICE1")
        assert "could not be read" in told.text and "nothing changed, try again" in told.text
        assert metrics.registry.get_sample_value("janitor_slack_clicks_total",
                                                 {"button": "keep", "outcome": "failed"}) == 1
        assert woken == []
