"""Policy files become `Policy` values, and every mistake is reported where it is.

Aspects covered:
- a full example with every field round-trips into the expected frozen values; omitted fields
  take their documented defaults (shadow mode, signal-dependent GPU threshold, minPodAge = window);
- each kind of mistake (wrong type, out of range, bad duration, 'forever', zero, unknown field,
  repeated key, missing field, bad glob, bad selector, DaemonSet, no triggers, empty file, YAML
  syntax) gives exactly one `file:line: field:` error at the right line and field;
- unknown fields suggest the closest known field (typos never fall back to a default);
- all errors of a file are collected, sorted by line, and any error empties `policies`;
- directories load `*.yaml`/`*.yml` sorted by name, skipping hidden files and other suffixes;
  policies keep file order; duplicate names across files and within a file are errors;
- missing paths and directories without policy files are errors, not silence;
- whatever the input, the loader returns errors and raises nothing: durations past the bound
  (100 years: `maxExtension: 99999999d`), time zones that are directories of the zone database
  (`Europe`) or too long, numbers of 5,000 digits, 2,000 nested brackets (and 100,000), an alias
  bomb, a recursive alias, a file over 1 MiB, NUL bytes; the daemon's reload keeps the last good
  set when a file turns into one of these;
- every example in policies/ is valid, in shadow mode, and inert (matches no namespace).
"""

from __future__ import annotations

import datetime as dt
import textwrap
from pathlib import Path

import pytest

from janitor import annotations
from janitor.policy import load, model

ROOT = Path(__file__).resolve().parents[2]
H = dt.timedelta(hours=1)


def parse(text: str, file: str = "p.yaml") -> tuple[tuple[model.Policy, ...], tuple[load.PolicyError, ...]]:
    return load.from_text(textwrap.dedent(text), file=file, parse_duration=annotations.parse_ttl)


def from_paths(*paths: Path | str) -> load.Loaded:
    return load.from_paths(paths, parse_duration=annotations.parse_ttl)


FULL = """\
policies:
  - name: idle-gpu-notebooks
    description: Notebooks holding idle GPUs.
    mode: enforce
    match:
      namespaces:
        include: ["team-*", "ml-research"]
        exclude: ["team-infra"]
      namespaceSelector:
        matchLabels: {example.com/tier: interactive}
      podSelector:
        matchExpressions:
          - {key: app, operator: In, values: [jupyter, vscode]}
          - {key: example.com/keep, operator: DoesNotExist}
      kinds: [Notebook, Pod]
    triggers:
      idleGpu:
        signal: DCGM_FI_PROF_GR_ENGINE_ACTIVE
        threshold: 0.05
        window: 4h
        minCoverage: 0.9
        minPodAge: 1h
      idleCpu:
        cores: 0.1
        window: 8h
        ignoreContainers: [istio-proxy]
    lifecycle:
      warnBefore: 12h
      remindEvery: 0s
      action: suspend
      maxExtension: 2d
      honourOptOut: false
"""


def test_full_example_round_trips() -> None:
    policies, errors = parse(FULL)
    assert errors == ()
    assert policies == (
        model.Policy(
            name="idle-gpu-notebooks",
            description="Notebooks holding idle GPUs.",
            mode=model.Mode.ENFORCE,
            match=model.Match(
                namespaces=model.Namespaces(include=("team-*", "ml-research"), exclude=("team-infra",)),
                namespace_selector=model.LabelSelector(match_labels=(("example.com/tier", "interactive"),)),
                pod_selector=model.LabelSelector(match_expressions=(
                    model.Requirement("app", model.Operator.IN, ("jupyter", "vscode")),
                    model.Requirement("example.com/keep", model.Operator.DOES_NOT_EXIST),
                )),
                kinds=("Notebook", "Pod"),
            ),
            triggers=(
                model.IdleGpu(signal=model.GpuSignal.GR_ENGINE_ACTIVE, threshold=0.05, window=4 * H,
                              min_coverage=0.9, min_pod_age=H),
                model.IdleCpu(cores=0.1, window=8 * H, min_coverage=0.8, min_pod_age=8 * H,
                              ignore_containers=("istio-proxy",)),
            ),
            lifecycle=model.Lifecycle(warn_before=12 * H, remind_every=dt.timedelta(0),
                                      action=model.Action.SUSPEND, max_extension=48 * H, honour_opt_out=False),
            source="p.yaml:2",
        ),
    )


