"""The pending trigger where nodes can be added: a GPU pool scaled to zero is no "never fits".

Aspects covered:
- with no sign of a node autoscaler, a pod that fits no existing node still fires at once;
- where nodes can be added, a GPU pod that fits no existing node (the GPU pool is at zero) waits:
  judged after `after`, its owner reading what it waits on (a scale-up triggered, a node nominated,
  a limit reached, backoff, or no word yet), and never listed in the admins' report;
- it fires at once only when every autoscaler that spoke (and every one found running) last said
  none of its node groups could run it, said so again at least 4 minutes after first saying it,
  and within the last 15 minutes;
- the ways a pod still waiting for a node could be taken for never fitting, each kept waiting: an
  autoscaler in backoff or at its maximum, reasons mixing a predicate with a limit, a "never" said
  once (the autoscaler repeats itself every 5 minutes at most), a "never" no longer said (a loop
  where another pod's scale-up posts nothing on this one, or Events expired), a "never" dated by a
  clock far ahead, a scale-up triggered after the "never", another autoscaler not agreeing or
  running and silent (Karpenter's Nominated is rate-limited), words not understood, no word at all;
- the re-check before acting: a scale-up triggered since the cycle's read stops the action;
- the owner's words on Slack say what the pod waits on.
"""

from __future__ import annotations

import datetime
import uuid
from collections.abc import Sequence

import pytest
from factories import NOW, obj

from janitor import annotations as a
from janitor.decide import recheck, selection
from janitor.decide.autoscaling import AutoscalerNote, Autoscaling, Said
from janitor.decide.model import (
    Finding,
    NamespaceView,
    NodeInfo,
    ObjectRef,
    ObjectView,
    Observation,
    OwnerRef,
    PodState,
    PodView,
    SafetyLedger,
    State,
)
from janitor.decide.plain import plain
from janitor.decide.plan import plan
from janitor.decide.rails import Rails
from janitor.decide.triggers import pending
from janitor.policy.model import Lifecycle, Match, Mode, Namespaces, Pending, Policy

M = datetime.timedelta(minutes=1)
H = 60 * M
CA, KARPENTER = "cluster-autoscaler", "karpenter"
# The GPU pool is scaled to zero: only CPU nodes exist.
CPU_NODES = (NodeInfo("cpu-node-1", {"kubernetes.io/hostname": "cpu-node-1"},
                      allocatable={"cpu": 32, "memory": 2**37}),)
DAY = Policy("stuck", (Pending(after=24 * H),), match=Match(namespaces=Namespaces(("*",))))
ENFORCING = Policy("stuck", (Pending(after=24 * H),), match=Match(namespaces=Namespaces(("*",))), mode=Mode.ENFORCE,
                   lifecycle=Lifecycle(warn_before=H))
STATUS = ("cluster-autoscaler's status ConfigMap kube-system/cluster-autoscaler-status",)
SCHEDULER = "0/1 nodes are available: 1 Insufficient nvidia.com/gpu."
ZERO_TO_ONE = ("gpu-pool 0->1 (max: 4)",)
PREDICATE = "1 Insufficient nvidia.com/gpu, 1 node(s) didn't match Pod's node affinity/selector"


def gpu_pod(minutes: float, owner: ObjectView | None = None, name: str = "train-a") -> PodView:
    """A pod asking for one GPU, unschedulable for `minutes`."""
    return PodView(ObjectRef("Pod", "v1", "team-a", name, str(uuid.uuid4())), "1", {},
                   OwnerRef(owner.ref.kind, owner.ref.api_version, owner.ref.name, owner.ref.uid) if owner else None,
                   None, "Pending", None, 1, state=PodState(
                       scheduled=False, schedule_reason="Unschedulable", schedule_message=SCHEDULER,
                       scheduled_changed=NOW - minutes * M, requests={"cpu": 4, "nvidia.com/gpu": 1}),
                   created=NOW - minutes * M)


