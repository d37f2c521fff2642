"""The triggers: one module each, one signature each (descheduler's plugins).

`findings(workloads, observation, policy, now) -> list[Finding]`: the trigger judges the
workloads the policy governs for it (expiry: every object the rails let it judge) on what was
observed, and says what it found, with the reason as data. Triggers never mark, warn or act:
`decide.plan` hands their findings to the lifecycle and the rails.
"""

from __future__ import annotations

import datetime
from collections.abc import Sequence
from typing import Protocol

from janitor.decide.model import Finding, Observation
from janitor.decide.selection import Workload
from janitor.policy.model import Policy


class Trigger(Protocol):
    def __call__(self, workloads: Sequence[Workload], observation: Observation, policy: Policy,
                 now: datetime.datetime) -> list[Finding]: ...