def test_defaults_for_a_minimal_policy() -> None:
    (policy,), errors = parse("""\
        policies:
          - name: minimal
            match: {namespaces: {include: ["*"]}}
            triggers:
              idleGpu: {window: 3h}
              pending: {after: 2d}
        """)
    assert errors == ()
    assert policy.mode is model.Mode.SHADOW
    assert policy.lifecycle == model.Lifecycle()
    assert policy.match.namespaces.exclude == () and policy.match.kinds == ()
    gpu = policy.trigger(model.IdleGpu)
    assert gpu == model.IdleGpu(threshold=5.0, window=3 * H, min_coverage=0.8, min_pod_age=3 * H)
    assert policy.trigger(model.Pending) == model.Pending(after=48 * H)
    assert policy.trigger(model.Terminating) is None


def test_crash_loop_sidecars_are_read_in_order_once_each() -> None:
    [policy], errors = parse(with_line7(
        "      crashLoop: {restarts: 3, window: 30m, ignoreContainers: [istio-proxy, linkerd-proxy, istio-proxy]}"))
    assert errors == ()
    assert policy.trigger(model.CrashLoop) == model.CrashLoop(restarts=3, window=dt.timedelta(minutes=30),
                                                              ignore_containers=("istio-proxy", "linkerd-proxy"))
    [default], _ = parse(with_line7("      crashLoop: {}"))
    assert default.trigger(model.CrashLoop) == model.CrashLoop()


def test_lifecycle_working_hours_and_grace() -> None:
    [policy], errors = parse(BASE + """    lifecycle:
      warnBefore: 24h
      minGrace: 2h
      adminFallbackCounts: true
      action: stop
      workingHours: {timeZone: Europe/Berlin, days: [Mon, Tue, Wed], hours: "08:30-17:00", grace: 6h}
""")
    assert errors == ()
    life = policy.lifecycle
    assert life.grace == dt.timedelta(hours=2) and life.admin_fallback_counts and life.action is model.Action.STOP
    assert life.working_hours == model.WorkingHours("Europe/Berlin", (0, 1, 2), dt.time(8, 30), dt.time(17),
                                                    dt.timedelta(hours=6))
    [default], _ = parse(BASE)
    assert default.lifecycle.grace == default.lifecycle.warn_before and default.lifecycle.working_hours is None


def test_gr_engine_threshold_defaults_to_its_own_range() -> None:
    (policy,), _ = parse("""\
        policies:
          - name: mig
            match: {namespaces: {include: ["*"]}}
            triggers: {idleGpu: {signal: DCGM_FI_PROF_GR_ENGINE_ACTIVE}}
        """)
    assert policy.triggers[0] == model.IdleGpu(signal=model.GpuSignal.GR_ENGINE_ACTIVE, threshold=0.05)


# Each case replaces the marked line of BASE (line 7, the idleGpu body) or the whole policy.
BASE = """\
policies:
  - name: base
    match:
      namespaces:
        include: ["*"]
    triggers:
      idleGpu: {window: 2h}
"""


def with_line7(line: str) -> str:
    return BASE.replace("      idleGpu: {window: 2h}\n", line + "\n")


