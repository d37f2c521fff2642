"""The expiry trigger: objects whose `janitor/ttl` or `janitor/expires` has passed (kube-janitor's path).

Same strict comparisons as kube-janitor: an object goes when its age is *greater* than its TTL,
or the time is *past* its expiry. What users get wrong is reported, never punished: an invalid
value keeps the object and is reported once per object and value; a TTL a pod inherited from its
controller's pod template is reported on the controller, and the pods are left alone (the
controller would recreate them, or a Job would count them as failed).

Never acted on here: a `janitor/expires` that is part of the janitor's own mark (any janitor-only
mark key beside it, even with `janitor/policy` removed: only the lifecycle acts on a mark), and
annotations a controller copied onto the object (a Deployment's onto its ReplicaSets, which keep
them after the user removed them from the Deployment).

The annotations are parsed when an object's view is built (janitor.decide.readings), once per
resourceVersion; a cycle only compares what they say with its time.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Iterator, Mapping, Sequence

from janitor import annotations as ann
from janitor.decide.model import Action, ActionType, Deletion, Finding, ObjectView, Observation, State, TriggerKind
from janitor.decide.rails import deleted_key
from janitor.decide.readings import EXPIRY_KEYS, ExpiryRule, Says, stamp
from janitor.decide.reasons import Code, Reason, why
from janitor.decide.selection import Workload, copied_from, managed_by
from janitor.decide.triggers.spec import Role, TriggerSpec, Usage
from janitor.policy.model import Policy

KEYS = EXPIRY_KEYS


def reported_keys(obj: ObjectView) -> set[str]:
    return set(obj.readings.reported)


def report_key(key: str, value: str) -> str:
    return f"{key}={value}"


_FOREVER = why(Code.TTL_FOREVER)


def judge_ttl(obj: ObjectView, rule: ExpiryRule, now: datetime.datetime
              ) -> tuple[State, Reason, datetime.datetime | None]:
    """A janitor/ttl parsed when the view was built (decide.readings), against `now`."""
    value = rule.value
    if rule.says is Says.INVALID:
        return State.INVALID, Reason(Code.TTL_INVALID, (("error", rule.error),)), None
    if rule.says is Says.FOREVER:
        return State.CLEAR, _FOREVER, None
    if rule.says is Says.ZERO:
        return State.CLEAR, Reason(Code.TTL_ZERO, (("value", value),)), None
    age = now - obj.created
    if rule.says is Says.NEVER:
        return State.CLEAR, Reason(Code.TTL_NOT_YET, (("value", value), ("age", age), ("deadline", "never"))), None
    assert rule.ttl is not None and rule.deadline is not None
    deadline = rule.deadline_stamp or stamp(rule.deadline)
    if age > rule.ttl:
        created = rule.created_stamp or stamp(obj.created)
        return State.FIRES, Reason(Code.TTL_PASSED, (("value", value), ("created", created), ("age", age),
                                                     ("deadline", deadline))), rule.deadline
    return State.CLEAR, Reason(Code.TTL_NOT_YET, (("value", value), ("age", age), ("deadline", deadline))), \
        rule.deadline


def judge_expires(rule: ExpiryRule, now: datetime.datetime) -> tuple[State, Reason, datetime.datetime | None]:
    """A janitor/expires parsed when the view was built (decide.readings), against `now`."""
    if rule.says is Says.INVALID:
        return State.INVALID, Reason(Code.EXPIRES_INVALID, (("error", rule.error),)), None
    deadline = rule.deadline
    assert deadline is not None
    if now > deadline:
        return State.FIRES, Reason(Code.EXPIRES_PASSED, (("value", rule.value), ("ago", now - deadline))), deadline
    return State.CLEAR, Reason(Code.EXPIRES_NOT_YET, (("value", rule.value), ("left", deadline - now))), deadline


def inherited_from(obj: ObjectView, by_uid: Mapping[str, ObjectView], key: str) -> ObjectView | None:
    """The top-most controller whose pod template carries the same `key` value as `obj`."""
    value = obj.annotations.get(key)
    source = None
    current = obj
    seen = {obj.ref.uid}
    while current.controller is not None:
        owner = by_uid.get(current.controller.uid)
        if owner is None or owner.ref.uid in seen or owner.template_annotations.get(key) != value:
            break  # the top, or owner references in a cycle (the apiserver accepts them)
        seen.add(owner.ref.uid)
        source = current = owner
    return source


def _report(judged: ObjectView, target: ObjectView, policy: Policy, rule: str, reason: str, why_: Reason,
            key: str) -> Action | None:
    """A REPORT on `target`, unless this exact mistake was reported there already."""
    done = target.readings.reported
    if key in done:
        return None
    return Action(ActionType.REPORT, target.ref, target.resource_version, policy.name, TriggerKind.EXPIRY, rule,
                  reason, why_, {"object": str(judged.ref)}, report_key="\n".join(sorted(done | {key})))


def _judge(obj: ObjectView, parsed: ExpiryRule, by_uid: Mapping[str, ObjectView], policy: Policy,
           now: datetime.datetime, deleted: Mapping[str, Deletion]) -> Finding:
    key, rule, value = parsed.key, parsed.rule, parsed.value

    def finding(state: State, reason: Reason, deadline: datetime.datetime | None = None,
                proposal: Action | None = None) -> Finding:
        return Finding(TriggerKind.EXPIRY, policy.name, policy.mode, obj.ref, state, reason, source=policy.source,
                       rule=rule, deadline=deadline, proposal=proposal)

    source = copied_from(obj)
    if source is not None:
        return finding(State.SKIPPED, why(Code.COPIED_BY_CONTROLLER, key=key, value=value,
                                          controller_kind=source.kind, controller=f"{source.kind}/{source.name}"))
    if key == ann.EXPIRES and obj.readings.marked:
        marked_by = obj.annotations.get(ann.POLICY)
        return finding(State.SKIPPED, why(Code.EXPIRES_OF_MARK, mark=f"policy {marked_by}" if marked_by else
                                          "janitor/policy removed, the rest of the mark kept"))
    if obj.ref.kind == "Pod" and obj.controller is not None:
        template = inherited_from(obj, by_uid, key)
        if template is not None:
            reason = why(Code.INHERITED, key=key, value=value, source=str(template.ref), kind=template.ref.kind)
            return finding(State.SKIPPED, reason, proposal=_report(obj, template, policy, "inherited", "InheritedTTL",
                                                                   reason, report_key("inherited:" + key, value)))
        if obj.controller.uid not in by_uid:
            return finding(State.SKIPPED, why(Code.OWNER_NOT_VISIBLE, key=key,
                                              owner=f"{obj.controller.kind}/{obj.controller.name}"))
    state, reason, deadline = judge_ttl(obj, parsed, now) if key == ann.TTL else judge_expires(parsed, now)
    if state is State.INVALID:
        return finding(state, reason, proposal=_report(obj, obj, policy, "malformed", "InvalidAnnotation",
                                                       why(Code.MALFORMED_KEPT, why=reason), report_key(key, value)))
    if state is State.FIRES:
        back = _comes_back(obj, key, rule, value, deleted)
        if back is not None:
            return finding(State.SKIPPED, back, deadline, _report(obj, obj, policy, "recreated", "RecreatedAfterExpiry",
                                                                  back, report_key("recreated:" + key, value)))
        evidence = {key: value, "created": parsed.created_stamp or stamp(obj.created), "now": stamp(now)}
        return finding(state, reason, deadline, Action(
            ActionType.DELETE, obj.ref, obj.resource_version, policy.name, TriggerKind.EXPIRY, rule,
            "TTLExpired" if rule == "ttl" else "Expired", reason, evidence))
    return finding(state, reason, deadline)


RECREATORS = ("Argo CD", "Flux")  # GitOps: what it keeps and the janitor deletes, it creates again
_SKEW = datetime.timedelta(seconds=30)  # the janitor's clock (the deletion's time) against the apiserver's


def _comes_back(obj: ObjectView, key: str, rule: str, value: str, deleted: Mapping[str, Deletion]) -> Reason | None:
    """Why deleting `obj` would not hold, or None: GitOps keeps it (it would create it again at once),
    or an expiry deleted it under this name with this very janitor/expires, and it is back: created
    after that deletion (the ledger keeps a day of them; the report note it got keeps the decision
    after that, so the loop never starts again)."""
    tool = managed_by(obj)
    if tool in RECREATORS:
        return why(Code.RECREATED_BY_GITOPS, key=key, value=value, tool=tool)
    if rule != "expires":
        return None
    gone = deleted.get(deleted_key(obj.ref))
    if (gone is not None and gone.rule == f"{rule}={value}" and obj.created >= gone.at - _SKEW) or \
            report_key("recreated:" + key, value) in obj.readings.reported:
        return why(Code.RECREATED_BY_NAME, key=key, value=value, kind=obj.ref.kind)
    return None


def rules(obj: ObjectView) -> Iterator[tuple[str, str, str]]:
    """(annotation, rule, value) of each expiry annotation on `obj` (absent or empty: none, as kube-janitor)."""
    for parsed in obj.readings.rules:
        yield parsed.key, parsed.rule, parsed.value


def judged(objects: Iterable[ObjectView], by_uid: Mapping[str, ObjectView], policy: Policy, now: datetime.datetime,
           deleted: Mapping[str, Deletion]) -> list[Finding]:
    """Each expiry rule's finding on each of `objects`, by what their views read of their annotations
    (decide.readings): no annotation is parsed again here, only compared with `now`."""
    return [_judge(obj, parsed, by_uid, policy, now, deleted) for obj in objects for parsed in obj.readings.rules]


def findings(workloads: Sequence[Workload], observation: Observation, policy: Policy,
             now: datetime.datetime, *, by_uid: Mapping[str, ObjectView] | None = None,
             deleted: Mapping[str, Deletion] | None = None) -> list[Finding]:
    """Each expiry rule's finding on each object given (`workloads` wrap the objects to judge);
    `by_uid`: the observation's objects by uid, when the caller has them already; `deleted`: what
    expiries deleted lately, by "Kind/namespace/name" (the ledger's)."""
    if by_uid is None:
        by_uid = {o.ref.uid: o for o in observation.objects}
    return judged((w.view for w in workloads if w.view is not None), by_uid, policy, now, deleted or {})


# Judges every object by its own annotations (decide.plan hands it the objects), no policy key.
TRIGGER = TriggerSpec(TriggerKind.EXPIRY, Role.FORCES, Usage.NONE, findings,
                      words={State.FIRES: "delete", State.CLEAR: "keep"})