def note(source: str, reason: str, said: Said, last: float, first: float | None = None, detail: str = "",
         targets: tuple[str, ...] = ()) -> AutoscalerNote:
    """An autoscaler's note, last said `last` minutes ago, first `first` minutes ago (default: same)."""
    return AutoscalerNote(source, reason, said, NOW - (last if first is None else first) * M, NOW - last * M,
                          detail, targets)


def triggered(last: float) -> AutoscalerNote:
    return note(CA, "TriggeredScaleUp", Said.COMING, last, targets=ZERO_TO_ONE)


def never(last: float, first: float | None = None, source: str = CA) -> AutoscalerNote:
    reason = "NotTriggerScaleUp" if source == CA else "FailedScheduling"
    return note(source, reason, Said.NEVER, last, first, PREDICATE)


def observe(pods: Sequence[PodView], owners: Sequence[ObjectView] = (), *, signs: tuple[str, ...] = STATUS,
            notes: dict[str, tuple[AutoscalerNote, ...]] | None = None) -> Observation:
    return Observation(NOW, objects=tuple(owners), pods=tuple(pods), namespaces={"team-a": NamespaceView("team-a")},
                       nodes=CPU_NODES, nodes_known=True, autoscaling=Autoscaling(signs), autoscaler=notes or {})


def judged(*notes: AutoscalerNote, minutes: float = 3, signs: tuple[str, ...] = STATUS) -> Finding:
    job = obj("train", kind="Job")
    waiting = gpu_pod(minutes, job)
    observation = observe([waiting], [job], signs=signs, notes={waiting.ref.uid: notes} if notes else None)
    [found] = pending.findings(selection.workloads(observation, Rails()), observation, DAY, NOW)
    return found


def test_without_any_autoscaler_a_pod_that_fits_no_node_still_fires_at_once() -> None:
    found = judged(signs=())
    assert found.state is State.FIRES
    assert "no node could ever run it: nvidia.com/gpu: asks 1, a node has 0 (1 node)" in found.why


def test_a_gpu_pod_waiting_for_a_pool_at_zero_is_not_never_fitting() -> None:
    """The defect: 3 minutes Pending under `after: 24h`, no GPU node yet, an autoscaler present."""
    found = judged()
    assert found.state is State.TOO_YOUNG, found.why
    assert "no node could ever run it" not in found.why
    assert ("waiting for a node, not never fitting: no node now could run it (nvidia.com/gpu: asks 1, a node has 0 "
            "(1 node)), but nodes can be added here (cluster-autoscaler's status ConfigMap "
            "kube-system/cluster-autoscaler-status) and no autoscaler has said that none could run it") in found.why
    assert f"unschedulable: {SCHEDULER}, for 3m00s (acted on after 1d0h)" in found.why


