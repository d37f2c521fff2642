"""What the node agent tells the cluster, and how the janitor reads it back: one contract, both sides.

The node agent (a DaemonSet, `janitor.node_agent`) and the cluster-side janitor never import each
other; they meet on the apiserver, through a Node condition and Events. The names and the formats
of what crosses live here, as pure codecs, so a pod UID or an OOM kill count travels as data and is
never searched for in a sentence meant for people.

- The Node condition (node-problem-detector style): type `CONDITION_TYPE`, status True while
  processes of deleted pods are stuck in D state, False once they are gone. Its message is a
  sentence for `kubectl describe node`, then ` pods=<uid>:<state>,...` with every pod it is about
  (` pods=` and nothing after it: no pod);
  a list cut to fit the 1,024-character message ends in `,+` (`complete` False), and then every
  pod on that node must be assumed to be in it.
- A Warning Event `EVENT_LEFTOVER` on the Node per stuck task (words only).
- A Warning Event `EVENT_OOM` on a Pod per new OOM kill reading: a sentence, then
  ` [oom kills=<n> total=<n> scope=container|process|unknown]`.

Pure: standard library only, no clock.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

CONDITION_TYPE = "OrphanedDStateProcesses"
REASON_LEFTOVERS = "DStateProcessesOfDeletedPods"  # condition reason while status is True
REASON_CLEAR = "NoDStateProcessesOfDeletedPods"  # condition reason while status is False
EVENT_LEFTOVER = "DStateProcessOfDeletedPod"  # Warning Event on the Node, once per stuck task
EVENT_OOM = "OOMKillInPod"  # Warning Event on the Pod per new OOM kill reading
MESSAGE_MAX = 1024  # what the apiserver keeps of a condition or Event message

_PODS = " pods="
_MORE = "+"
_UID = re.compile(r"[0-9a-fA-F-]{1,64}")
_OOM = re.compile(r" \[oom kills=([0-9]{1,9}) total=([0-9]{1,12}) scope=(container|process|unknown)\]$")


class PodTaskState(enum.StrEnum):
    """What the agent saw of a pod's tasks on its node."""

    D_STATE = "d-state"  # a task of the deleted or long-Terminating pod is stuck in D


@dataclass(frozen=True, slots=True)
class ConditionMessage:
    summary: str
    pods: Mapping[str, PodTaskState] = field(default_factory=dict)
    complete: bool = True  # False: more pods than the message could name

    def names(self, pod_uid: str) -> bool:
        """Whether this message may be about `pod_uid`: listed, or possibly among those cut off."""
        return pod_uid in self.pods or not self.complete


def encode_condition(summary: str, pods: Mapping[str, PodTaskState]) -> str:
    """The condition message: the summary (shortened first), then as many pods as fit."""
    entries = [f"{uid}:{state}" for uid, state in sorted(pods.items())]
    shown: list[str] = []
    room = MESSAGE_MAX - len(_PODS) - len(_MORE) - 1
    for entry in entries:
        if sum(len(e) + 1 for e in shown) + len(entry) > room - 40:  # keep 40 characters for the summary
            break
        shown.append(entry)
    data = _PODS + ",".join(shown + ([_MORE] if len(shown) < len(entries) else []))
    return summary[: MESSAGE_MAX - len(data)] + data


def decode_condition(text: str) -> ConditionMessage:
    """The message back. Pods are found only in the trailing data part; a message from an older
    agent (no data part) names no pods and says so with `complete` False."""
    summary, sep, data = text.rpartition(_PODS)
    if not sep:
        return ConditionMessage(text, {}, complete=False)
    pods: dict[str, PodTaskState] = {}
    complete = True
    for entry in data.split(",") if data else ():
        if entry == _MORE:
            complete = False
            continue
        uid, colon, state = entry.partition(":")
        try:
            if not colon or not _UID.fullmatch(uid):
                raise ValueError(entry)
            pods[uid] = PodTaskState(state)
        except ValueError:
            complete = False  # a state this janitor does not know: the pod may be anything
    return ConditionMessage(summary, pods, complete)


class OomScope(enum.StrEnum):
    """What an OOM kill took: the whole container (memory.oom.group) or single processes."""

    CONTAINER = "container"
    PROCESS = "process"
    UNKNOWN = "unknown"


@dataclass(frozen=True, slots=True)
class OomReport:
    kills: int  # new kills in this reading
    total: int  # kills since the pod's cgroup was first read
    scope: OomScope
    words: str = ""  # the sentence people read

    def __str__(self) -> str:
        return self.words


def encode_oom(report: OomReport) -> str:
    data = f" [oom kills={report.kills} total={report.total} scope={report.scope}]"
    return report.words[: MESSAGE_MAX - len(data)] + data


def decode_oom(text: str) -> OomReport | None:
    """The report in an `EVENT_OOM` message; None for a message without the data part."""
    match = _OOM.search(text)
    if match is None:
        return None
    return OomReport(int(match[1]), int(match[2]), OomScope(match[3]), text[: match.start()])
