"""Who counts as a workload's owner when they press a button, asked of the Slack stand-in.

Aspects covered:
- a Slack user id is that user; an e-mail is the Slack user with that address;
- a team channel (by #name or by id) is each of its members, read page by page;
- an owner Slack cannot resolve (unknown e-mail, unknown channel, no owner) is nobody.
"""

from __future__ import annotations

from devenv.slack_standin import SlackStandIn, SlackUser
from janitor.act.slack import Slack
from janitor.decide.owners import Owner, OwnerKind

ALICE, BOB = SlackUser("alice@lab.example", "U0ALICE1", "alice"), SlackUser("bob@lab.example", "U0BOB0001", "bob")


def test_owners_as_users_e_mails_and_team_channels() -> None:
    with SlackStandIn(tokens=("xoxb-t",), users=[ALICE, BOB]) as standin:
        many = [f"U0MEMBER{i:04d}" for i in range(1500)]  # two pages of members before alice
        standin.add_channel("C0TEAMML01", "team-ml", members=[*many, ALICE.id])
        slack = Slack.connect("xoxb-t", base_url=standin.base_url, timeout=5)
        cases = [
            (Owner(OwnerKind.SLACK_USER, ALICE.id), ALICE.id, True),
            (Owner(OwnerKind.SLACK_USER, ALICE.id), BOB.id, False),
            (Owner(OwnerKind.EMAIL, "Alice@lab.example"), ALICE.id, True),
            (Owner(OwnerKind.EMAIL, "alice@lab.example"), BOB.id, False),
            (Owner(OwnerKind.EMAIL, "nobody@lab.example"), BOB.id, False),
            (Owner(OwnerKind.CHANNEL, "#team-ml"), ALICE.id, True),
            (Owner(OwnerKind.CHANNEL, "C0TEAMML01"), ALICE.id, True),
            (Owner(OwnerKind.CHANNEL, "#team-ml"), BOB.id, False),
            (Owner(OwnerKind.CHANNEL, "#no-such-team"), ALICE.id, False),
            (Owner(OwnerKind.UNKNOWN), ALICE.id, False),
        ]
        for owner, user, expected in cases:
            assert slack.is_owner(owner, user) is expected, (owner, user)
