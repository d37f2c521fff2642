"""Applying planned actions to Kubernetes: Events, guarded deletes and patches, the ledger.

Every write carries the precondition of the read that decided it (uid and resourceVersion), so an
object that changed or was recreated since is never acted on: the answer is CONFLICT and the
caller re-reads and decides again. Each apply goes "probe, announce, act":

1. the same request with `dryRun=All`: the apiserver checks RBAC, the preconditions and
   admission, and persists nothing;
2. an Event on the object with `Action.why` word for word (what `kubectl describe` shows);
3. the request for real.

Between 1 and 2 the fence is asked (the probe may take the client's whole timeout, longer than a
lease may have left): a replica no longer sure it leads posts nothing and writes nothing. It is
asked again between 2 and 3, since the Event may take as long: a replica that lost its lease while
posting it writes nothing more.

The probe costs one request per action (actions are few and capped) and means an Event is only
posted for a change that is about to happen, not for one that a stale resourceVersion refuses.
In dry-run only step 1 runs: the plan is validated by the apiserver, nothing changes, no Event.

Requests are raw JSON through the client's generic `param_serialize`/`call_api`, so custom
resources (Notebooks) work like built-ins. Failures become `janitor.errors` types and then one
`Outcome` each; nothing here retries (the next cycle does). A failure is not always a write that
did not happen: the real write's answer may be lost after the apiserver applied it (a timeout, a
reset, a 5xx). So the object is read again at once (`_sent`): what it shows says whether the write
happened (DONE) or not (FAILED). A result is never "it may have happened": its owner's "done" note
is kept for a change that happened, and goes for one that did not, or that cannot be told.
"""

from __future__ import annotations

import datetime
import json
import logging
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any
from urllib.parse import quote

from kubernetes.client import ApiClient

from janitor import annotations as ann
from janitor import errors, kubeapi, ledger
from janitor.decide.model import Action, ActionType, ObjectRef, ResourceKind, SafetyLedger, TriggerKind
from janitor.decide.reasons import text
from janitor.policy.endings import PatchTarget

logger = logging.getLogger(__name__)

EVENT_MESSAGE_MAX = 1024  # what events.k8s.io/v1 allows; longer `why`s are cut, not rejected
_MERGE_PATCH = "application/merge-patch+json"  # RFC 7386: works on custom resources too
_CLUSTER_EVENTS_NAMESPACE = "default"  # where Events about cluster-scoped objects go (as client-go)


class Outcome(StrEnum):
    """What became of one action. `kube.Outcome`, not `model.Outcome` (a rule's verdict)."""

    DONE = "done"
    GONE = "gone"  # 404: nothing left to do
    CONFLICT = "conflict"  # changed or recreated since it was read: re-read and decide again
    FORBIDDEN = "forbidden"  # RBAC (403) or credentials (401): an admin must act
    FAILED = "failed"
    # Nothing written: a fresh re-read no longer calls for the action (the caller's verdict), or the
    # fence closed before the write; so that every planned action still ends with exactly one
    # recorded outcome.
    SKIPPED = "skipped"


@dataclass(frozen=True, slots=True)
class ActionResult:
    action: Action
    outcome: Outcome
    detail: str


NOT_LEADING = "not done: no longer the leader; the new leader decides"


class _NotLeading(Exception):
    """The fence closed after the probe: nothing is posted or written."""


def _leading() -> bool:
    return True  # without leader election


def _go_on(fence: Callable[[], bool]) -> None:
    """Asked after the probe, before the first write (the Event), and again right before the real
    write (after the Event, which may take the client's whole timeout)."""
    if not fence():
        raise _NotLeading


