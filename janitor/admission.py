"""The janitor's contract for people, as ValidatingAdmissionPolicies the apiserver enforces at apply time:
the caps of the admins' policies (`caps_policy`), and the janitor's own annotations left to it
(`marks_policy`, below).

The janitor already caps `janitor/keep-until` and ignores `janitor/opt-out` where a policy says so,
but only when it next reads the object: the researcher who wrote `keep-until: 2030-01-01` believes
it until the deadline comes. Generated from the same policy files the daemon reads (`janitor
admission policies/ | kubectl apply -f -`), this policy refuses, with the limit and whom to ask:

- a `janitor/keep-until` on a marked object later than its cap: the `maxExtension` of the policy
  that marked it (`janitor/policy`) after the first mark (`janitor/marked-at`);
- a `janitor/opt-out: "true"` newly set on a workload whose governing policy (first match per
  trigger, as the daemon decides) enforces and does not honour opt-out;
- a `janitor/ttl: forever` newly set on such a workload: it only means "no age limit" (the same as
  no TTL), so refusing it loses nothing, and tells the researcher who took it for an exemption.

What admission cannot know, it lets through and the janitor still enforces: it has no clock, so a
`keep-until` on an object not yet marked is capped only when it is marked; a policy with a pod
selector may or may not govern a workload (its pods' labels are not in the request), so it is
taken as not deciding; an opt-out on a Namespace is left alone (policies differ per kind inside).
Objects a controller made are left alone (they copy their owner's annotations), and a value left
as it was passes, so objects annotated before the policy existed can still be changed.
failurePolicy Ignore: it is a convenience for people; the janitor's own checks are the guarantee.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from janitor import annotations as ann
from janitor.decide.model import ResourceKind
from janitor.policy import model

NAME = "kube-idle-janitor-caps"
FOREVER_SAYS = (f"{ann.TTL}: forever only means no age limit (the same as no {ann.TTL}); it does not keep this "
                "workload from policy ")
_TIME = r"^[1-8][0-9]{3}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])(T([01][0-9]|2[0-3]):[0-5][0-9](:[0-5][0-9]Z)?)?$"

LABELS = {"app.kubernetes.io/name": "kube-idle-janitor", "app.kubernetes.io/component": "admission"}


def quote(text: str) -> str:
    """A CEL string literal (JSON's escapes are CEL's)."""
    return json.dumps(text)


_CLASS = re.compile(r"\[(!?)((?:[a-z0-9](?:-[a-z0-9])?)+-?|-(?:[a-z0-9](?:-[a-z0-9])?)*)\]")


def _glob(pattern: str) -> str | None:
    """An fnmatch glob as an anchored RE2 expression that matches the same names; None for a glob
    whose brackets are not a plain class (`[abc]`, `[!0-9]`), which fnmatch reads in ways not
    worth mirroring: a policy with one is taken as possibly matching (admission lets it pass)."""
    out, i = [], 0
    while i < len(pattern):
        c = pattern[i]
        if c == "[":
            found = _CLASS.match(pattern, i)
            if not found or any(a > b for a, b in re.findall(r"([a-z0-9])-([a-z0-9])", found.group(2))):
                return None
            out.append("[" + ("^" if found.group(1) else "") + found.group(2) + "]")
            i = found.end()
            continue
        if c in "]!":
            return None
        out.append(".*" if c == "*" else "." if c == "?" else re.escape(c))
        i += 1
    return "^" + "".join(out) + "$"


def _selector(s: model.LabelSelector) -> str:
    terms = [f"variables.namespaceLabels[?{quote(k)}] == optional.of({quote(v)})" for k, v in s.match_labels]
    for r in s.match_expressions:
        key, values = quote(r.key), "[" + ", ".join(quote(v) for v in r.values) + "]"
        terms.append({
            model.Operator.EXISTS: f"{key} in variables.namespaceLabels",
            model.Operator.DOES_NOT_EXIST: f"!({key} in variables.namespaceLabels)",
            model.Operator.IN: f"({key} in variables.namespaceLabels && variables.namespaceLabels[{key}] in {values})",
        }.get(r.operator,  # NotIn, as Kubernetes: absent counts
              f"(!({key} in variables.namespaceLabels) || !(variables.namespaceLabels[{key}] in {values}))"))
    return " && ".join(terms) or "true"


def _matches(m: model.Match) -> tuple[str, bool]:
    """CEL that holds when the policy's match may cover the request's object, and whether it is
    exact (no pod selector, every namespace glob translated)."""
    exact = not (m.pod_selector.match_labels or m.pod_selector.match_expressions)

    def any_glob(globs: Sequence[str]) -> str:
        nonlocal exact
        patterns = [_glob(g) for g in globs]
        if None in patterns:
            exact = False
            return "true"
        return "(" + " || ".join(f"request.namespace.matches({quote(str(p))})" for p in patterns) + ")" \
            if patterns else "false"

    terms = [any_glob(m.namespaces.include)]
    if m.namespaces.exclude:
        excluded = any_glob(m.namespaces.exclude)
        terms.append("true" if excluded == "true" else "!" + excluded)
    if m.kinds:
        terms.append("request.kind.kind in [" + ", ".join(quote(k) for k in m.kinds) + "]")
    terms.append(_selector(m.namespace_selector))
    return "(" + " && ".join(terms) + ")", exact


def _governing_refusal(policies: Sequence[model.Policy], trigger: type[model.Trigger]) -> str:
    """CEL giving the name of the policy that governs `trigger` for the object when it enforces and
    ignores opt-out, else ''. First match wins, as in the daemon; a possible but uncertain match
    (a pod selector, a glob not translated) ends the search with '': admission cannot tell."""
    chain = "''"
    for p in reversed([p for p in policies if p.trigger(trigger) is not None]):
        refuses = p.mode is model.Mode.ENFORCE and not p.lifecycle.honour_opt_out
        matches, exact = _matches(p.match)
        chain = f"{matches} ? {quote(p.name) if refuses and exact else repr('')} : {chain}"
    return chain


def caps_policy(policies: Sequence[model.Policy], kinds: Sequence[ResourceKind], *, name: str = NAME,
                admin_channel: str | None = None) -> list[dict[str, Any]]:
    """The ValidatingAdmissionPolicy and its binding, for the kinds the janitor cleans up."""
    ask = f" Ask in {admin_channel} if you need more." if admin_channel else \
        " Ask your cluster admins if you need more."
    caps = "{" + ", ".join(f"{quote(p.name)}: {int(p.lifecycle.max_extension.total_seconds())}"
                           for p in policies) + "}"
    words = "{" + ", ".join(f"{quote(p.name)}: {quote(ann.format_duration(p.lifecycle.max_extension))}"
                            for p in policies) + "}"
    refusals = [_governing_refusal(policies, t) for t in model.TRIGGER_KINDS
                if any(p.trigger(t) is not None for p in policies)]
    rules: dict[str, list[str]] = defaultdict(list)
    for kind in kinds:
        if kind.namespaced:
            rules[kind.group].append(kind.plural)

    def rfc3339(variable: str) -> str:
        v = f"variables.{variable}"
        return f"{v}.size() == 10 ? {v} + 'T00:00:00Z' : ({v}.size() == 16 ? {v} + ':00Z' : {v})"

    def note(key: str) -> str:
        return f"variables.annotations[?{quote(key)}].orValue('')"

    policy = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name, "labels": LABELS},
        "spec": {
            "failurePolicy": "Ignore",
            "matchConstraints": {"resourceRules": [
                {"apiGroups": [group], "apiVersions": ["*"], "resources": sorted(resources),
                 "operations": ["CREATE", "UPDATE"]} for group, resources in sorted(rules.items())]},
            "matchConditions": [{"name": "written-by-people", "expression": (
                "!has(object.metadata.ownerReferences) || "
                "!object.metadata.ownerReferences.exists(r, has(r.controller) && r.controller == true)")}],
            "variables": [
                {"name": "annotations",
                 "expression": "has(object.metadata.annotations) ? object.metadata.annotations : {}"},
                {"name": "oldAnnotations", "expression": "oldObject != null && has(oldObject.metadata.annotations) ? "
                                                          "oldObject.metadata.annotations : {}"},
                {"name": "namespaceLabels", "expression": "namespaceObject != null && "
                                                          "has(namespaceObject.metadata.labels) ? "
                                                          "namespaceObject.metadata.labels : {}"},
                {"name": "timePattern", "expression": quote(_TIME)},
                {"name": "keepUntil", "expression": note(ann.KEEP_UNTIL)},
                {"name": "markedAt", "expression": note(ann.MARKED_AT)},
                {"name": "policy", "expression": note(ann.POLICY)},
                {"name": "capSeconds", "expression": f"{caps}[?variables.policy].orValue(-1)"},
                {"name": "capWords", "expression": f"{words}[?variables.policy].orValue('')"},
                {"name": "checkable", "expression": (
                    "variables.keepUntil.matches(variables.timePattern) && "
                    "variables.markedAt.matches(variables.timePattern) && variables.capSeconds >= 0 && "
                    f"variables.oldAnnotations[?{quote(ann.KEEP_UNTIL)}] != optional.of(variables.keepUntil)")},
                {"name": "cap", "expression": (
                    f"variables.checkable ? timestamp({rfc3339('markedAt')}) + "
                    "duration(string(variables.capSeconds) + 's') : timestamp('1970-01-01T00:00:00Z')")},
                {"name": "optingOut", "expression": (
                    f"{note(ann.OPT_OUT)}.trim().lowerAscii() == 'true' && "
                    f"variables.oldAnnotations[?{quote(ann.OPT_OUT)}] != optional.of({note(ann.OPT_OUT)}) && "
                    "request.namespace != ''")},
                {"name": "forever", "expression": (
                    f"{note(ann.TTL)}.trim().lowerAscii() == 'forever' && "
                    f"variables.oldAnnotations[?{quote(ann.TTL)}] != optional.of({note(ann.TTL)}) && "
                    "request.namespace != ''")},
                {"name": "refusedBy", "expression": (
                    "variables.optingOut || variables.forever ? [" + ", ".join(refusals) + "].filter(n, n != '') "
                    ": []")},
            ],
            "validations": [
                {"expression": f"!variables.checkable || timestamp({rfc3339('keepUntil')}) <= variables.cap",
                 "messageExpression": (
                     f"{quote(ann.KEEP_UNTIL + ': ')} + variables.keepUntil + ' is past the cap of policy ' + "
                     "variables.policy + ': at most ' + variables.capWords + "
                     "' after the first mark (' + variables.markedAt + '), that is until ' + "
                     f"string(variables.cap) + '.' + {quote(ask)}"),
                 "reason": "Forbidden"},
                {"expression": "!variables.optingOut || variables.refusedBy.size() == 0",
                 "messageExpression": (
                     f"{quote(ann.OPT_OUT + ': policy ')} + variables.refusedBy.join(', ') + "
                     "' does not honour opt-out here, so it would not keep this workload; use "
                     f"{ann.KEEP_UNTIL} (within the policy\\'s cap) instead.' + {quote(ask)}"),
                 "reason": "Forbidden"},
                {"expression": "!variables.forever || variables.refusedBy.size() == 0",
                 "messageExpression": (
                     f"{quote(FOREVER_SAYS)} + "
                     "variables.refusedBy.join(', ') + ', which reclaims idle workloads even when their owners opt "
                     f"out; use {ann.KEEP_UNTIL} (within the policy\\'s cap).' + {quote(ask)}"),
                 "reason": "Forbidden"},
            ],
        },
    }
    binding = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": name, "labels": LABELS},
        "spec": {"policyName": name, "validationActions": ["Deny"]},
    }
    return [policy, binding]


# -- the janitor's own annotations ------------------------------------------------------------------------

MARKS_NAME = "kube-idle-janitor-marks"
# The identity manifests/base runs the janitor as (its ServiceAccount in its namespace).
JANITOR_USER = "system:serviceaccount:kube-idle-janitor:kube-idle-janitor"


def _list(values: Sequence[str]) -> str:
    return "[" + ", ".join(quote(v) for v in values) + "]"


def _owned(obj: str) -> str:
    """CEL: the annotation fields (`f:<key>` maps) the janitor's field managers own on `obj`."""
    return (f"{obj} != null && has({obj}.metadata.managedFields) ? {obj}.metadata.managedFields.filter(e, "
            f"has(e.manager) && e.manager in {_list(sorted(ann.FIELD_MANAGERS))} && has(e.fieldsV1) && "
            "'f:metadata' in e.fieldsV1 && 'f:annotations' in e.fieldsV1['f:metadata'])"
            ".map(e, e.fieldsV1['f:metadata']['f:annotations']) : []")