ERROR_CASES = [
    pytest.param(with_line7("      idleGpu: {window: 30 minutes}"),
                 "p.yaml:7: triggers.idleGpu.window: '30 minutes' is not a duration (e.g. 30m, 8h, 7d)",
                 id="duration-words"),
    pytest.param(with_line7("      idleGpu: {window: 30}"),
                 "p.yaml:7: triggers.idleGpu.window: 30 is not a duration", id="duration-number"),
    pytest.param(with_line7("      pending: {after: forever}"),
                 "p.yaml:7: triggers.pending.after: 'forever' is not allowed here", id="duration-forever"),
    pytest.param(with_line7("      terminating: {after: 0s}"),
                 "p.yaml:7: triggers.terminating.after: must be longer than 0s", id="duration-zero"),
    pytest.param(with_line7("      idleGpu: {threshold: 101}"),
                 "p.yaml:7: triggers.idleGpu.threshold: 101 is out of range: use a number from 0 to 100",
                 id="gpu-util-over-100"),
    pytest.param(with_line7("      idleGpu: {signal: DCGM_FI_PROF_GR_ENGINE_ACTIVE, threshold: 5}"),
                 "p.yaml:7: triggers.idleGpu.threshold: 5 is out of range: use a number from 0 to 1 for "
                 "DCGM_FI_PROF_GR_ENGINE_ACTIVE", id="gr-engine-over-1"),
    pytest.param(with_line7("      idleGpu: {threshold: -1}"),
                 "p.yaml:7: triggers.idleGpu.threshold: -1 is out of range", id="negative"),
    pytest.param(with_line7("      idleGpu: {threshold: .nan}"),
                 "p.yaml:7: triggers.idleGpu.threshold: .nan is out of range", id="nan"),
    pytest.param(with_line7("      idleGpu: {threshold: '5'}"),
                 "p.yaml:7: triggers.idleGpu.threshold: '5' is not a number from 0 to 100", id="quoted-number"),
    pytest.param(with_line7("      idleGpu: {minCoverage: 1.5}"),
                 "p.yaml:7: triggers.idleGpu.minCoverage: 1.5 is out of range: use a number from 0 to 1",
                 id="coverage-over-1"),
    pytest.param(with_line7("      idleGpu: {signal: DCGM_FI_DEV_SM_ACTIVE}"),
                 "p.yaml:7: triggers.idleGpu.signal: 'DCGM_FI_DEV_SM_ACTIVE' is not one of "
                 "DCGM_FI_DEV_GPU_UTIL | DCGM_FI_PROF_GR_ENGINE_ACTIVE", id="unknown-signal"),
    pytest.param(with_line7("      idleGpu: {treshold: 5}"),
                 "p.yaml:7: triggers.idleGpu.treshold: unknown field; did you mean 'threshold'?", id="typo"),
    pytest.param(with_line7("      idleGpu: {window: 2h, window: 3h}"),
                 "p.yaml:7: triggers.idleGpu.window: is given twice; keep one", id="repeated-key"),
    pytest.param(with_line7("      idleGPU: {window: 2h}"),
                 "p.yaml:7: triggers.idleGPU: unknown field; did you mean 'idleGpu'?", id="trigger-typo"),
    pytest.param(with_line7("      idleCpu: {fractionOfRequest: 1.2}"),
                 "p.yaml:7: triggers.idleCpu.fractionOfRequest: 1.2 is out of range: use a number from 0 to 1",
                 id="fraction-over-1"),
    pytest.param(with_line7("      idleCpu: {window: 2h}"),
                 "p.yaml:7: triggers.idleCpu: give exactly one of cores (absolute) or fractionOfRequest",
                 id="cpu-no-threshold"),
    pytest.param(with_line7("      idleCpu: {cores: 1, fractionOfRequest: 0.1}"),
                 "p.yaml:7: triggers.idleCpu: give exactly one of", id="cpu-both-thresholds"),
    pytest.param(with_line7("      idleCpu: {cores: 1, ignoreContainers: istio-proxy}"),
                 "p.yaml:7: triggers.idleCpu.ignoreContainers: expected a list, got 'istio-proxy'", id="not-a-list"),
    pytest.param(with_line7("      pending: {}"),
                 "p.yaml:7: triggers.pending.after: is required", id="missing-after"),
    pytest.param(with_line7("      crashLoop: {ignoreContainers: istio-proxy}"),
                 "p.yaml:7: triggers.crashLoop.ignoreContainers: expected a list, got 'istio-proxy'",
                 id="crash-loop-sidecars-not-a-list"),
    pytest.param(with_line7("      crashLoop: {ignoreContainers: [Istio_Proxy]}"),
                 "p.yaml:7: triggers.crashLoop.ignoreContainers[0]: 'Istio_Proxy' is not a container name",
                 id="crash-loop-sidecar-not-a-name"),
    pytest.param(with_line7("      crashLoop: {sidecars: [istio-proxy]}"),
                 "p.yaml:7: triggers.crashLoop.sidecars: unknown field; known fields: restarts, window, "
                 "ignoreContainers", id="crash-loop-unknown-field"),
    pytest.param(with_line7("      {}"),
                 "p.yaml:7: triggers: give at least one trigger: idleGpu, idleCpu, pending, terminating",
                 id="no-triggers"),
    pytest.param(BASE.replace('["*"]', '["Team-*"]'),
                 "p.yaml:5: match.namespaces.include[0]: 'Team-*' is not a namespace glob", id="glob-upper-case"),
    pytest.param(BASE.replace('["*"]', '["team-[ab"]'),
                 "p.yaml:5: match.namespaces.include[0]: 'team-[ab' has an unbalanced '['", id="glob-unbalanced"),
    pytest.param(BASE.replace('        include: ["*"]\n', '        exclude: ["*"]\n'),
                 "p.yaml:5: match.namespaces.include: is required", id="include-required"),
    pytest.param(BASE.replace("    match:\n      namespaces:\n        include: [\"*\"]\n", ""),
                 "p.yaml:2: match: is required", id="match-required"),
    pytest.param(BASE.replace('include: ["*"]', 'include: ["*"]\n      kinds: [DaemonSet]'),
                 "p.yaml:6: match.kinds[0]: DaemonSet pods are never candidates", id="daemonset"),
    pytest.param(BASE.replace('include: ["*"]', 'include: ["*"]\n      kinds: [deployment]'),
                 "p.yaml:6: match.kinds[0]: 'deployment' is not a Kubernetes kind", id="kind-lower-case"),
    pytest.param(BASE.replace('include: ["*"]', 'include: ["*"]\n      podSelector: {matchLabels: {gpu: true}}'),
                 "p.yaml:6: match.podSelector.matchLabels.gpu: true is not a label value", id="label-bool"),
    pytest.param(BASE.replace('include: ["*"]', 'include: ["*"]\n      podSelector: {matchLabels: {"a b": x}}'),
                 "p.yaml:6: match.podSelector.matchLabels: 'a b' is not a label key", id="label-key"),
    pytest.param(BASE.replace('include: ["*"]',
                              'include: ["*"]\n      namespaceSelector:\n        matchExpressions:\n'
                              '          - {key: team, operator: In}'),
                 "p.yaml:8: match.namespaceSelector.matchExpressions[0].values: In needs a non-empty list",
                 id="in-without-values"),
    pytest.param(BASE.replace('include: ["*"]',
                              'include: ["*"]\n      namespaceSelector:\n        matchExpressions:\n'
                              '          - {key: team, operator: Exists, values: [a]}'),
                 "p.yaml:8: match.namespaceSelector.matchExpressions[0].values: Exists takes no values",
                 id="exists-with-values"),
    pytest.param(BASE.replace('include: ["*"]',
                              'include: ["*"]\n      namespaceSelector:\n        matchExpressions:\n'
                              '          - {key: team, operator: Gt, values: ["1"]}'),
                 "p.yaml:8: match.namespaceSelector.matchExpressions[0].operator: 'Gt' is not one of "
                 "In | NotIn | Exists | DoesNotExist", id="bad-operator"),
    pytest.param(BASE.replace("name: base", "name: Base_1"),
                 "p.yaml:2: name: 'Base_1' is not a lower-case DNS label", id="bad-name"),
    pytest.param(BASE.replace("name: base", "name: base\n    mode: enforced"),
                 "p.yaml:3: mode: 'enforced' is not one of shadow | enforce", id="bad-mode"),
    pytest.param(BASE + "    lifecycle: {action: nuke}\n",
                 "p.yaml:8: lifecycle.action: 'nuke' is not one of delete | suspend | scale-to-zero", id="bad-action"),
    pytest.param(BASE + "    lifecycle: {honorOptOut: true}\n",
                 "p.yaml:8: lifecycle.honorOptOut: unknown field; did you mean 'honourOptOut'?", id="us-spelling"),
    pytest.param(BASE + "    lifecycle: {honourOptOut: 'no'}\n",
                 "p.yaml:8: lifecycle.honourOptOut: 'no' is not true or false", id="bool-quoted"),
    pytest.param(BASE + "    lifecycle: {workingHours: {timeZone: Europe/Berlinn}}\n",
                 "p.yaml:8: lifecycle.workingHours.timeZone: 'Europe/Berlinn' is not an IANA time zone",
                 id="bad-zone"),
    pytest.param(BASE + "    lifecycle: {workingHours: {timeZone: UTC, days: [Monday]}}\n",
                 "p.yaml:8: lifecycle.workingHours.days[0]: 'Monday' is not a day: use Mon, Tue", id="bad-day"),
    pytest.param(BASE + "    lifecycle: {workingHours: {timeZone: UTC, hours: \"18:00-09:00\"}}\n",
                 "p.yaml:8: lifecycle.workingHours.hours: '18:00-09:00' ends before it starts", id="hours-reversed"),
    pytest.param(BASE + "    lifecycle: {workingHours: {days: [Mon]}}\n",
                 "p.yaml:8: lifecycle.workingHours.timeZone: is required", id="zone-required"),
    pytest.param(BASE + "    lifecycle: {action: stop, adminFallbackCounts: 1}\n",
                 "p.yaml:8: lifecycle.adminFallbackCounts: 1 is not true or false", id="fallback-not-bool"),
    pytest.param(BASE + "    lifecycle: {warnBefore: 0s}\n",
                 "p.yaml:8: lifecycle.warnBefore: must be longer than 0s", id="warn-zero"),
    pytest.param(BASE + "    lifecycle: {maxExtension: 99999999d}\n",
                 "p.yaml:8: lifecycle.maxExtension: '99999999d' is out of range: at most 36500d (100 years)",
                 id="max-extension-past-the-bound"),
    pytest.param(with_line7("      idleGpu: {window: 36501d}"),
                 "p.yaml:7: triggers.idleGpu.window: '36501d' is out of range: at most 36500d (100 years)",
                 id="window-past-the-bound"),
    pytest.param(with_line7("      pending: {after: " + "9" * 5000 + "s}"),
                 "p.yaml:7: triggers.pending.after: '9999999999", id="duration-of-5000-digits"),
    pytest.param(BASE + "    lifecycle: {workingHours: {timeZone: Europe}}\n",
                 "p.yaml:8: lifecycle.workingHours.timeZone: 'Europe' is not an IANA time zone",
                 id="zone-directory"),
    pytest.param(BASE + "    lifecycle: {workingHours: {timeZone: " + "a" * 300 + "}}\n",
                 "p.yaml:8: lifecycle.workingHours.timeZone: 'aaaaa", id="zone-300-chars"),
    pytest.param(with_line7("      idleGpu: {threshold: " + "9" * 5000 + "}"),
                 "p.yaml:7: triggers.idleGpu.threshold: 99999", id="number-of-5000-digits"),
    pytest.param(with_line7("      crashLoop: {restarts: " + "9" * 5000 + "}"),
                 "p.yaml:7: triggers.crashLoop.restarts: 99999", id="restarts-of-5000-digits"),
    pytest.param(BASE.replace("policies:\n", "policy:\n"),
                 "p.yaml:1: policy: unknown field; did you mean 'policies'?", id="top-level-typo"),
    pytest.param("policies: []\n", "p.yaml:1: policies: expected a non-empty list of policies, got a list",
                 id="no-policies"),
    pytest.param("policies:\n  - just-a-name\n",
                 "p.yaml:2: policies[0]: expected a policy (a mapping with name, match, triggers), got 'just-a-name'",
                 id="policy-not-mapping"),
    pytest.param("- name: x\n", "p.yaml:1: expected a mapping (policies), got a list", id="top-level-list"),
    pytest.param("", "p.yaml:1: the file is empty", id="empty"),
    pytest.param("# nothing but a comment\n", "p.yaml:1: the file is empty", id="only-comments"),
    pytest.param("policies:\n  - name: x\n   oops: [\n", "p.yaml:3: not valid YAML", id="yaml-syntax"),
    pytest.param("a: 1\n---\nb: 2\n", "p.yaml:2: not valid YAML", id="two-documents"),
]