@pytest.mark.parametrize(("notes", "words"), [
    pytest.param((triggered(2),), "cluster-autoscaler triggered a scale-up of gpu-pool 0->1 (max: 4) at "
                                  "2026-11-23T11:58:00Z", id="scale-up-triggered"),
    pytest.param((note(KARPENTER, "Nominated", Said.COMING, 1, targets=("nodeclaim/gpu-x7k2",)),),
                 "karpenter nominated nodeclaim/gpu-x7k2 for it at 2026-11-23T11:59:00Z", id="karpenter-nominated"),
    pytest.param((note(CA, "NotTriggerScaleUp", Said.LIMITED, 1, detail="1 max node group size reached"),),
                 "cluster-autoscaler said at 2026-11-23T11:59:00Z: 1 max node group size reached", id="at-max-size"),
    pytest.param((note(CA, "NotTriggerScaleUp", Said.NOT_NOW, 1, detail="1 in backoff after failed scale-up"),),
                 "1 in backoff after failed scale-up", id="backoff"),
    pytest.param((note(CA, "NotTriggerScaleUp", Said.NOT_NOW, 1, detail="1 in backoff after failed scale-up, "
                       "2 node(s) didn't match Pod's node affinity/selector"),),
                 "1 in backoff after failed scale-up, 2 node(s)", id="predicate-beside-backoff"),
    pytest.param((note(KARPENTER, "FailedScheduling", Said.LIMITED, 1,
                       detail='all available instance types exceed limits for nodepool: "gpu"'),),
                 "exceed limits for nodepool", id="karpenter-limits"),
    pytest.param((note(CA, "NotTriggerScaleUp", Said.UNKNOWN, 1, detail=""),), "cluster-autoscaler said at",
                 id="words-not-understood"),
    pytest.param((never(1, first=2),), "cluster-autoscaler says none of the nodes it can add could run it "
                 f"({PREDICATE}), since 2026-11-23T11:58:00Z; that counts once it has said so for 4m00s",
                 id="never-said-once"),
    pytest.param((never(20, first=30),), "cluster-autoscaler said at 2026-11-23T11:40:00Z that none of the nodes it "
                 "can add could run it", id="never-no-longer-said"),
    pytest.param((never(-30, first=-25),), "cluster-autoscaler said at 2026-11-23T12:30:00Z that none",
                 id="never-dated-by-a-clock-far-ahead"),
    pytest.param((never(1, first=10), triggered(0.5)), "triggered a scale-up", id="scale-up-after-never"),
    pytest.param((triggered(6), never(1, first=10)), "since 2026-11-23T11:59:00Z; that counts once",
                 id="never-again-since-a-scale-up"),
    pytest.param((never(1, first=10), note(KARPENTER, "FailedScheduling", Said.LIMITED, 2,
                                           detail="node limits have been exhausted for nodepool")),
                 "karpenter said at", id="another-autoscaler-disagrees"),
])
def test_a_pod_still_waiting_for_a_node_is_never_taken_for_never_fitting(
        notes: tuple[AutoscalerNote, ...], words: str) -> None:
    found = judged(*notes)
    assert found.state is State.TOO_YOUNG, found.why
    assert "waiting for a node, not never fitting" in found.why and words in found.why, found.why
    old = judged(*notes, minutes=25 * 60)  # past `after`: stuck, as any unschedulable pod, yet not never fitting
    assert old.state is State.FIRES and "no node could ever run it" not in old.why and "for 1d1h" in old.why


def test_a_never_from_one_autoscaler_while_another_runs_silent_is_waiting() -> None:
    """A cluster moving from cluster-autoscaler to Karpenter runs both: cluster-autoscaler's CPU
    groups say never to a GPU pod that Karpenter's GPU NodePool serves, and Karpenter's Nominated
    is rate-limited (5/s): a pod it launches a node for may hear nothing from it."""
    job = obj("train", kind="Job")
    waiting = gpu_pod(10, job)
    observation = observe([waiting], [job], notes={waiting.ref.uid: (never(0.5, first=5.5),)})
    both = Observation(NOW, observation.objects, observation.pods, observation.namespaces, CPU_NODES, True,
                       autoscaling=Autoscaling(STATUS + ("Karpenter's API group karpenter.sh",),
                                               (CA, KARPENTER)), autoscaler=observation.autoscaler)
    [found] = pending.findings(selection.workloads(both, Rails()), both, DAY, NOW)
    assert found.state is State.TOO_YOUNG, found.why
    assert "but karpenter runs here too and has said nothing about it" in found.why
    karpenter_too = Observation(NOW, both.objects, both.pods, both.namespaces, CPU_NODES, True,
                                autoscaling=both.autoscaling, autoscaler={waiting.ref.uid: (
                                    never(0.5, first=5.5), never(1, first=7, source=KARPENTER))})
    [found] = pending.findings(selection.workloads(karpenter_too, Rails()), karpenter_too, DAY, NOW)
    assert found.state is State.FIRES, found.why