def marks_policy(kinds: Sequence[ResourceKind], *, janitor: str = JANITOR_USER, name: str = MARKS_NAME,
                 admin_channel: str | None = None) -> list[dict[str, Any]]:
    """The ValidatingAdmissionPolicy (and binding) that keeps the janitor's own annotations its own.

    The janitor-only keys (its mark: janitor/policy, janitor/marked-at, janitor/warned-*, ...) and
    the janitor/expires of a marked object may be added, changed or removed only by `janitor` (the
    username the janitor runs as) and by whoever may delete this policy (cluster admins, who could
    remove it anyway: `janitor unmark` from their kubeconfig). Everyone else is refused, told which
    key, and what to do instead. The apiserver's record of who wrote them (managedFields) may not
    be made the janitor's, nor taken from it, by anyone else either: the daemon reads it.

    Left alone: the owner's own keys (keep-until, ttl, opt-out, ...; janitor/expires on an object
    without a mark, added or removed), and a controller's copy (an object with a controller
    ownerReference whose janitor/marked-uid names another object: a ReplicaSet copying its
    Deployment's annotations must not be refused, or the Deployment would stall). A mark naming
    the object itself is never a copy, whoever owns the object. failurePolicy Ignore: the daemon
    takes nothing from a key someone else wrote, whether or not this policy is there.
    """
    ask = f" Ask in {admin_channel}." if admin_channel else " Ask your cluster admins."
    rules: dict[str, list[str]] = defaultdict(list)
    for kind in kinds:
        rules[kind.group].append(kind.plural)
    keys = _list(ann.JANITOR_ONLY_KEYS)
    every = _list((*ann.JANITOR_ONLY_KEYS, ann.EXPIRES))
    notes = "has(object.metadata.annotations) ? object.metadata.annotations : {}"
    old_notes = "oldObject != null && has(oldObject.metadata.annotations) ? oldObject.metadata.annotations : {}"
    instead = (f"For more time set {ann.KEEP_UNTIL} (within the policy's cap: kubectl janitor keep); to have the "
               "mark removed, a cluster admin runs `janitor unmark`. A manifest saved from a marked object carries "
               "its mark: leave these keys out of it.")
    policy = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name, "labels": LABELS},
        "spec": {
            "failurePolicy": "Ignore",
            "matchConstraints": {"resourceRules": [
                {"apiGroups": [group], "apiVersions": ["*"], "resources": sorted(resources),
                 "operations": ["CREATE", "UPDATE"]} for group, resources in sorted(rules.items())]},
            "matchConditions": [
                {"name": "not-the-janitor", "expression": f"request.userInfo.username != {quote(janitor)}"},
                {"name": "carries-a-mark", "expression": (  # the janitor/expires of a mark comes with one of these
                    f"{keys}.exists(k, (has(object.metadata.annotations) && k in object.metadata.annotations) || "
                    "(oldObject != null && has(oldObject.metadata.annotations) && "
                    "k in oldObject.metadata.annotations))")},
                {"name": "not-a-cluster-admin", "expression": (
                    "!authorizer.group('admissionregistration.k8s.io').resource('validatingadmissionpolicies')"
                    f".name({quote(name)}).check('delete').allowed()")},
            ],
            "variables": [
                {"name": "annotations", "expression": notes},
                {"name": "oldAnnotations", "expression": old_notes},
                {"name": "marked", "expression": f"{keys}.exists(k, k in variables.oldAnnotations)"},
                {"name": "namesItself", "expression": (
                    f"has(object.metadata.uid) && [variables.annotations, variables.oldAnnotations].exists(a, "
                    f"a[?{quote(ann.MARKED_UID)}] == optional.of(object.metadata.uid))")},
                {"name": "copy", "expression": (
                    "has(object.metadata.ownerReferences) && object.metadata.ownerReferences.exists(r, "
                    "has(r.controller) && r.controller == true) && !variables.namesItself")},
                {"name": "checked", "expression": f"variables.marked ? {every} : {keys}"},
                {"name": "changed", "expression": (
                    "variables.copy ? [] : variables.checked.filter(k, "
                    "variables.annotations[?k] != variables.oldAnnotations[?k])")},
                {"name": "mark", "expression": f"variables.changed.filter(k, k != {quote(ann.EXPIRES)})"},
                {"name": "owned", "expression": _owned("object")},
                {"name": "oldOwned", "expression": _owned("oldObject")},
                {"name": "recordChanged", "expression": (
                    "variables.copy ? [] : variables.checked.filter(k, k in variables.annotations && "
                    "variables.owned.exists(f, 'f:' + k in f) != variables.oldOwned.exists(f, 'f:' + k in f) && "
                    "(variables.owned.exists(f, 'f:' + k in f) || "
                    "variables.annotations[?k] == variables.oldAnnotations[?k]))")},
            ],
            "validations": [
                {"expression": "variables.mark.size() == 0",
                 "messageExpression": (
                     "variables.mark.join(', ') + (variables.mark.size() == 1 ? ': only the janitor writes this "
                     "annotation (part of its mark), and this request would add, change or remove it. ' : ': only "
                     "the janitor writes these annotations (its mark), and this request would add, change or "
                     f"remove them. ' ) + {quote(instead + ask)}"),
                 "reason": "Forbidden"},
                {"expression": f"!({quote(ann.EXPIRES)} in variables.changed)",
                 "messageExpression": quote(
                     f"{ann.EXPIRES}: on a marked object only the janitor writes it (an older mark keeps its "
                     f"deadline there, and while a mark is on the object its lifecycle decides). {instead}{ask}"),
                 "reason": "Forbidden"},
                {"expression": "variables.recordChanged.size() == 0",
                 "messageExpression": (
                     "'metadata.managedFields: the record of who wrote ' + variables.recordChanged.join(', ') + "
                     f"' may not be made the janitor\\'s ({ann.FIELD_MANAGER}) or taken from it by anyone else; "
                     "write under your own field manager and leave managedFields as they are.' + "
                     f"{quote(ask)}"),
                 "reason": "Forbidden"},
            ],
        },
    }
    binding = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": name, "labels": LABELS},
        "spec": {"policyName": name, "validationActions": ["Deny"]},
    }
    return [policy, binding]