@pytest.mark.parametrize(("text", "expected"), ERROR_CASES)
def test_each_mistake_is_one_error_at_its_line_and_field(text: str, expected: str) -> None:
    policies, errors = parse(text)
    assert [str(e) for e in errors if str(e).startswith(expected)] == [str(errors[0])], errors
    assert len(errors) == 1, [str(e) for e in errors]
    assert policies == ()
    assert len(str(errors[0])) < 400  # a huge value is quoted cut short


def _one_error(text: str) -> load.PolicyError:
    policies, errors = load.from_text(text, file="p.yaml")
    assert policies == () and len(errors) == 1, [str(e) for e in errors]
    assert len(str(errors[0])) < 400
    return errors[0]


@pytest.mark.parametrize("depth", [65, 2_000, 100_000])
@pytest.mark.parametrize("opening, closing", [("[", "]"), ("{a: ", "}")], ids=["lists", "mappings"])
def test_deep_nesting_is_an_error_not_a_crash(depth: int, opening: str, closing: str) -> None:
    error = _one_error("policies: " + opening * depth + closing * depth + "\n")
    assert str(error).startswith("p.yaml:1: too deep: nested more than 64 levels")


def test_deep_block_nesting_is_an_error_not_a_crash() -> None:
    text = "".join(" " * i + "a:\n" for i in range(1_000))  # 500 kB
    error = _one_error(text)
    assert error.line == 64 and "nested more than 64 levels" in error.problem  # the 64th key holds the 65th level