def apply(
    api: ApiClient,
    action: Action,
    *,
    kind: ResourceKind,
    dry_run: bool = False,
    component: str = "kube-idle-janitor",
    fence: Callable[[], bool] = _leading,
) -> ActionResult:
    """Apply one action; the result says what happened, it never raises for an API failure.
    `fence`: False once another replica may be leader, asked after the probe."""
    problem = _malformed(action, kind)
    if problem:
        result = ActionResult(action, Outcome.FAILED, problem)
        _log(result, dry_run=dry_run)
        return result
    try:
        if action.type in (ActionType.DELETE, ActionType.FORCE_DELETE):
            detail = _delete(api, action, kind=kind, dry_run=dry_run, component=component, fence=fence)
        elif action.type is ActionType.REPORT:
            detail = _report(api, action, kind=kind, dry_run=dry_run, component=component, fence=fence)
        elif action.type.ending is not None and action.type.ending.reclaims:
            detail = _reclaim(api, action, kind=kind, dry_run=dry_run, component=component, fence=fence)
        else:
            raise ValueError(f"unknown action type {action.type!r}")
    except _NotLeading:
        result = ActionResult(action, Outcome.SKIPPED, NOT_LEADING)
        _log(result, dry_run=dry_run)
        return result
    except errors.KubeError as e:
        result = ActionResult(action, outcome_of(e), e.server_message or str(e))
        _log(result, dry_run=dry_run)
        return result
    result = ActionResult(action, Outcome.DONE, detail)
    _log(result, dry_run=dry_run)
    return result


def _malformed(action: Action, kind: ResourceKind) -> str | None:
    """A planner bug caught before any request: the wrong kind would address another resource."""
    target = action.target
    if (target.kind, target.api_version) != (kind.kind, kind.api_version):
        return f"{target} is a {target.api_version} {target.kind}, but kind {kind.key} was given (caller bug)"
    if action.type is ActionType.REPORT and action.report_key is None:
        return "a REPORT action needs a report_key (planner bug)"
    return None


def outcome_of(error: errors.KubeError) -> Outcome:
    """What a failed write means for the action: the one mapping every write uses."""
    if isinstance(error, errors.NotFound):
        return Outcome.GONE
    if isinstance(error, errors.Conflict):
        return Outcome.CONFLICT
    if isinstance(error, (errors.Forbidden, errors.Unauthorized)):
        return Outcome.FORBIDDEN
    return Outcome.FAILED


def write_ledger(api: ApiClient, namespace: str, name: str, safety_ledger: SafetyLedger,
                 resource_version: str | None = None, *, exclusive: bool = False) -> None:
    """Store the ledger in ConfigMap namespace/name (`write_state`). `exclusive`: only over
    `resource_version` of it, or (None) only where there is none yet; `errors.Conflict` otherwise."""
    write_state(api, namespace, name, {ledger.DATA_KEY: ledger.dumps(safety_ledger)}, what="ledger",
                resource_version=resource_version, exclusive=exclusive)


def write_state(api: ApiClient, namespace: str, name: str, data: Mapping[str, str], *, what: str,
                resource_version: str | None = None, exclusive: bool = False) -> str | None:
    """Store `data` keys in the janitor's state ConfigMap namespace/name, creating it if needed;
    its new resourceVersion (None when the answer names none).

    Only the given data keys are written (a merge patch), so the ledger, the notes waiting to be
    sent, the admin's acknowledgement annotation and any labels each stay. `exclusive`: only over
    `resource_version`, or (None) only where there is none yet; `errors.Conflict` otherwise. The
    namespace is not created: it belongs to the deployment, and a missing one means the janitor is
    pointed at the wrong place.
    """
    path = kubeapi.path(_CONFIG_MAPS, namespace, name)
    doing = f"write {what} {namespace}/{name}"
    body: dict[str, Any] = {"data": dict(data)}
    if resource_version is not None:
        body["metadata"] = {"resourceVersion": resource_version}
    if not (exclusive and resource_version is None):  # exclusive, with none read: only a create
        try:
            return _version(_call(api, "PATCH", path, body=body, content_type=_MERGE_PATCH, doing=doing))
        except errors.NotFound:
            if exclusive:
                raise errors.Conflict("the ConfigMap is gone since it was read", status=409, doing=doing) from None
    body = {
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace, "labels": dict(STATE_LABELS)},
        "data": dict(data),
    }
    try:
        return _version(_call(api, "POST", kubeapi.path(_CONFIG_MAPS, namespace), body=body, doing=doing))
    except errors.NotFound as e:
        raise errors.NotFound(
            f"namespace {namespace!r} does not exist; create it (the manifests do) or point the "
            "janitor's state namespace at an existing one", status=404, doing=doing,
        ) from e
    except errors.Conflict:  # created by someone else in between: write over it, unless exclusive
        if exclusive:
            raise
        return _version(_call(api, "PATCH", path, body={"data": dict(data)}, content_type=_MERGE_PATCH, doing=doing))


