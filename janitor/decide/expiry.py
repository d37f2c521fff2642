"""The TTL/expiry trigger: objects whose `janitor/ttl` or `janitor/expires` has passed.

Same strict comparisons as kube-janitor: an object goes when its age is *greater* than its TTL,
or the time is *past* its expiry. What users get wrong is reported, never punished: an invalid
value keeps the object and is reported once per object and value; a TTL a pod inherited from its
controller's pod template is reported on the controller, and the pods are left alone (the
controller would recreate them, or a Job would count them as failed).
"""

from __future__ import annotations

import datetime
from collections.abc import Iterator, Mapping

from janitor import annotations
from janitor.decide.model import Action, ActionType, ObjectView, Outcome, Verdict

RULES = (annotations.TTL, annotations.EXPIRES)


def _fmt(when: datetime.datetime) -> str:
    return annotations.format_expires(when.replace(microsecond=0))


def reported_keys(obj: ObjectView) -> set[str]:
    return {line for line in obj.annotations.get(annotations.REPORTED, "").splitlines() if line}


def report_key(key: str, value: str) -> str:
    return f"{key}={value}"


def _with_report(obj: ObjectView, key: str) -> str:
    """The REPORTED annotation value after adding `key` (one line per reported mistake)."""
    return "\n".join(sorted(reported_keys(obj) | {key}))


def _report(obj: ObjectView, target: ObjectView, rule: str, reason: str, why: str, key: str) -> Action | None:
    """A REPORT action on `target`, unless this exact mistake was reported there already."""
    if key in reported_keys(target):
        return None
    return Action(
        ActionType.REPORT, target.ref, target.resource_version, rule=rule, reason=reason, why=why,
        evidence={"object": str(obj.ref)}, report_key=_with_report(target, key),
    )


def judge_ttl(obj: ObjectView, value: str, now: datetime.datetime) -> Verdict:
    try:
        ttl = annotations.parse_ttl(value)
    except ValueError as e:
        return Verdict(obj.ref, "ttl", Outcome.INVALID, f"invalid {annotations.TTL}: {e}")
    if ttl is None:
        return Verdict(obj.ref, "ttl", Outcome.KEEP, f"{annotations.TTL} is forever")
    if ttl <= datetime.timedelta(0):
        return Verdict(obj.ref, "ttl", Outcome.KEEP, f"{annotations.TTL} {value} is zero: no TTL, as in kube-janitor")
    deadline = obj.created + ttl
    age = now - obj.created
    if age > ttl:
        why = (f"{annotations.TTL} {value} passed: created {_fmt(obj.created)}, age {_age(age)}, "
               f"expired {_fmt(deadline)}")
        return Verdict(obj.ref, "ttl", Outcome.DELETE, why, deadline)
    return Verdict(obj.ref, "ttl", Outcome.KEEP, f"{annotations.TTL} {value}: age {_age(age)}, expires {_fmt(deadline)}",
                   deadline)


def judge_expires(obj: ObjectView, value: str, now: datetime.datetime) -> Verdict:
    if annotations.POLICY in obj.annotations:
        return Verdict(obj.ref, "expires", Outcome.SKIP,
                       f"{annotations.EXPIRES} is the janitor's own mark (policy "
                       f"{obj.annotations[annotations.POLICY]}); only that policy's lifecycle acts on it")
    try:
        deadline = annotations.parse_expires(value)
    except ValueError as e:
        return Verdict(obj.ref, "expires", Outcome.INVALID, f"invalid {annotations.EXPIRES}: {e}")
    if now > deadline:
        return Verdict(obj.ref, "expires", Outcome.DELETE,
                       f"{annotations.EXPIRES} {value} passed ({_age(now - deadline)} ago)", deadline)
    return Verdict(obj.ref, "expires", Outcome.KEEP, f"{annotations.EXPIRES} {value}: in {_age(deadline - now)}",
                   deadline)


def _age(delta: datetime.timedelta) -> str:
    """A duration as people read it: 2d3h, 5h07m, 12m30s, 40s."""
    seconds = int(delta.total_seconds())
    if seconds >= 86400:
        return f"{seconds // 86400}d{seconds % 86400 // 3600}h"
    if seconds >= 3600:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    if seconds >= 60:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds}s"


def inherited_from(obj: ObjectView, by_uid: Mapping[str, ObjectView], key: str) -> ObjectView | None:
    """The top-most controller whose pod template carries the same `key` value as `obj`."""
    value = obj.annotations.get(key)
    source = None
    current = obj
    while current.controller is not None:
        owner = by_uid.get(current.controller.uid)
        if owner is None or owner.template_annotations.get(key) != value:
            break
        source = current = owner
    return source


def evaluate(
    obj: ObjectView, now: datetime.datetime, by_uid: Mapping[str, ObjectView]
) -> Iterator[tuple[Verdict, Action | None]]:
    """Each rule's verdict on `obj`, with the action it calls for (a REPORT or a DELETE)."""
    for key, judge in ((annotations.TTL, judge_ttl), (annotations.EXPIRES, judge_expires)):
        value = obj.annotations.get(key)
        if not value:  # absent or empty: kube-janitor treats both as no annotation
            continue
        rule = "ttl" if key == annotations.TTL else "expires"
        if obj.ref.kind == "Pod" and obj.controller is not None:
            source = inherited_from(obj, by_uid, key)
            if source is not None:
                why = (f"{key}={value} is in the pod template of {source.ref}, so every pod inherits it; "
                       f"pods are not deleted one by one (the controller would recreate them). Put it on "
                       f"the {source.ref.kind} itself, outside its template, to expire the workload.")
                verdict = Verdict(obj.ref, rule, Outcome.SKIP, why)
                yield verdict, _report(obj, source, "inherited", "InheritedTTL", why,
                                       report_key("inherited:" + key, value))
                continue
            if obj.controller.uid not in by_uid:
                yield Verdict(obj.ref, rule, Outcome.SKIP,
                              f"owner {obj.controller.kind}/{obj.controller.name} is not visible, so it cannot "
                              f"be told whether {key} was inherited from its pod template; kept"), None
                continue
        verdict = judge(obj, value, now)
        action = None
        if verdict.outcome is Outcome.INVALID:
            action = _report(obj, obj, "malformed", "InvalidAnnotation", f"{verdict.why}; the object is kept",
                             report_key(key, value))
        elif verdict.outcome is Outcome.DELETE:
            action = Action(
                ActionType.DELETE, obj.ref, obj.resource_version, rule=rule,
                reason="TTLExpired" if rule == "ttl" else "Expired", why=verdict.why,
                evidence={key: value, "created": _fmt(obj.created), "now": _fmt(now)},
            )
        yield verdict, action
