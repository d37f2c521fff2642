"""What the node agent tells the cluster, and how the janitor reads it back: one contract, both sides.

The node agent (a DaemonSet, `janitor.node_agent`) and the cluster-side janitor never import each
other; they meet on the apiserver, through a Node condition and Events. The names and the formats
of what crosses live here, as pure codecs, so a pod UID, a pod's task state or an OOM kill count
travels as data and is never searched for in a sentence meant for people.

- The Node condition (node-problem-detector style), type `CONDITION_TYPE`, matched by
  node-operation-controller on type and status only: `True` while processes of deleted pods are
  stuck in D state, `False` once they are gone, `Unknown` while the agent has completed fewer
  than `--sustain` scans since it started (it cannot yet tell a stuck task from a passing one,
  and node-operation-controller skips a node whose condition is Unknown), and Unknown with
  `REASON_CANNOT_SEE` while its last complete scan found no process of any pod the API lists on
  the node but its own (then nothing it reports as gone proves anything). Its message is a
  sentence for `kubectl describe node`, then the data part:
  ` sees=<visible>/<listed> started=<time> scans=<n>/<sustain> scanned=<time> pods=<uid>:<state>,...`
  — of the pods the API lists on the node other than the agent's own, how many its last complete
  scan found a process of (`Sight`); when this agent process started, how many complete scans it
  has done since, and when its last complete scan began; then the pods it is about with what it
  saw of their tasks (`PodTaskState`; ` pods=` and nothing after it: no pod). A list cut to fit
  the 1,024-character message ends in `,+` (`complete` False): every pod not listed may then be
  in any state.
- A Warning Event `EVENT_LEFTOVER` on the Node per stuck task (words only).
- A second Node condition, type `GPU_CONDITION_TYPE`, on the same rules (Unknown while starting or
  unable to see, `True` while processes of deleted pods hold GPUs, `False` once none does): its
  message is a sentence, the same agent part, then ` held=` and per GPU held
  `<minor>|<PCI bus id>|<pid>|<state>|<since>|<pod uid>|<namespace>/<name>|<process name>`
  (`HeldGpu`; namespace and name empty when the agent never saw the pod listed), cut to fit as
  the pods are (`,+`). A Warning Event `EVENT_GPU_HELD` on the Node per holder (words only).
- A Warning Event `EVENT_OOM` on a Pod per new OOM kill reading: a sentence, then
  ` [oom kills=<n> total=<n> scope=container|process|unknown]`.

A message without the agent part (an older agent) reads back with `agent` None: it names which
pods are stuck, but proves nothing about any pod being gone. A message without ` sees=` (an agent
from before it was added), or with one this janitor cannot read, reads back with `sight` None: not
shown to see any pod's processes, so its `gone` proves nothing either. ` sees=` sits before
` started=` so that a janitor from before it was added still reads the run and the pods (to it the
field is the end of the summary); a summary cannot forge it, since only the text right before the
run is read, and the agent always writes its own there.

Pure: standard library only, no clock.
"""

from __future__ import annotations

import datetime
import enum
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

CONDITION_TYPE = "OrphanedDStateProcesses"
REASON_LEFTOVERS = "DStateProcessesOfDeletedPods"  # condition reason while status is True
REASON_CLEAR = "NoDStateProcessesOfDeletedPods"  # condition reason while status is False
REASON_STARTING = "NodeAgentStarting"  # condition reason while status is Unknown: fewer than --sustain scans
REASON_CANNOT_SEE = "NodeAgentCannotSee"  # condition reason while status is Unknown: no other pod's process seen
EVENT_LEFTOVER = "DStateProcessOfDeletedPod"  # Warning Event on the Node, once per stuck task
EVENT_OOM = "OOMKillInPod"  # Warning Event on the Pod per new OOM kill reading
GPU_CONDITION_TYPE = "OrphanedGPUHolders"
REASON_GPU_HELD = "GPUsHeldByProcessesOfDeletedPods"  # the GPU condition's reason while True
REASON_GPU_CLEAR = "NoGPUsHeldByProcessesOfDeletedPods"  # ... while False
EVENT_GPU_HELD = "GPUHeldByProcessOfDeletedPod"  # Warning Event on the Node, once per holder
REASON_CANNOT_READ = "NodeAgentCannotReadProcesses"  # the GPU condition Unknown: a suspect's files unreadable
MESSAGE_MAX = 1024  # what the apiserver keeps of a condition or Event message