def _version(answer: Mapping[str, Any] | None) -> str | None:
    return str(((answer or {}).get("metadata") or {}).get("resourceVersion") or "") or None


_CONFIG_MAPS = ResourceKind("", "v1", "ConfigMap", "configmaps")
# The recommended labels on the one object the janitor creates, so `kubectl get -l` and an
# uninstall by label find it with the manifests' objects.
STATE_LABELS = {
    "app.kubernetes.io/name": "kube-idle-janitor",
    "app.kubernetes.io/component": "state",
    "app.kubernetes.io/part-of": "kube-idle-janitor",
    "app.kubernetes.io/managed-by": "kube-idle-janitor",
}
_WRITES = frozenset({"PATCH", "POST", "PUT"})  # the methods that take a fieldManager (DELETE has none)


def _delete(api: ApiClient, action: Action, *, kind: ResourceKind, dry_run: bool, component: str,
            fence: Callable[[], bool] = _leading) -> str:
    """Background propagation: a plain DELETE of a batch/v1 Job orphans its pods, and Foreground
    would leave the owner visible (and blocking) until every dependent is gone."""
    target = action.target
    path = kubeapi.path(kind, target.namespace, target.name)
    _call(api, "DELETE", path, body=_delete_options(action, dry_run=True), doing=f"delete {target} (dry run)")
    if dry_run:
        return "dry run: the apiserver accepted the delete; nothing was deleted and no Event posted"
    _go_on(fence)
    event_note = _post_event(api, action, event_type="Normal", component=component)
    _go_on(fence)
    _sent(api, "DELETE", path, body=_delete_options(action, dry_run=False), doing=f"delete {target}",
          landed=_deleted(target.uid, force=action.type is ActionType.FORCE_DELETE))
    return "deleted" + event_note


def _delete_options(action: Action, *, dry_run: bool) -> dict[str, Any]:
    """DeleteOptions for the body. `dryRun` must be here too: when a DELETE has a body, the
    apiserver reads every option from it and ignores the query string, `?dryRun=All` included."""
    options: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "DeleteOptions",
        "propagationPolicy": "Background",
        "preconditions": {"uid": action.target.uid, "resourceVersion": action.resource_version},
    }
    if action.type is ActionType.FORCE_DELETE:
        options["gracePeriodSeconds"] = 0
    if dry_run:
        options["dryRun"] = ["All"]
    return options


def guarded(patch: dict[str, Any], target: ObjectRef, resource_version: str) -> dict[str, Any]:
    """`patch` with the read's uid and resourceVersion in its metadata: the apiserver answers 409
    when the object changed since, or is another object under the same name."""
    body = dict(patch)
    meta = dict(body.get("metadata") or {})
    meta |= {"uid": target.uid, "resourceVersion": resource_version}
    body["metadata"] = meta
    return body


