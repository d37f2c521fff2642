"""`janitor admission`: what the generated caps policy holds, before the apiserver evaluates it.

Aspects covered:
- a namespace glob becomes a regular expression that matches exactly the names fnmatch matches
  (property over generated globs and names), as the daemon's policy matching does;
- every policy's cap is in the policy (seconds and words); only enforcing policies that do not
  honour opt-out can refuse an opt-out, and a policy with a pod selector never refuses one;
- the command prints the policy and its binding, and policy errors as file:line with exit 1;
- kube-idle-janitor-marks: every janitor-only key (and janitor/expires, on a marked object only)
  is checked on create and update of every kind the janitor cleans up; the janitor's username (an
  option, defaulting to what manifests/base deploys) and whoever may delete the policy are not held
  by it; a controller's copy passes unless its mark names the object itself; the record of who
  wrote each key may be neither claimed for the janitor's field managers nor taken from them; the
  refusals name the key, say only the janitor writes it, and what to do instead; without policy
  files the command prints only this policy, with them both.
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
from janitor import annotations as a
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
    vap, binding, *_ = yaml.safe_load_all(capsys.readouterr().out)  # then kube-idle-janitor-marks
    assert vap["kind"] == "ValidatingAdmissionPolicy" and binding["kind"] == "ValidatingAdmissionPolicyBinding"
    assert any("#gpu-admins" in v["messageExpression"] for v in vap["spec"]["validations"])

    bad = tmp_path / "bad.yaml"
    bad.write_text("policies:\n  - name: x\n    mode: sometimes\n")
    assert cli.main(["admission", str(bad)]) == 1
    assert f"{bad}:3" in capsys.readouterr().err


# -- kube-idle-janitor-marks ----------------------------------------------------------------------------

def marks(**options: object) -> tuple[dict[str, object], dict[str, str], list[dict[str, str]]]:
    vap, binding = admission.marks_policy(DEFAULT_KINDS, **options)  # type: ignore[arg-type]
    assert binding["spec"] == {"policyName": vap["metadata"]["name"], "validationActions": ["Deny"]}
    spec = vap["spec"]
    return ({c["name"]: c["expression"] for c in spec["matchConditions"]},
            {v["name"]: v["expression"] for v in spec["variables"]}, spec["validations"])


def test_only_the_janitor_and_those_who_may_delete_the_policy_are_not_held() -> None:
    conditions, _, _ = marks()
    assert conditions["not-the-janitor"] == (
        'request.userInfo.username != "system:serviceaccount:kube-idle-janitor:kube-idle-janitor"')
    other, _, _ = marks(janitor="system:serviceaccount:infra:janitor", name="marks-x")
    assert '"system:serviceaccount:infra:janitor"' in other["not-the-janitor"]
    assert other["not-a-cluster-admin"] == ("!authorizer.group('admissionregistration.k8s.io')"
                                            ".resource('validatingadmissionpolicies').name(\"marks-x\")"
                                            ".check('delete').allowed()")


def test_every_janitor_only_key_is_checked_and_expires_only_beside_a_mark() -> None:
    conditions, found, validations = marks()
    for key in a.JANITOR_ONLY_KEYS:
        assert f'"{key}"' in found["marked"] and f'"{key}"' in found["checked"].split(" : ")[1]
    marked_keys, unmarked_keys = found["checked"].removeprefix("variables.marked ? ").split(" : ")
    assert f'"{a.EXPIRES}"' in marked_keys and f'"{a.EXPIRES}"' not in unmarked_keys
    for key in (a.KEEP_UNTIL, a.TTL, a.OPT_OUT, a.OWNER):  # the owner's own keys are never checked
        assert key not in found["checked"] and key not in conditions["carries-a-mark"]
    assert a.EXPIRES not in conditions["carries-a-mark"]  # a user's own expires alone costs no check
    assert "variables.annotations[?k] != variables.oldAnnotations[?k]" in found["changed"]  # added, changed, removed
    vap, _ = admission.marks_policy(DEFAULT_KINDS)
    rules = vap["spec"]["matchConstraints"]["resourceRules"]
    assert {(g, r) for rule in rules for g in rule["apiGroups"] for r in rule["resources"]} == {
        (k.group, k.plural) for k in DEFAULT_KINDS}
    assert all(rule["operations"] == ["CREATE", "UPDATE"] for rule in rules)
    assert vap["spec"]["failurePolicy"] == "Ignore"


def test_a_controllers_copy_passes_unless_its_mark_names_the_object_itself() -> None:
    _, found, _ = marks()
    assert "r.controller == true" in found["copy"] and "!variables.namesItself" in found["copy"]
    assert f'a[?"{a.MARKED_UID}"] == optional.of(object.metadata.uid)' in found["namesItself"]
    assert "[variables.annotations, variables.oldAnnotations]" in found["namesItself"]
    assert found["changed"].startswith("variables.copy ? [] :")


def test_the_record_of_who_wrote_a_key_is_neither_claimed_nor_taken() -> None:
    _, found, validations = marks()
    for manager in a.FIELD_MANAGERS:
        assert f'"{manager}"' in found["owned"] and f'"{manager}"' in found["oldOwned"]
    assert "fieldsV1['f:metadata']['f:annotations']" in found["owned"]
    changed = found["recordChanged"]
    assert "variables.owned.exists(f, 'f:' + k in f) != variables.oldOwned.exists(f, 'f:' + k in f)" in changed
    assert [v["expression"] for v in validations] == [
        "variables.mark.size() == 0", f'!("{a.EXPIRES}" in variables.changed)', "variables.recordChanged.size() == 0"]


def test_the_refusals_say_which_key_that_only_the_janitor_writes_it_and_what_to_do() -> None:
    _, _, validations = marks(admin_channel="#gpu-admins")
    mark, expires, record = (v["messageExpression"] for v in validations)
    assert mark.startswith("variables.mark.join(', ')") and "only the janitor writes this annotation" in mark
    for said in (mark, expires):
        assert "janitor/keep-until" in said and "`janitor unmark`" in said and "Ask in #gpu-admins." in said
    assert "janitor/expires: on a marked object only the janitor writes it" in expires
    assert "metadata.managedFields" in record and a.FIELD_MANAGER in record
    assert all(v["reason"] == "Forbidden" for v in validations)


def test_the_command_prints_the_marks_policy_alone_or_beside_the_caps(tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["admission", "--janitor-user", "system:serviceaccount:infra:janitor"]) == 0
    alone = list(yaml.safe_load_all(capsys.readouterr().out))
    assert [d["metadata"]["name"] for d in alone] == [admission.MARKS_NAME] * 2
    assert "system:serviceaccount:infra:janitor" in alone[0]["spec"]["matchConditions"][0]["expression"]
    good = tmp_path / "good.yaml"
    good.write_text(yaml.safe_dump({"policies": [{
        "name": "idle-gpu", "mode": "enforce", "match": {"namespaces": {"include": ["team-*"]}},
        "triggers": {"idleGpu": {"window": "2h"}}}]}))
    assert cli.main(["admission", str(good)]) == 0
    both = list(yaml.safe_load_all(capsys.readouterr().out))
    assert [d["metadata"]["name"] for d in both] == [admission.NAME] * 2 + [admission.MARKS_NAME] * 2
    assert admission.JANITOR_USER in both[2]["spec"]["matchConditions"][0]["expression"]