def test_nesting_as_deep_as_a_real_policy_is_fine() -> None:
    inner = "[" * 50 + "]" * 50
    error = _one_error(BASE.replace('include: ["*"]', f"include: {inner}"))
    assert "nested" not in str(error)


def test_an_alias_bomb_is_bounded() -> None:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, 10)]
    lines += ["policies: *a9"]  # 10**10 items once expanded
    error = _one_error("\n".join(lines) + "\n")
    assert "alias" in error.problem and "20000 values" in error.problem.replace(",", "")


def test_a_file_of_too_many_values_is_an_error_without_reading_it_all() -> None:
    text = "policies: [" + ", ".join(["1"] * 30_000) + "]\n"
    error = _one_error(text)
    assert error.line == 1 and error.problem.startswith("too large: more than 20,000 values")


def test_aliases_within_the_bound_still_work() -> None:
    text = """\
        match: &all {namespaces: {include: ["*"]}}
        policies:
          - {name: a, match: *all, triggers: {pending: {after: 1h}}}
          - {name: b, match: *all, triggers: {terminating: {after: 1h}}}
        """
    _, errors = parse(text)
    assert [e.field for e in errors] == ["match"]  # the anchor's own key is unknown; the aliases resolve


def test_a_recursive_alias_is_an_error() -> None:
    error = _one_error("policies: &a [*a]\n")
    assert error.line == 1 and "refers to itself" in error.problem