def _reclaim(api: ApiClient, action: Action, *, kind: ResourceKind, dry_run: bool, component: str,
             fence: Callable[[], bool] = _leading) -> str:
    """Suspend, scale to zero or stop, and drop the janitor's mark in the same write: what is left
    is the user's workload, as they had it, minus its running pods. A suspended CronJob starts no
    new run but stops none, so the Jobs it is running (`action.also`) are suspended right after it,
    each guarded by its uid; one that is gone has finished. One that cannot be suspended (or is not:
    the fence closed after the CronJob's write) makes the outcome a failure, so its "done" note goes:
    the CronJob is suspended, unmarked and its reclaim recorded, but a note about it would say its
    GPUs were freed while the Job runs, and the check of the next cycles that the suspension held
    looks at the CronJob only. The Job is judged on its own. The patch is the ending's, resumed by
    the command the messages give (policy.endings). A workload Kueue admits is switched through its
    Kueue Workload (`action.via`, guarded by its uid) first, then its record written (`_through`)."""
    ending = action.type.ending
    if action.via is not None and ending is not None and not action.also:
        ending = ending.queued  # its Kueue way: the one patch that goes to another object
    if ending is None or ending.patch is None:
        raise ValueError(f"{action.type} of {action.target} is no reclaim, or none through {action.via} (caller bug)")
    if (ending.target is PatchTarget.WORKLOAD) != (action.via is None):
        raise ValueError(f"{action.type} patches its {ending.target}, which the plan did not name (caller bug)")
    patch = ending.patch(datetime.datetime.now(datetime.timezone.utc))
    if action.via is not None:
        return _through(api, action, action.via, patch, kind=kind, dry_run=dry_run, component=component, fence=fence)
    notes = dict((patch.get("metadata") or {}).get("annotations") or {})
    notes |= {key: None for key in ann.MARK_KEYS}
    notes |= action.record  # janitor/reclaimed: the next cycle checks that it held (decide.held)
    body = guarded(patch | {"metadata": {"annotations": notes}}, action.target, action.resource_version)
    path = kubeapi.path(kind, action.target.namespace, action.target.name)
    _call(api, "PATCH", path, body=body, content_type=_MERGE_PATCH, dry_run=True,
          doing=f"{action.type} {action.target} (dry run)")
    for job in action.also:
        _patch_run(api, job, patch, str(action.type), dry_run=True)
    if dry_run:
        return f"dry run: the apiserver accepted the {action.type}; nothing was changed and no Event posted"
    _go_on(fence)
    event_note = _post_event(api, action, event_type="Normal", component=component)
    _go_on(fence)
    _sent(api, "PATCH", path, body=body, content_type=_MERGE_PATCH, doing=f"{action.type} {action.target}",
          landed=_patched(action.target.uid, body))
    failed = []
    for job in action.also:
        if not fence():  # the CronJob's write is done: what is left undone is a failure in part
            failed.append(f"{job}: {NOT_LEADING}")
            continue
        try:
            _patch_run(api, job, patch, str(action.type), dry_run=False)
        except errors.NotFound:
            continue  # finished and gone since the read
        except errors.KubeError as e:
            failed.append(f"{job}: {e}")
    if failed:
        raise errors.KubeError(f"{action.target} {ending.done}, but not the Jobs it runs: " + "; ".join(failed),
                               doing=f"{action.type} {action.target}")
    also = f" with its Job{'s' if len(action.also) > 1 else ''} {', '.join(j.name for j in action.also)}" \
        if action.also else ""
    return f"{action.type} done{also}" + event_note


def _through(api: ApiClient, action: Action, via: ObjectRef, patch: dict[str, Any], *, kind: ResourceKind,
             dry_run: bool, component: str, fence: Callable[[], bool] = _leading) -> str:
    """A reclaim whose switch is another object (`via`, a Kueue Workload): the workload itself is not
    touched but for its mark's removal and the record, since Kueue would undo a change to it. Both
    writes are probed first (the workload's guarded by the read it was decided on); the switch goes
    first, so a record is never left for a reclaim that did not happen; the record follows, guarded by
    the workload's uid only (Kueue is changing the workload by then: it stops it). A record that
    cannot be written (twice) switches the Workload back: a stopped workload whose mark stays would
    read next cycle as "no longer idle", and its owner be told the reclaim was called off."""
    group, _, version = via.api_version.rpartition("/")
    switch = kubeapi.path(ResourceKind(group, version, via.kind, f"{via.kind.lower()}s"), via.namespace, via.name)
    switched = {**patch, "metadata": {"uid": via.uid}}
    notes = {**{key: None for key in ann.MARK_KEYS}, **action.record}
    path = kubeapi.path(kind, action.target.namespace, action.target.name)
    body = guarded({"metadata": {"annotations": notes}}, action.target, action.resource_version)
    _call(api, "PATCH", path, body=body, content_type=_MERGE_PATCH, dry_run=True,
          doing=f"{action.type} {action.target} (dry run)")
    _call(api, "PATCH", switch, body=switched, content_type=_MERGE_PATCH, dry_run=True,
          doing=f"{action.type} {action.target} through {via} (dry run)")
    if dry_run:
        return f"dry run: the apiserver accepted the {action.type} through {via}; nothing was changed, no Event posted"
    _go_on(fence)
    event_note = _post_event(api, action, event_type="Normal", component=component)
    _go_on(fence)  # not between the switch and its record: one never goes without the other
    _sent(api, "PATCH", switch, body=switched, content_type=_MERGE_PATCH,
          doing=f"{action.type} {action.target} through {via}", landed=_patched(via.uid, switched))
    record = {"metadata": {"uid": action.target.uid, "annotations": notes}}
    for _ in range(2):  # a record that cannot be written undoes the switch: never one without the other
        try:
            _call(api, "PATCH", path, body=record, content_type=_MERGE_PATCH,
                  doing=f"record the {action.type} on {action.target}")
            return f"{action.type} done through {via}" + event_note
        except errors.KubeError as e:
            failed = e
    back = {"spec": {"active": True}, "metadata": {"uid": via.uid}}  # a Workload the janitor found active
    try:
        _call(api, "PATCH", switch, body=back, content_type=_MERGE_PATCH, doing=f"switch {via} back")
    except errors.KubeError as e:
        raise errors.KubeError(f"{via} switched ({action.type}), but neither the record on {action.target} "
                               f"({failed}) nor switching it back ({e}) could be written: it stays switched; "
                               f"resume with spec.active: true", doing=f"{action.type} {action.target}") from e
    raise errors.KubeError(f"the record on {action.target} could not be written ({failed}), so {via} was switched "
                           f"back: nothing done", doing=f"{action.type} {action.target}") from failed


