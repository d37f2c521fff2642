"""Activity rules: an admin's PromQL that says a workload is in use while its GPU or CPU rests.

Aspects covered:
- a sample naming any pod of the workload makes it in use, whatever its GPUs read, and that use
  vetoes every other policy's mark on it (busy on any signal beats idle on another);
- a sample with another pod's UID (an earlier pod of the same name) is not this pod's use;
- fail closed: a rule that failed, answered partially, answered with samples naming no pod, or was
  not asked, counts as use;
- `minRunningSeconds`: a pod younger than the floor is in use;
- a marked workload whose rule starts answering is unmarked, not reclaimed;
- the policy file: the fields, and clear errors for what is wrong;
- the rule's answer as Prometheus gives it (vector, partial, error) becomes the evidence above.
"""

from __future__ import annotations

import datetime
import uuid

import pytest
from factories import NOW, SCRAPED, ago, obj

from janitor import annotations as ann
from janitor.decide.evidence import (
    ActivityEvidence,
    CpuEvidence,
    CpuUsage,
    Evidence,
    EvidenceWindow,
    GpuEvidence,
    GpuSeries,
    PodKey,
)
from janitor.decide.lifecycle import Step
from janitor.decide.model import (
    NamespaceView,
    ObjectRef,
    Observation,
    OwnerRef,
    PodView,
    SafetyLedger,
    State,
    TriggerKind,
)
from janitor.decide.plan import PlanSettings, plan
from janitor.decide.rails import Caps, Rails
from janitor.decide.reasons import Code
from janitor.policy import load
from janitor.policy.model import Action, Activity, ActivityRule, IdleCpu, IdleGpu, Lifecycle, Mode, Policy

H = datetime.timedelta(hours=1)
RAILS = Rails(caps=Caps(1000, 1000, 1000, 1000))
REQUESTS = ActivityRule("requests", 'sum by (namespace, pod) (rate(http_requests_total[10m])) > 0')
SERVING = Policy("serving", (IdleGpu(),), mode=Mode.ENFORCE, lifecycle=Lifecycle(action=Action.SCALE_TO_ZERO),
                 activity=Activity((REQUESTS,)))


UID = str(uuid.uuid4())


def observed(activity: ActivityEvidence | None, *, started: datetime.datetime = NOW - 3 * H,
             annotations: dict[str, str] | None = None) -> tuple[Observation, ObjectRef, str]:
    deploy = obj("infer", kind="Deployment", namespace="ml", created=ago(days=1), annotations=annotations or {})
    uid = UID
    p = PodView(ref=ObjectRef("Pod", "v1", "ml", "infer-0", uid), resource_version="1", labels={},
                controller=OwnerRef("Deployment", "apps/v1", "infer", deploy.ref.uid), node="gpu-node-1",
                phase="Running", started=started, gpus=1)
    span = EvidenceWindow("DCGM_FI_DEV_GPU_UTIL", 2 * H, datetime.timedelta(seconds=15), NOW)
    idle = GpuEvidence(span, {PodKey("ml", "infer-0"): (GpuSeries("0", 0.0, 480, "gpu-node-1", SCRAPED),)})
    cpu = EvidenceWindow("cpu", 2 * H, datetime.timedelta(minutes=1), NOW)
    quiet = CpuEvidence(cpu, {PodKey("ml", "infer-0"): CpuUsage(0.01, 120, SCRAPED)})
    found = Evidence(gpu={("DCGM_FI_DEV_GPU_UTIL", 2 * H): idle}, cpu={(2 * H, ()): quiet},
                     activity={REQUESTS.expr: activity} if activity is not None else {})
    return Observation(NOW, (deploy,), (p,), {"ml": NamespaceView("ml", {}, {})}, evidence=found), deploy.ref, uid


def verdict(observation: Observation, policies: list[Policy]) -> dict[str, tuple[State, Code]]:
    found = plan(observation, policies, SafetyLedger(), NOW, settings=PlanSettings(rails=RAILS)).findings
    return {f.policy: (f.state, f.reason.code) for f in found if f.trigger is TriggerKind.IDLE_GPU}