def test_a_file_over_1_mib_is_an_error(tmp_path: Path) -> None:
    big = BASE + "# " + "x" * (1 << 20) + "\n"
    error = _one_error(big)
    assert error.line is None and "larger than 1 MiB" in error.problem
    (tmp_path / "big.yaml").write_text(big)
    (error,) = from_paths(tmp_path / "big.yaml").errors
    assert str(error).startswith(f"{tmp_path / 'big.yaml'}: the file is larger than 1 MiB")


@pytest.mark.parametrize("text", ["policies: \x00\n", "policies: [\ud800]\n", "\ufeffpolicies: 1\n", "\x85" * 10])
def test_odd_characters_are_errors(text: str) -> None:
    _, errors = load.from_text(text, file="p.yaml")
    assert errors and all(isinstance(e, load.PolicyError) for e in errors)


def test_the_daemon_keeps_its_last_good_policies_when_a_file_breaks_the_loader(tmp_path: Path) -> None:
    from janitor.cycle import Memory, load_policies
    from janitor.settings import Settings

    path = write(tmp_path, "p.yaml", "good")
    settings = Settings(policy_paths=(str(path),))
    memory, reloaded = load_policies(settings, Memory())
    assert reloaded is True and memory.policies is not None and [p.name for p in memory.policies] == ["good"]
    for broken in ("policies: " + "[" * 2_000 + "]" * 2_000, BASE + "    lifecycle: {maxExtension: 99999999d}\n",
                   BASE.replace("window: 2h", "threshold: " + "9" * 5_000)):
        path.write_text(broken)
        after, reloaded = load_policies(settings, memory)
        assert reloaded is False and after.policies == memory.policies and len(after.policy_errors) == 1