_JOBS = ResourceKind("batch", "v1", "Job", "jobs")


def _patch_run(api: ApiClient, job: ObjectRef, patch: Mapping[str, Any], verb: str, *, dry_run: bool) -> None:
    """A Job a CronJob runs gets its CronJob's patch, guarded by its uid only: it was listed, not read."""
    body = {**patch, "metadata": {"uid": job.uid}}
    _call(api, "PATCH", kubeapi.path(_JOBS, job.namespace, job.name), body=body, content_type=_MERGE_PATCH,
          dry_run=dry_run, doing=f"{verb} {job}" + (" (dry run)" if dry_run else ""))


def annotate(
    api: ApiClient,
    target: ObjectRef,
    resource_version: str,
    notes: Mapping[str, str | None],
    *,
    kind: ResourceKind,
    event: tuple[str, str] | None = None,
    component: str = "kube-idle-janitor",
    field_manager: str = ann.FIELD_MANAGER,
) -> str:
    """Merge `notes` into the object's annotations (None removes a key), guarded by the read's
    uid and resourceVersion; returns the new resourceVersion, for the next write in the cycle.

    `event` (reason, message) posts a Normal Event first, for the writes people should see
    (marked, unmarked, deadline moved); bookkeeping writes pass None. `field_manager` is the
    janitor's, except for tools that write for people (`kubectl janitor keep`). Raises `KubeError`.
    """
    body = guarded({"metadata": {"annotations": dict(notes)}}, target, resource_version)
    path = kubeapi.path(kind, target.namespace, target.name)
    if event is not None:
        _call(api, "PATCH", path, body=body, content_type=_MERGE_PATCH, dry_run=True,
              doing=f"annotate {target} (dry run)", field_manager=field_manager)
        notice = Action(ActionType.REPORT, target, resource_version, "", TriggerKind.EXPIRY, "lifecycle", event[0],
                        text(event[1]))
        _post_event(api, notice, event_type="Normal", component=component)
    answer = _call(api, "PATCH", path, body=body, content_type=_MERGE_PATCH, doing=f"annotate {target}",
                   field_manager=field_manager)
    return str((answer.get("metadata") or {}).get("resourceVersion") or resource_version)


def _report(api: ApiClient, action: Action, *, kind: ResourceKind, dry_run: bool, component: str,
            fence: Callable[[], bool] = _leading) -> str:
    """A Warning Event, plus `janitor/reported` on the object so the same mistake is reported once.

    A report changes nothing the owner relies on, so a conflict from a write that only moved the
    resourceVersion (a controller updating a busy Job's status) is retried once on a fresh read of
    the same object (same uid); without that, a Job under status churn would be reported, with one
    more Event, every cycle. Another object under the name is still a CONFLICT.
    """
    target = action.target
    path = kubeapi.path(kind, target.namespace, target.name)
    resource_version = action.resource_version
    event_note = None
    for attempt in (1, 2):
        patch = {
            "metadata": {
                "resourceVersion": resource_version,  # the optimistic lock: 409 if it changed
                "annotations": {ann.REPORTED: action.report_key},
            }
        }
        try:
            _call(api, "PATCH", path, body=patch, content_type=_MERGE_PATCH, dry_run=True,
                  doing=f"annotate {target} (dry run)")
            if dry_run:
                return "dry run: the apiserver accepted the annotation; nothing was changed and no Event posted"
            _go_on(fence)
            if event_note is None:  # one Event, whichever attempt lands
                event_note = _post_event(api, action, event_type="Warning", component=component)
            _go_on(fence)
            _call(api, "PATCH", path, body=patch, content_type=_MERGE_PATCH, doing=f"annotate {target}")
            return "reported" + event_note
        except errors.Conflict:
            if attempt == 2:
                raise
            fresh = _call(api, "GET", path, doing=f"read {target}").get("metadata") or {}
            if fresh.get("uid") != target.uid:
                raise
            already = str((fresh.get("annotations") or {}).get(ann.REPORTED) or "")
            if set(str(action.report_key).splitlines()) <= set(already.splitlines()):
                return "already reported"
            resource_version = str(fresh.get("resourceVersion") or "")
    raise AssertionError("unreachable")