def test_no_word_on_this_pod_while_others_have_events_is_waiting() -> None:
    """cluster-autoscaler posts nothing on a pod in a loop where another pod triggered a scale-up,
    and its Events expire after an hour: silence about a pod proves nothing."""
    found = judged(signs=("autoscaler Events on pods",))
    assert found.state is State.TOO_YOUNG and "no autoscaler has said that none could run it" in found.why


@pytest.mark.parametrize("notes", [
    pytest.param((never(0.5, first=5.5),), id="cluster-autoscaler-said-it-twice"),
    pytest.param((never(0.5, first=5.5, source=KARPENTER),), id="karpenter-said-it-twice"),
    pytest.param((triggered(40), never(0.5, first=5.5)), id="never-since-an-old-scale-up"),
    pytest.param((never(0.5, first=5.5), never(2, first=8, source=KARPENTER)), id="both-say-never"),
])
def test_a_pod_every_autoscaler_keeps_saying_no_node_could_run_fires_at_once(
        notes: tuple[AutoscalerNote, ...]) -> None:
    found = judged(*notes)
    assert found.state is State.FIRES, found.why
    assert "no node could ever run it: nvidia.com/gpu: asks 1, a node has 0 (1 node); and " in found.why
    assert " can add no node that could (" in found.why
    assert PREDICATE in found.why


def test_the_admins_report_lists_only_what_the_autoscaler_proved() -> None:
    proved, waiting = obj("proved", kind="Job"), obj("waiting", kind="Job")
    a, b = gpu_pod(3, proved, "proved-a"), gpu_pod(3, waiting, "waiting-a")
    seen = observe([a, b], [proved, waiting], notes={a.ref.uid: (never(0.5, first=5.5),), b.ref.uid: (triggered(2),)})
    cycle = plan(seen, [DAY], SafetyLedger(), NOW)
    [line] = dict(cycle.admin_report.sections)["Workloads that can never fit"]
    assert line.startswith(f"{proved.ref} (")


def test_words_for_the_owner_say_what_the_pod_waits_on() -> None:
    [pod_judgement] = judged(triggered(2), minutes=25 * 60).pods
    words = plain(pod_judgement.why)
    assert "waiting for a node to be added" in words and "gpu-pool 0->1" in words, words
    assert "no node could ever run it" not in words
    [proved] = judged(never(0.5, first=5.5)).pods
    words = plain(proved.why)
    assert "no node in the cluster could ever run it" in words and "cluster-autoscaler cannot add one" in words, words


def test_a_scale_up_triggered_since_the_cycles_read_stops_the_action() -> None:
    """Marked never fitting on the autoscaler's word, warned, due; then the autoscaler triggers a
    scale-up (an admin fixed the node group): the re-check right before acting finds it waiting."""
    warned, deadline = NOW - 2 * H, NOW - H
    notes = {a.POLICY: "stuck", a.DEADLINE: a.format_expires(deadline), a.MARKED_AT: a.format_expires(warned),
             a.REASON: "stuck", a.MARKED_UID: "uid-train", a.WARNED_AT: a.format_expires(warned),
             a.WARNED_VIA: f"owner D0ALICE/{warned.timestamp():.6f}",
             a.WARNED_OF: f"delete {a.format_expires(deadline)}", "janitor/owner": "alice@lab.example"}
    job = obj("train", kind="Job", annotations=notes, uid="uid-train")
    waiting = gpu_pod(180, job)
    read = observe([waiting], [job], notes={waiting.ref.uid: (never(0.5, first=5.5),)})
    [act] = plan(read, [ENFORCING], SafetyLedger(), NOW).actions
    assert act.target == job.ref
    fresh = observe([waiting], [job], notes={waiting.ref.uid: (never(0.5, first=5.5), triggered(0.2))})
    again = recheck.still_due(act, fresh, [ENFORCING], NOW)
    assert again.action is None and "triggered a scale-up of gpu-pool 0->1" in str(again.why), again.why