def test_error_fields_are_structured() -> None:
    _, (error,) = parse(with_line7("      idleGpu: {window: 30 minutes}"))
    assert (error.file, error.line, error.field) == ("p.yaml", 7, "triggers.idleGpu.window")
    assert error.problem == "'30 minutes' is not a duration (e.g. 30m, 8h, 7d)"
    assert isinstance(error, Exception)


def test_all_errors_of_a_file_are_collected_in_line_order() -> None:
    text = """\
        policies:
          - name: one
            mode: loud
            match: {namespaces: {include: ["*"]}}
            triggers:
              idleGpu: {treshold: 5, window: soon}
          - name: two
            match: {namespaces: {include: ["*"]}}
            triggers: {terminating: {after: 5 min}}
        """
    _, errors = parse(text)
    assert [(e.line, e.field) for e in errors] == [
        (3, "mode"),
        (6, "triggers.idleGpu.treshold"),
        (6, "triggers.idleGpu.window"),
        (9, "triggers.terminating.after"),
    ]


def test_valid_policies_of_a_broken_file_are_still_reported_by_from_text_but_not_loaded(tmp_path: Path) -> None:
    text = BASE + "  - name: broken\n    match: {namespaces: {include: ['*']}}\n    triggers: {pending: {after: x}}\n"
    policies, errors = parse(text)
    assert [p.name for p in policies] == ["base"] and len(errors) == 1
    (tmp_path / "a.yaml").write_text(text)
    loaded = from_paths(tmp_path)
    assert loaded.policies == () and len(loaded.errors) == 1  # never a partial set


def write(directory: Path, name: str, *policy_names: str) -> Path:
    body = "".join(
        f"  - name: {n}\n    match: {{namespaces: {{include: ['*']}}}}\n    triggers: {{pending: {{after: 1h}}}}\n"
        for n in policy_names
    )
    path = directory / name
    path.write_text("policies:\n" + body)
    return path