def _post_event(api: ApiClient, action: Action, *, event_type: str, component: str) -> str:
    """Post the Event; a failure is logged and noted, and does not stop the action it announces
    (the log line and the audit record still carry the same `why`)."""
    namespace = action.target.namespace or _CLUSTER_EVENTS_NAMESPACE
    try:
        _call(api, "POST", f"/api/v1/namespaces/{quote(namespace, safe='')}/events",
              body=_event_body(action, namespace, event_type=event_type, component=component),
              doing=f"post Event on {action.target}")
    except errors.KubeError as e:
        logger.warning("could not post the Event for %s: %s", action.target, e,
                       extra=_extra(action, dry_run=False))
        return f" (no Event: {e.server_message})"
    return ""


def _event_body(action: Action, namespace: str, *, event_type: str, component: str) -> dict[str, Any]:
    """A core/v1 Event in the legacy shape `kubectl describe` and kube-janitor's users know."""
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": f"{action.target.name[:200]}.", "namespace": namespace},
        "involvedObject": _involved_object(action.target, action.resource_version),
        "reason": action.reason,
        "message": errors.cut(str(action.why), EVENT_MESSAGE_MAX),
        "type": event_type,
        "source": {"component": component},
        "reportingComponent": component,
        "reportingInstance": socket.gethostname()[:128],
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    }


def _involved_object(target: ObjectRef, resource_version: str) -> dict[str, str]:
    involved = {
        "kind": target.kind,
        "apiVersion": target.api_version,
        "name": target.name,
        "uid": target.uid,
        "resourceVersion": resource_version,
    }
    if target.namespace:
        involved["namespace"] = target.namespace
    return involved


def _call(
    api: ApiClient,
    method: str,
    path: str,
    *,
    body: Any = None,
    content_type: str = "application/json",
    dry_run: bool = False,
    doing: str,
    field_manager: str = ann.FIELD_MANAGER,
) -> dict[str, Any]:
    """One JSON request; any failure becomes a `janitor.errors.KubeError` raised `from` it. A write
    names `field_manager`, so the apiserver's record (managedFields) says which keys the janitor
    wrote: a key someone else writes over is then theirs, and the janitor takes nothing from it."""
    query = [("dryRun", "All")] if dry_run else []
    if method in _WRITES:
        query.append(("fieldManager", field_manager))
    response = kubeapi.request(api, method, path, query=query, body=body, content_type=content_type, doing=doing)
    data = response.data
    try:
        answer = json.loads(data) if data else {}
    except ValueError:
        answer = {}
    return answer if isinstance(answer, dict) else {}


Landed = Callable[[Mapping[str, Any] | None], bool]  # on the object read again (None: not found)


def _sent(api: ApiClient, method: str, path: str, *, body: Any, content_type: str = "application/json",
          doing: str, landed: Landed) -> dict[str, Any]:
    """The write an action is made of (not its probe, not its Event). Any answer but a 5xx says
    whether it happened. A 5xx or no answer at all (a read timeout, a reset) comes after the request
    was sent: the apiserver may have applied it, or not (a webhook that timed out answers 500 and
    changes nothing). So the object is read again, once and at once (a GET, with the client's
    timeout): `landed` on what it shows says whether the write happened, and then it counts as
    answered. Otherwise, or when that read fails too, the failure stands: the action's "done" note
    goes. Silence, rather than a note that someone else's change could later seem to bear out."""
    try:
        return _call(api, method, path, body=body, content_type=content_type, doing=doing)
    except errors.ServerError as e:
        lost = e
    try:
        now: dict[str, Any] | None = _call(api, "GET", path, doing=f"read again after: {doing}")
    except errors.NotFound:
        now = None
    except errors.KubeError as e:
        raise errors.ServerError(f"{lost.server_message}; whether it happened is unknown (read again: "
                                 f"{e.server_message})", status=lost.status, doing=doing) from e
    if landed(now):
        logger.info("%s: %s; read again, it happened", doing, lost.server_message)
        return now or {}
    raise errors.ServerError(f"{lost.server_message}; read again, it did not happen", status=lost.status,
                             doing=doing) from lost