_PODS = " pods="
_MORE = "+"
_UID = re.compile(r"[0-9a-fA-F-]{1,64}")
_TIME = "%Y-%m-%dT%H:%M:%SZ"
_RUN = re.compile(r" started=(\S{1,40}) scans=([0-9]{1,12})/([0-9]{1,6}) scanned=(\S{1,40})$")
_SIGHT = re.compile(r" sees=(\S{0,40})$")
_SIGHT_VALUE = re.compile(r"([0-9]{1,9})/([0-9]{1,9})")
_HELD = " held="
_HELD_ENTRY = re.compile(r"([0-9]{1,6})\|([0-9A-Fa-f:.]{0,20})\|([0-9]{1,10})\|([A-Za-z])\|(\S{20})\|"
                         r"([0-9a-fA-F-]{1,64})\|([a-z0-9.-]{0,63})/([a-z0-9.-]{0,253})\|([A-Za-z0-9._-]{0,15})")
_COMM_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")
_BUS = re.compile(r"(?:([0-9A-Fa-f]{1,8}):)?([0-9A-Fa-f]{1,2}):([0-9A-Fa-f]{1,2})\.([0-7])")
_OOM = re.compile(r" \[oom kills=([0-9]{1,9}) total=([0-9]{1,12}) scope=(container|process|unknown)\]$")


class PodTaskState(enum.StrEnum):
    """What the agent saw of a pod's tasks on its node, in one complete scan of /proc."""

    D_STATE = "d-state"  # a task of the deleted or long-Terminating pod stuck in D over `sustain` scans
    ALIVE = "alive"  # a task of the Terminating pod is there (in any state, D for less than `sustain` scans too)
    GONE = "gone"  # Terminating before the scans began, and `sustain` scans in a row found no task of it


_ORDER = {PodTaskState.D_STATE: 0, PodTaskState.ALIVE: 1, PodTaskState.GONE: 2}  # what a cut list keeps first


@dataclass(frozen=True, slots=True)
class AgentRun:
    """Who reports: this agent process's start, its complete scans since, and its last one."""

    started: datetime.datetime
    scans: int  # complete scans (/proc walked and the node's pods listed) since `started`
    sustain: int  # scans a task must stay in D before it counts (the condition is Unknown below it)
    scanned: datetime.datetime  # when the last complete scan began (its /proc walk)


@dataclass(frozen=True, slots=True)
class Sight:
    """What shows that the agent can see pods' processes at all, in its last complete scan.

    Counted over the pods the API lists on the node other than the agent's own (a static pod
    under the UID its cgroup carries): `visible` those of which the scan found a process in
    /proc, `listed` all of them. 0 visible: the agent saw no process of any other pod (no
    hostPID, a --proc-root that is not the host's /proc, a sandboxed runtime, or no other pod
    runs there), and none of its `gone` proves anything."""

    visible: int
    listed: int

    @property
    def proven(self) -> bool:
        return self.visible > 0


@dataclass(frozen=True, slots=True)
class ConditionMessage:
    summary: str
    pods: Mapping[str, PodTaskState] = field(default_factory=dict)
    complete: bool = True  # False: more pods than the message could name
    agent: AgentRun | None = None  # None: an older agent's message, or one this janitor cannot read
    sight: Sight | None = None  # None: not said (an older agent) or not readable: not shown to see anything

    def state(self, pod_uid: str) -> PodTaskState | None:
        """What the agent saw of this pod; None when the message does not say."""
        return self.pods.get(pod_uid)

    def names(self, pod_uid: str) -> bool:
        """Whether this message may report `pod_uid` stuck in D: listed so, or possibly among those cut off."""
        state = self.pods.get(pod_uid)
        return state is PodTaskState.D_STATE or (state is None and not self.complete)


def _stamp(at: datetime.datetime, *, up: bool = False) -> str:
    """Whole seconds: down (a scan is said to begin no later than it did), or `up` (an agent is
    said to start no earlier than it did), so neither ever looks earlier than the deletion it followed."""
    if up and at.microsecond:
        at += datetime.timedelta(seconds=1)
    return at.astimezone(datetime.timezone.utc).strftime(_TIME)


def _parse_time(text: str) -> datetime.datetime:
    return datetime.datetime.strptime(text, _TIME).replace(tzinfo=datetime.timezone.utc)


def _agent_part(agent: AgentRun | None, sight: Sight | None) -> str:
    seen = "" if agent is None or sight is None else f" sees={sight.visible}/{sight.listed}"
    return "" if agent is None else (f"{seen} started={_stamp(agent.started, up=True)} "
                                     f"scans={agent.scans}/{agent.sustain} scanned={_stamp(agent.scanned)}")


def _message(summary: str, run: str, key: str, entries: list[str]) -> str:
    """The summary (shortened first), the agent part, then `key` and as many entries as fit."""
    shown: list[str] = []
    room = MESSAGE_MAX - len(run) - len(key) - len(_MORE) - 1
    for entry in entries:
        if sum(len(e) + 1 for e in shown) + len(entry) > room - 40:  # keep 40 characters for the summary
            break
        shown.append(entry)
    data = run + key + ",".join(shown + ([_MORE] if len(shown) < len(entries) else []))
    return summary[: MESSAGE_MAX - len(data)] + data


