"""Other cleaners running beside the janitor, found in what a cycle read.

kube-janitor (hjacobs/kube-janitor and its forks) deletes whatever carries a `janitor/ttl` or
`janitor/expires` that has passed, with no policy, warning, keep-until or re-check. During a
migration it runs beside the janitor: the janitor's marks keep their deadline in `janitor/deadline`
so it never reads one as a delete order, but the users' own annotations are its to act on, and an
admin should know both run (`/readyz`, the admin report, `janitor_kube_janitor_beside`).
It is recognised the way its own manifests deploy it: a Deployment (or its pod) named
`kube-janitor`, or labelled so under `application`, `app` or `app.kubernetes.io/name`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from janitor.decide.model import ObjectRef, ObjectView, PodView

KUBE_JANITOR = "kube-janitor"
NAME_LABELS = ("application", "app", "app.kubernetes.io/name")


def _named(name: str, labels: Mapping[str, str]) -> bool:
    return name == KUBE_JANITOR or _labelled(labels)


def _labelled(labels: Mapping[str, str]) -> bool:
    """Labelled kube-janitor under one of NAME_LABELS; asked of every running pod of a cluster where
    no Deployment is, so the labels' values are looked through (in C) before any key is."""
    return KUBE_JANITOR in labels.values() and any(labels.get(key) == KUBE_JANITOR for key in NAME_LABELS)


def _pod_named(pod: PodView) -> bool:
    """A pod of a Deployment named kube-janitor (its name less the ReplicaSet's and its own suffix),
    or labelled so."""
    name = pod.ref.name
    return (name.startswith(KUBE_JANITOR) and name.rsplit("-", 2)[0] == KUBE_JANITOR) or _labelled(pod.labels)


def kube_janitors(objects: Sequence[ObjectView], pods: Sequence[PodView]) -> tuple[ObjectRef, ...]:
    """Where kube-janitor runs: its Deployments, or, where no such Deployment was read (Deployments
    are not among the kinds read, or it was deployed some other way), its running pods; sorted."""
    found = {o.ref for o in objects if o.ref.kind == "Deployment" and not o.deleting and _named(o.ref.name, o.labels)}
    if not found:
        found = {p.ref for p in pods if p.phase == "Running" and not p.deleting and _pod_named(p)}
    return tuple(sorted(found, key=str))


def beside_line(refs: Sequence[ObjectRef]) -> str:
    """One sentence for `/readyz`, the log and the admin report."""
    where = ", ".join(f"{r.kind} {r.namespace}/{r.name}" for r in refs)
    return (f"kube-janitor runs beside the janitor ({where}): it deletes whatever janitor/ttl or janitor/expires "
            "has passed, with no policy, warning or keep-until; the janitor's marks keep their deadline in "
            "janitor/deadline, which it does not read. See docs/admin-guide.md, \"Beside kube-janitor\"")