def _deleted(uid: str, *, force: bool) -> Landed:
    """A DELETE happened: the object is gone (by uid: another under its name is not it), or on its
    way out (a finalizer holds it, with its deletionTimestamp set). A force delete is of a pod on
    its way out already: only gone counts."""
    def landed(now: Mapping[str, Any] | None) -> bool:
        if now is None:
            return True
        meta = now.get("metadata") or {}  # an answer without a uid tells nothing
        on_its_way_out = not force and meta.get("deletionTimestamp") is not None
        return bool(meta.get("uid")) and (meta["uid"] != uid or on_its_way_out)
    return landed


def _patched(uid: str, body: Mapping[str, Any]) -> Landed:
    """A merge patch happened: the object (by uid) shows every field as `body` wrote it, a null as
    absent. Its guard (uid, resourceVersion) is no field it wrote."""
    meta = {k: v for k, v in (body.get("metadata") or {}).items() if k not in ("uid", "resourceVersion")}
    wrote = {**body, "metadata": meta}

    def landed(now: Mapping[str, Any] | None) -> bool:
        return now is not None and ((now.get("metadata") or {}).get("uid") == uid) and _shows(now, wrote)
    return landed


def _shows(now: Mapping[str, Any], wrote: Mapping[str, Any]) -> bool:
    for key, value in wrote.items():
        if value is None:
            if now.get(key) is not None:
                return False
        elif isinstance(value, Mapping):
            inner = now.get(key) or {}
            if not isinstance(inner, Mapping) or not _shows(inner, value):
                return False
        elif now.get(key) != value:
            return False
    return True


def _log(result: ActionResult, *, dry_run: bool) -> None:
    action = result.action
    prefix = "DRY-RUN " if dry_run else ""
    level = logging.INFO if result.outcome in (Outcome.DONE, Outcome.GONE) else logging.WARNING
    logger.log(
        level, "%s%s %s: %s -> %s (%s)", prefix, action.type.value, action.target, action.why,
        result.outcome.value, result.detail, extra=_extra(action, dry_run=dry_run),
    )


def _extra(action: Action, *, dry_run: bool) -> dict[str, object]:
    """Context for structured logs; keys are prefixed because LogRecord owns `name`."""
    target = action.target
    return {
        "object_kind": target.kind,
        "object_namespace": target.namespace,
        "object_name": target.name,
        "object_uid": target.uid,
        "rule": action.rule,
        "policy": action.policy,
        "trigger": str(action.trigger),
        "action": action.type.value,
        "reason": action.reason,
        "dry_run": dry_run,
    }


_STATE_KIND = ResourceKind("", "v1", "ConfigMap", "configmaps")


def announce(api: ApiClient, namespace: str, name: str, *, reason: str, message: str,
             component: str = "kube-idle-janitor") -> None:
    """A Warning Event on the janitor's state ConfigMap, where admins look (and alert) for what
    the janitor itself needs from them, such as acknowledging a tripped tripwire."""
    try:
        body = _call(api, "GET", kubeapi.path(_STATE_KIND, namespace, name), doing=f"read ConfigMap {namespace}/{name}")
        meta = (body or {}).get("metadata", {})
        ref = ObjectRef("ConfigMap", "v1", namespace, name, meta.get("uid", ""))
    except errors.KubeError as e:
        logger.error("could not announce %s on %s/%s: %s", reason, namespace, name, e)
        return
    notice = Action(ActionType.REPORT, ref, meta.get("resourceVersion", ""), "", TriggerKind.EXPIRY, "rails", reason,
                    text(message))
    _post_event(api, notice, event_type="Warning", component=component)