def test_directory_loads_by_file_name_then_file_order(tmp_path: Path) -> None:
    write(tmp_path, "20-b.yaml", "b1", "b2")
    write(tmp_path, "10-a.yml", "a1", "a2")
    write(tmp_path, "30-c.yaml", "c1")
    write(tmp_path, ".hidden.yaml", "hidden")  # ConfigMap mounts keep ..data and friends
    write(tmp_path, "notes.txt", "txt")
    (tmp_path / "sub.yaml").mkdir()
    loaded = from_paths(tmp_path)
    assert loaded.errors == ()
    assert [p.name for p in loaded.policies] == ["a1", "a2", "b1", "b2", "c1"]
    assert [p.name for p in loaded.files] == ["10-a.yml", "20-b.yaml", "30-c.yaml"]


def test_paths_keep_the_order_given_and_are_read_once(tmp_path: Path) -> None:
    z = write(tmp_path, "z.yaml", "from-z")
    write(tmp_path, "a.yaml", "from-a")
    loaded = from_paths(z, tmp_path)
    assert [p.name for p in loaded.policies] == ["from-z", "from-a"]


def test_duplicate_names_across_files(tmp_path: Path) -> None:
    write(tmp_path, "a.yaml", "gpu")
    write(tmp_path, "b.yaml", "other", "gpu")
    loaded = from_paths(tmp_path)
    assert [str(e) for e in loaded.errors] == [
        f"{tmp_path / 'b.yaml'}:5: name: 'gpu' is already defined at {tmp_path / 'a.yaml'}:2; "
        "policy names must be unique across all files"
    ]
    assert loaded.policies == ()


def test_duplicate_names_within_a_file() -> None:
    _, errors = parse(BASE + BASE.removeprefix("policies:\n"))
    assert [str(e) for e in errors] == [
        "p.yaml:8: name: 'base' is already defined at p.yaml:2; policy names must be unique"
    ]


@pytest.mark.parametrize(
    ("make", "expected"),
    [
        pytest.param(lambda d: d / "missing.yaml", "missing.yaml: no such file or directory", id="missing"),
        pytest.param(lambda d: d, ": no policy files (*.yaml, *.yml) in this directory", id="empty-dir"),
    ],
)
def test_paths_that_hold_no_policies_are_errors(tmp_path: Path, make, expected: str) -> None:  # type: ignore[no-untyped-def]
    loaded = from_paths(make(tmp_path))
    assert len(loaded.errors) == 1 and str(loaded.errors[0]).endswith(expected)


def test_unreadable_file_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "bad.yaml").write_bytes(b"policies: \xff\xfe\n")
    (error,) = from_paths(tmp_path / "bad.yaml").errors
    assert str(error).startswith(f"{tmp_path / 'bad.yaml'}: cannot read the file")


EXAMPLES = sorted((ROOT / "policies").glob("*.yaml"))


def test_examples_exist() -> None:
    assert {p.name for p in EXAMPLES} >= {"idle-gpu.yaml", "idle-cpu.yaml", "pending.yaml", "stuck-terminating.yaml"}


@pytest.mark.parametrize("example", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_every_example_is_valid_shadow_and_inert(example: Path) -> None:
    loaded = from_paths(example)
    assert loaded.errors == (), [str(e) for e in loaded.errors]
    assert loaded.policies
    for policy in loaded.policies:
        assert policy.mode is model.Mode.SHADOW
        assert policy.match.namespaces.include == (), f"{policy.name} must match nothing until edited"
        assert policy.description


def test_the_examples_directory_loads_as_one_set() -> None:
    loaded = from_paths(ROOT / "policies")
    assert loaded.errors == ()
    assert len({p.name for p in loaded.policies}) == len(loaded.policies) >= 4
    kinds = {type(t) for p in loaded.policies for t in p.triggers}
    assert kinds == set(model.TRIGGER_KINDS)
