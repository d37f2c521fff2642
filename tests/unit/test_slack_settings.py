"""What the Slack messages say about where they come from: the cluster's name and the guide's link.

Aspects covered:
- `cluster_name` and `guide_url` come from the parsed arguments, else from JANITOR_CLUSTER_NAME
  and JANITOR_GUIDE_URL, else are None; a command without the options (or blank values) is fine;
- a guide link that is not an http(s) URL stops the start with the option named, since Slack
  would show it as broken text in every message.
"""

from __future__ import annotations

import argparse

import pytest

from janitor.settings import SlackSettings, from_args

GUIDE = "https://wiki.lab.example/gpu-janitor"


@pytest.fixture(autouse=True)
def no_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("JANITOR_CLUSTER_NAME", raising=False)
    monkeypatch.delenv("JANITOR_GUIDE_URL", raising=False)


def slack(**args: object) -> SlackSettings:
    return from_args(argparse.Namespace(**args)).slack


def test_from_the_arguments() -> None:
    settings = slack(cluster_name="mn2", guide_url=GUIDE, admin_channel="#gpu-admins")
    assert (settings.cluster_name, settings.guide_url, settings.admin_channel) == ("mn2", GUIDE, "#gpu-admins")


def test_absent_or_blank_is_none() -> None:
    assert (slack().cluster_name, slack().guide_url) == (None, None)
    blank = slack(cluster_name="  ", guide_url="")
    assert (blank.cluster_name, blank.guide_url) == (None, None)
    assert SlackSettings().cluster_name is None and SlackSettings().guide_url is None


def test_from_the_environment_unless_given(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JANITOR_CLUSTER_NAME", "mn2")
    monkeypatch.setenv("JANITOR_GUIDE_URL", GUIDE)
    assert (slack().cluster_name, slack().guide_url) == ("mn2", GUIDE)
    given = slack(cluster_name="mn3", guide_url="http://intranet/guide")
    assert (given.cluster_name, given.guide_url) == ("mn3", "http://intranet/guide")


@pytest.mark.parametrize("url", ["wiki.lab.example/guide", "ftp://x/y", "https://", "https://x/a b", "https://x/a|b"])
def test_a_guide_link_slack_cannot_show_is_refused(url: str) -> None:
    with pytest.raises(SystemExit, match="--guide-url"):
        slack(guide_url=url)