def steps(observation: Observation, policies: list[Policy], ref: ObjectRef) -> list[Step]:
    decided = plan(observation, policies, SafetyLedger(), NOW, settings=PlanSettings(rails=RAILS))
    return [c.step for c in decided.changes if c.workload == ref]


def test_without_a_sample_the_gpu_decides_and_the_workload_is_marked() -> None:
    observation, ref, _ = observed(ActivityEvidence())
    assert verdict(observation, [SERVING])["serving"][0] is State.FIRES
    assert steps(observation, [SERVING], ref) == [Step.MARK]


def test_a_sample_naming_a_pod_is_use_and_vetoes_every_policy() -> None:
    observation, ref, uid = observed(ActivityEvidence({PodKey("ml", "infer-0"): frozenset({""})}))
    assert verdict(observation, [SERVING])["serving"] == (State.CLEAR, Code.ACTIVITY)
    assert steps(observation, [SERVING], ref) == []
    # Another enforcing policy without rules, first in order, reads the same idle GPU: the use shown
    # by the serving policy's rule still stops it.
    plain_idle = Policy("idle-gpu", (IdleGpu(),), mode=Mode.ENFORCE, lifecycle=Lifecycle(action=Action.DELETE))
    cpu = Policy("cpu", (IdleCpu(cores=0.5),), mode=Mode.ENFORCE, activity=Activity((REQUESTS,)))
    assert steps(observation, [plain_idle, cpu], ref) == [], "use shown by a rule beats idle on a GPU"
    # The pod's own UID counts too.
    observation, ref, uid = observed(ActivityEvidence({PodKey("ml", "infer-0"): frozenset({uid})}))
    assert verdict(observation, [SERVING])["serving"] == (State.CLEAR, Code.ACTIVITY)


def test_a_sample_with_an_earlier_pods_uid_is_not_this_pods_use() -> None:
    observation, ref, _ = observed(ActivityEvidence({PodKey("ml", "infer-0"): frozenset({"someone-else"})}))
    assert verdict(observation, [SERVING])["serving"][0] is State.FIRES


@pytest.mark.parametrize("answer, code", [
    (ActivityEvidence(failed="bad_data: parse error at char 5"), Code.ACTIVITY_FAILED),
    (ActivityEvidence(failed="a partial answer: store down"), Code.ACTIVITY_FAILED),
    (ActivityEvidence(anonymous=1), Code.ACTIVITY_UNATTRIBUTED),
    (None, Code.ACTIVITY_UNREAD),
])
def test_a_rule_that_says_nothing_reliable_counts_as_use(answer: ActivityEvidence | None, code: Code) -> None:
    observation, ref, _ = observed(answer)
    assert verdict(observation, [SERVING])["serving"] == (State.CLEAR, code)
    assert steps(observation, [SERVING], ref) == []


def test_a_pod_younger_than_min_running_seconds_is_in_use() -> None:
    floor = Policy("nb", (IdleGpu(),), mode=Mode.ENFORCE,
                   activity=Activity(min_running=datetime.timedelta(hours=4)))
    observation, ref, _ = observed(ActivityEvidence(), started=NOW - 3 * H)
    assert verdict(observation, [floor])["nb"] == (State.CLEAR, Code.ACTIVITY_FLOOR)
    observation, ref, _ = observed(ActivityEvidence(), started=NOW - 5 * H)
    assert verdict(observation, [floor])["nb"][0] is State.FIRES


def test_a_marked_workload_whose_rule_answers_is_unmarked() -> None:
    marks = {ann.DEADLINE: ann.format_deadline(NOW + H), ann.POLICY: "serving", ann.MARKED_AT: ann.format_deadline(
        NOW - H)}
    observation, ref, _ = observed(ActivityEvidence({PodKey("ml", "infer-0"): frozenset({""})}), annotations=marks)
    assert steps(observation, [SERVING], ref) == [Step.UNMARK]


POLICY = """policies:
  - name: serving
    mode: enforce
    match: {namespaces: {include: ["*"]}}
    triggers:
      %s: {}
    activity:
%s
"""


def loaded(trigger: str, activity: str) -> load.Loaded:
    policies, errors = load.from_text(POLICY % (trigger, activity), file="serving.yaml")
    return load.Loaded(policies, errors, ())


