"""What values and policies mean, in words: for `janitor annotation` and `janitor check`.

The janitor parses annotations and policy files one way (janitor/annotations.py, janitor/policy);
these read the same parsed values back to a person, so what the CLI says is what the daemon does.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterator, Sequence

from janitor import annotations as ann
from janitor.durations import in_words
from janitor.policy import model


def meaning(key: str, value: str) -> str:
    """What a value of a user annotation means to the janitor; ValueError says why it is refused."""
    if key == ann.TTL:
        ttl = ann.parse_ttl(value)
        if ttl is None:
            return "never deleted for its age (forever)"
        return f"deleted once older than {in_words(ttl)} ({int(ttl.total_seconds())} s after creation)"
    if key == ann.EXPIRES:
        when = ann.parse_expires(value)
        return f"deleted after {when.isoformat()} ({ann.format_expires(when)})"
    if key == ann.KEEP_UNTIL:
        try:
            when = ann.parse_expires(value)
        except ValueError as e:
            if _is_duration(value):
                raise ValueError(f"{ann.KEEP_UNTIL} takes a UTC time (2026-12-01T18:00:00Z); for a duration from "
                                 f"now run `janitor keep KIND/NAMESPACE/NAME {value.strip()}`, which writes that "
                                 "time") from e
            raise
        return (f"an idle workload is not reclaimed before {when.isoformat()} ({ann.format_expires(when)}), "
                "within its policy's maxExtension")
    if key == ann.TIME_ZONE:
        return f"on a namespace: working hours counted in {ann.parse_time_zone(value).key}"
    if key == ann.OPT_OUT:
        if ann.is_true(value):
            return ("the janitor leaves the object alone (on a namespace: everything in it), wherever the "
                    "policies honour opt-out; where they do not, keep it with janitor/keep-until")
        if value.strip().lower() == "false":
            return "not opted out (the same as no annotation)"
        raise ValueError(f'{value!r} is read as not opted out: only "true" opts out (or "false", or no annotation)')
    if key == ann.OWNER:
        return _owner_meaning(value)
    raise ValueError(f"not an annotation users set; use one of {', '.join(USER_KEYS)}")


USER_KEYS = (ann.TTL, ann.EXPIRES, ann.KEEP_UNTIL, ann.OPT_OUT, ann.OWNER, ann.TIME_ZONE)


def _is_duration(value: str) -> bool:
    try:
        ann.parse_ttl(value)
    except ValueError:
        return False
    return True


def _owner_meaning(value: str) -> str:
    from janitor.decide.owners import OwnerKind, classify

    kind = classify(value)
    if kind is OwnerKind.EMAIL:
        return f"warnings go to the Slack user with the e-mail {value.strip()} (looked up when one is sent)"
    if kind is OwnerKind.SLACK_USER:
        return f"warnings go to the Slack user {value.strip()} as a direct message"
    if kind is OwnerKind.CHANNEL:
        return f"warnings go to the Slack channel {value.strip()} (the janitor's app must be in it)"
    raise ValueError("not an owner the janitor can warn: give an e-mail (alice@lab.org), a Slack user id "
                     "(U0123ABCD) or a channel (#team-ml or C0123ABCD)")


def _duration(delta: datetime.timedelta) -> str:
    return ann.format_duration(delta)


def trigger(t: model.Trigger) -> str:
    """One trigger of a policy, with every number it judges by (its descriptor's words)."""
    from janitor.decide.triggers import registry

    return registry.of_policy(t).describe(t)


def _selector(label: str, s: model.LabelSelector) -> list[str]:
    parts = [f"{k}={v}" for k, v in s.match_labels] + [
        f"{r.key} {r.operator}" + (f" ({', '.join(r.values)})" if r.values else "") for r in s.match_expressions]
    return [f"{label} {'; '.join(parts)}"] if parts else []


def policy_lines(policies: Sequence[model.Policy]) -> Iterator[str]:
    """Each policy in match order: its scope, its triggers and what then happens."""
    for number, p in enumerate(policies, 1):
        m = p.match
        where = ", ".join(m.namespaces.include) if m.namespaces.include else "NONE (inert until edited)"
        scope = [f"namespaces {where}"]
        scope += [f"except {', '.join(m.namespaces.exclude)}"] if m.namespaces.exclude else []
        scope += [f"kinds {', '.join(m.kinds) if m.kinds else 'any'}"]
        scope += _selector("namespace labels", m.namespace_selector) + _selector("pod labels", m.pod_selector)
        yield f"{number}. {p.name} [{p.mode}] ({p.source})"
        yield f"     match: {'; '.join(scope)}"
        for t in p.triggers:
            yield f"     {trigger(t)}"
        if p.activity is not None:
            floor = [f"pods running < {_duration(p.activity.min_running)}"] if p.activity.min_running else []
            rules = [f"rule {r.name} names a pod" for r in p.activity.rules]
            yield f"     in use when: {' or '.join(rules + floor)} (a rule that fails counts as use)"
        yield f"     then: {p.lifecycle.action} after warning {_duration(p.lifecycle.warn_before)} ahead"