def encode_condition(summary: str, pods: Mapping[str, PodTaskState], agent: AgentRun | None = None,
                     sight: Sight | None = None) -> str:
    """The condition message: the summary (shortened first), then what the agent sees and its run
    (the sight only with a run), and as many pods as fit, stuck ones first, then alive, then gone."""
    entries = [f"{uid}:{state}" for uid, state in sorted(pods.items(), key=lambda p: (_ORDER[p[1]], p[0]))]
    return _message(summary, _agent_part(agent, sight), _PODS, entries)


def _run(text: str) -> tuple[str, AgentRun | None]:
    match = _RUN.search(text)
    if match is None:
        return text, None
    try:
        run = AgentRun(_parse_time(match[1]), int(match[2]), int(match[3]), _parse_time(match[4]))
    except ValueError:
        return text[: match.start()], None
    return text[: match.start()], run


def _sight(text: str) -> tuple[str, Sight | None]:
    """The ` sees=` field right before the run, if any; one that cannot be read is None (not
    proven) and still cut from the summary."""
    match = _SIGHT.search(text)
    if match is None:
        return text, None
    value = _SIGHT_VALUE.fullmatch(match[1])
    return text[: match.start()], None if value is None else Sight(int(value[1]), int(value[2]))


def _head(before: str) -> tuple[str, AgentRun | None, Sight | None]:
    """The summary, the run and the sight of what precedes a message's data part."""
    summary, agent = _run(before)
    summary, sight = _sight(summary) if agent is not None else (summary, None)
    return summary, agent, sight


def decode_condition(text: str) -> ConditionMessage:
    """The message back. Pods are found only in the trailing data part; a message from an older
    agent (no data part) names no pods and says so with `complete` False."""
    before, sep, data = text.rpartition(_PODS)
    if not sep:
        return ConditionMessage(text, {}, complete=False)
    summary, agent, sight = _head(before)
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
    return ConditionMessage(summary, pods, complete, agent, sight)


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


@dataclass(frozen=True, slots=True)
class HeldGpu:
    """One GPU of the node held by one process of a deleted (or long-Terminating) pod."""

    minor: int  # the device minor (/dev/nvidia<minor>), not nvidia-smi's index
    bus_id: str  # its PCI bus id (dcgm-exporter's `pci_bus_id`); "" when the driver did not say
    pid: int
    state: str  # the process's state letter (R, S, D, Z, ...)
    since: datetime.datetime  # the first scan that saw it hold the GPU
    pod_uid: str
    namespace: str  # "" when the agent never saw the pod listed
    name: str
    comm: str  # the process's name, with anything but letters, digits, '.', '_' and '-' as '_'


@dataclass(frozen=True, slots=True)
class HoldersMessage:
    summary: str
    held: tuple[HeldGpu, ...] = ()
    complete: bool = True  # False: more holders than the message could name, or one this janitor cannot read
    agent: AgentRun | None = None
    sight: Sight | None = None


def encode_holders(summary: str, held: Sequence[HeldGpu], agent: AgentRun | None = None,
                   sight: Sight | None = None) -> str:
    """The GPU condition's message: the summary, the agent part, then as many holders as fit."""
    entries = [f"{h.minor}|{h.bus_id}|{h.pid}|{h.state}|{_stamp(h.since)}|{h.pod_uid}|{h.namespace}/{h.name}|"
               f"{_COMM_UNSAFE.sub('_', h.comm)[:15]}" for h in sorted(held, key=lambda h: (h.minor, h.pod_uid, h.pid))]
    return _message(summary, _agent_part(agent, sight), _HELD, entries)


def decode_holders(text: str) -> HoldersMessage:
    """The GPU condition's message back; one without the data part names no holder (`complete` False)."""
    before, sep, data = text.rpartition(_HELD)
    if not sep:
        return HoldersMessage(text, complete=False)
    summary, agent, sight = _head(before)
    held: list[HeldGpu] = []
    complete = True
    for entry in data.split(",") if data else ():
        match = _HELD_ENTRY.fullmatch(entry)
        if match is None:
            complete = False  # `+`, or an entry this janitor cannot read: more may be held
            continue
        try:
            since = _parse_time(match[5])
        except ValueError:
            complete = False
            continue
        held.append(HeldGpu(int(match[1]), match[2], int(match[3]), match[4], since, match[6], match[7], match[8],
                            match[9]))
    return HoldersMessage(summary, tuple(held), complete, agent, sight)


def bus_key(text: str) -> tuple[int, int, int, int] | None:
    """A PCI bus id as (domain, bus, device, function), however it is written: the driver's
    `0000:3b:00.0` and dcgm-exporter's `00000000:3B:00.0` are the same GPU. None if unreadable."""
    match = _BUS.fullmatch(text.strip())
    if match is None:
        return None
    return int(match[1] or "0", 16), int(match[2], 16), int(match[3], 16), int(match[4], 16)
