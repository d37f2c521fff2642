"""Policy values decide which workloads they cover, the way docs/policies.md says.

Aspects covered:
- label selectors follow Kubernetes: matchLabels and every matchExpressions operator (NotIn and
  DoesNotExist match a missing key), AND of all parts, empty selector matches everything;
- namespace globs: include, exclude taking precedence, empty include matching nothing;
- `Match` needs every part (namespace, namespace labels, kind, pod labels); no kinds = any kind;
- `first_match` is first match wins per trigger kind: a policy without that trigger is skipped,
  an earlier matching policy hides later ones, no match gives None;
- values are frozen.
"""

from __future__ import annotations

import dataclasses
import datetime as dt

import pytest

from janitor.policy import model

Op = model.Operator


@pytest.mark.parametrize(
    ("requirement", "labels", "expected"),
    [
        pytest.param(model.Requirement("app", Op.IN, ("a", "b")), {"app": "b"}, True, id="in-hit"),
        pytest.param(model.Requirement("app", Op.IN, ("a",)), {"app": "c"}, False, id="in-miss"),
        pytest.param(model.Requirement("app", Op.IN, ("a",)), {}, False, id="in-missing-key"),
        pytest.param(model.Requirement("app", Op.NOT_IN, ("a",)), {"app": "a"}, False, id="notin-hit"),
        pytest.param(model.Requirement("app", Op.NOT_IN, ("a",)), {}, True, id="notin-missing-key"),
        pytest.param(model.Requirement("app", Op.EXISTS), {"app": ""}, True, id="exists"),
        pytest.param(model.Requirement("app", Op.EXISTS), {}, False, id="exists-missing"),
        pytest.param(model.Requirement("app", Op.DOES_NOT_EXIST), {}, True, id="dne"),
        pytest.param(model.Requirement("app", Op.DOES_NOT_EXIST), {"app": "x"}, False, id="dne-present"),
    ],
)
def test_requirement_operators(requirement: model.Requirement, labels: dict[str, str], expected: bool) -> None:
    assert requirement.matches(labels) is expected


def test_selector_is_the_and_of_its_parts() -> None:
    selector = model.LabelSelector(match_labels=(("tier", "gpu"),),
                                   match_expressions=(model.Requirement("keep", Op.DOES_NOT_EXIST),))
    assert selector.matches({"tier": "gpu"})
    assert not selector.matches({"tier": "gpu", "keep": "yes"})
    assert not selector.matches({"tier": "cpu"})
    assert model.LabelSelector().matches({})


@pytest.mark.parametrize(
    ("namespaces", "name", "expected"),
    [
        pytest.param(model.Namespaces(), "anything", True, id="default-all"),
        pytest.param(model.Namespaces(include=()), "anything", False, id="empty-include-inert"),
        pytest.param(model.Namespaces(include=("team-*",)), "team-a", True, id="glob"),
        pytest.param(model.Namespaces(include=("team-?",)), "team-ab", False, id="question-mark"),
        pytest.param(model.Namespaces(include=("team-*",), exclude=("team-infra",)), "team-infra", False,
                     id="exclude-wins"),
        pytest.param(model.Namespaces(include=("team-[ab]",)), "team-c", False, id="set"),
    ],
)
def test_namespace_globs(namespaces: model.Namespaces, name: str, expected: bool) -> None:
    assert namespaces.matches(name) is expected


def match_args(**overrides: object) -> dict[str, object]:
    args: dict[str, object] = {"namespace": "team-a", "namespace_labels": {"tier": "gpu"}, "kind": "Job",
                               "pod_labels": {"app": "train"}}
    return {**args, **overrides}


MATCH = model.Match(
    namespaces=model.Namespaces(include=("team-*",)),
    namespace_selector=model.LabelSelector(match_labels=(("tier", "gpu"),)),
    pod_selector=model.LabelSelector(match_labels=(("app", "train"),)),
    kinds=("Job", "Notebook"),
)


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        pytest.param({}, True, id="all-parts-hold"),
        pytest.param({"namespace": "default"}, False, id="namespace"),
        pytest.param({"namespace_labels": {}}, False, id="namespace-labels"),
        pytest.param({"kind": "Deployment"}, False, id="kind"),
        pytest.param({"pod_labels": {"app": "serve"}}, False, id="pod-labels"),
    ],
)
def test_match_needs_every_part(overrides: dict[str, object], expected: bool) -> None:
    assert MATCH.matches(**match_args(**overrides)) is expected  # type: ignore[arg-type]


def test_no_kinds_means_any_kind() -> None:
    assert model.Match().matches(**match_args(kind="SomeCustomResource"))  # type: ignore[arg-type]


def policy(name: str, *triggers: model.Trigger, include: tuple[str, ...] = ("*",)) -> model.Policy:
    return model.Policy(name=name, triggers=triggers, match=model.Match(namespaces=model.Namespaces(include=include)))


PENDING = model.Pending(after=dt.timedelta(hours=1))
GPU = model.IdleGpu()


@pytest.mark.parametrize(
    ("policies", "kind", "expected"),
    [
        pytest.param([policy("narrow", GPU, include=("team-a",)), policy("broad", GPU)], model.IdleGpu, "narrow",
                     id="earlier-wins"),
        pytest.param([policy("other-team", GPU, include=("team-b",)), policy("broad", GPU)], model.IdleGpu, "broad",
                     id="non-matching-skipped"),
        pytest.param([policy("gpu-only", GPU), policy("pending", PENDING)], model.Pending, "pending",
                     id="per-trigger-kind"),
        pytest.param([policy("gpu-only", GPU)], model.Terminating, None, id="no-policy-for-kind"),
        pytest.param([policy("inert", GPU, include=())], model.IdleGpu, None, id="inert"),
    ],
)
def test_first_match_wins_per_trigger_kind(
    policies: list[model.Policy], kind: type[model.Trigger], expected: str | None
) -> None:
    found = model.first_match(policies, kind, namespace="team-a", namespace_labels={}, workload_kind="Job",
                              pod_labels={})
    assert (found.name if found else None) == expected


def test_values_are_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        policy("p", GPU).name = "q"  # type: ignore[misc]
    assert hash(policy("p", GPU)) == hash(policy("p", GPU))
