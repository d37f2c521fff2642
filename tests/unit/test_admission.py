"""`janitor admission`: what the generated caps policy holds, before the apiserver evaluates it.

Aspects covered:
- a namespace glob becomes a regular expression that matches exactly the names fnmatch matches
  (property over generated globs and names), as the daemon's policy matching does;
- every policy's cap is in the policy (seconds and words); only enforcing policies that do not
  honour opt-out can refuse an opt-out, and a policy with a pod selector never refuses one;
- the command prints the policy and its binding, and policy errors as file:line with exit 1.
"""

from __future__ import annotations

import fnmatch
import re
from pathlib import Path

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from janitor import admission, cli
from janitor.policy import model
from janitor.settings import DEFAULT_KINDS

NAME_CHARS = "abk-0"


@given(glob=st.text(alphabet=NAME_CHARS + "*?[]!", max_size=8), name=st.text(alphabet=NAME_CHARS, max_size=8))
def test_a_glob_matches_what_fnmatch_matches(glob: str, name: str) -> None:
    translated = admission._glob(glob)
    if translated is None:  # brackets that are not a plain class: the policy counts as possibly matching
        assert "[" in glob or "]" in glob or "!" in glob
        return
    assert bool(re.fullmatch(translated, name)) == fnmatch.fnmatchcase(name, glob), translated


@pytest.mark.parametrize("glob", ["team-*", "*", "ml-[0-9]?", "[!k]*", "a[-b]c", "x[ab-]"])
def test_plain_globs_are_translated(glob: str) -> None:
    assert admission._glob(glob) is not None


def policy(name: str, *, mode: model.Mode = model.Mode.ENFORCE, honour: bool = True,
           pod_selector: model.LabelSelector | None = None, days: int = 7, glob: str = "team-*") -> model.Policy:
    import datetime

    return model.Policy(
        name=name, triggers=(model.IdleGpu(),), mode=mode,
        match=model.Match(namespaces=model.Namespaces(include=(glob,)),
                          pod_selector=pod_selector or model.LabelSelector()),
        lifecycle=model.Lifecycle(max_extension=datetime.timedelta(days=days), honour_opt_out=honour))


def variables(policies: list[model.Policy]) -> dict[str, str]:
    vap, binding = admission.caps_policy(policies, DEFAULT_KINDS, admin_channel="#gpu-admins")
    assert binding["spec"] == {"policyName": admission.NAME, "validationActions": ["Deny"]}
    return {v["name"]: v["expression"] for v in vap["spec"]["variables"]}


def test_every_cap_is_in_the_policy() -> None:
    found = variables([policy("a", days=3), policy("b", days=14)])
    assert '"a": 259200' in found["capSeconds"] and '"b": 1209600' in found["capSeconds"]
    assert '"a": "3d"' in found["capWords"] and '"b": "2w"' in found["capWords"]


@pytest.mark.parametrize(("governing", "refuses"), [
    (policy("strict", honour=False), True),
    (policy("strict", honour=False, mode=model.Mode.SHADOW), False),
    (policy("strict", honour=True), False),
    (policy("strict", honour=False, pod_selector=model.LabelSelector(match_labels=(("gpu", "yes"),))), False),
    (policy("strict", honour=False, glob="team-[z-a]"), False),  # not translated: possibly matching
])
def test_only_an_enforcing_policy_that_ignores_opt_out_refuses_it(governing: model.Policy, refuses: bool) -> None:
    refused_by = variables([governing, policy("later", honour=False)])["refusedBy"]
    assert ('"strict"' in refused_by) is refuses


def test_opt_out_and_forever_are_refused_by_the_same_governing_policy() -> None:
    found = variables([policy("strict", honour=False)])
    assert "variables.optingOut || variables.forever ?" in found["refusedBy"]
    assert "'forever'" in found["forever"] and "janitor/ttl" in found["forever"]


def test_the_command_prints_the_policy_or_the_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = tmp_path / "good.yaml"
    good.write_text(yaml.safe_dump({"policies": [{
        "name": "idle-gpu", "mode": "enforce", "match": {"namespaces": {"include": ["team-*"]}},
        "triggers": {"idleGpu": {"window": "2h"}}, "lifecycle": {"maxExtension": "3d"}}]}))
    assert cli.main(["admission", str(good), "--admin-channel", "#gpu-admins"]) == 0
    vap, binding = yaml.safe_load_all(capsys.readouterr().out)
    assert vap["kind"] == "ValidatingAdmissionPolicy" and binding["kind"] == "ValidatingAdmissionPolicyBinding"
    assert any("#gpu-admins" in v["messageExpression"] for v in vap["spec"]["validations"])

    bad = tmp_path / "bad.yaml"
    bad.write_text("policies:\n  - name: x\n    mode: sometimes\n")
    assert cli.main(["admission", str(bad)]) == 1
    assert f"{bad}:3" in capsys.readouterr().err