def test_the_policy_file_reads_rules_and_the_floor() -> None:
    found = loaded("idleGpu", "      minRunningSeconds: 600\n      rules:\n        - name: requests\n"
                              "          expr: 'rate(x[5m]) > 0'\n")
    assert not found.errors
    assert found.policies[0].activity == Activity((ActivityRule("requests", "rate(x[5m]) > 0"),),
                                                  datetime.timedelta(minutes=10))


@pytest.mark.parametrize("trigger, activity, field, problem", [
    ("crashLoop", "      minRunningSeconds: 60", "activity", "give them to a policy with idleGpu or idleCpu"),
    ("idleGpu", "      {}", "activity", "give rules, minRunningSeconds or both"),
    ("idleGpu", "      rules: [{name: a, expr: '  '}]", "activity.rules[0].expr", "is empty"),
    ("idleGpu", "      rules: [{name: a}]", "activity.rules[0].expr", "is required"),
    ("idleGpu", "      rules: [{name: a, expr: x}, {name: a, expr: y}]", "activity.rules[1].name", "given twice"),
    ("idleGpu", "      minRunningSeconds: -1", "activity.minRunningSeconds", "out of range"),
    ("idleGpu", "      rule: []", "activity.rule", "did you mean 'rules'?"),
])
def test_the_policy_file_says_what_is_wrong(trigger: str, activity: str, field: str, problem: str) -> None:
    found = loaded(trigger, activity)
    assert not found.policies
    assert [(e.field, problem in e.problem) for e in found.errors] == [(field, True)], found.errors


# -- from review: paths that would reclaim what a rule shows in use -----------------------------------


@pytest.mark.parametrize("answer", [ActivityEvidence({PodKey("ml", "train-0"): frozenset({""})}),
                                    ActivityEvidence(failed="query timed out")], ids=["named", "failed"])
def test_use_shown_by_a_rule_stops_a_hung_policy_too(answer: ActivityEvidence) -> None:
    """A job at 100 % GPU_UTIL reads busy to the idle policy; its rule's use is no signal a stuck job's
    spin explains, so a hung policy neither marks nor suspends it."""
    from dataclasses import replace

    from test_hung import STUCK, SUSPENDING
    from test_hung import changes as hung_changes
    from test_hung import observed as spinning

    serving = Policy("serving", (IdleGpu(),), mode=Mode.ENFORCE, lifecycle=Lifecycle(action=Action.SUSPEND),
                     activity=Activity((REQUESTS,)))
    for hung in (STUCK, SUSPENDING):
        observation, ref = spinning()
        observation = replace(observation, evidence=replace(observation.evidence, activity={REQUESTS.expr: answer}))
        assert hung_changes(observation, [serving, hung], ref) == []


def test_a_sample_naming_the_pod_by_its_exported_labels_is_its_use() -> None:
    """Behind a ServiceMonitor without honor_labels, `namespace` and `pod` name the exporter and the
    workload's pod is in `exported_namespace` / `exported_pod`."""
    from janitor.observe.activity import pods_named

    labels = {"namespace": "gpu-operator", "pod": "nvidia-dcgm-exporter-x7k2p", "exported_namespace": "ml",
              "exported_pod": "infer-0"}
    assert pods_named([labels]) == ({PodKey("ml", "infer-0"): frozenset({""})}, 0)
    assert pods_named([{"namespace": "ml", "pod": "infer-0"}]) == ({PodKey("ml", "infer-0"): frozenset({""})}, 0)
    assert pods_named([{"job": "requests"}]) == ({}, 1)


def test_a_uid_label_that_is_no_pod_uid_does_not_hide_the_sample() -> None:
    from janitor.observe.activity import pods_named

    own = "0b6f1a9e-8c1d-4a55-9a43-6c1b2f0e7d11"
    assert pods_named([{"namespace": "ml", "pod": "infer-0", "uid": "1000"}]) == (
        {PodKey("ml", "infer-0"): frozenset({""})}, 0)
    assert pods_named([{"namespace": "ml", "pod": "infer-0", "uid": "1000", "pod_uid": own}]) == (
        {PodKey("ml", "infer-0"): frozenset({own})}, 0)
