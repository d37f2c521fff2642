"""Policy YAML -> `model.Policy` values, with every mistake reported as `file:line: field: problem`.

Why it is written this way:

* The YAML is *composed* into PyYAML nodes, not loaded into dicts, because only nodes keep their
  `start_mark`: that is how an error points at the line to fix.
* One file's errors are all collected, not just the first, so an admin fixes a file in one pass.
  Unknown fields are errors with the closest known field suggested: a typo such as `treshold`
  must never silently fall back to a default.
* `from_paths` is a pure function of the files' contents returning `(policies, errors, files)`. It never
  raises for a bad policy and keeps no state, so the daemon can reload on change and keep its last
  good set when `errors` is non-empty. When there is any error, `policies` is empty: a partial set
  would silently change which policy matches first.
* Durations use the `janitor/ttl` grammar of `annotations.parse_ttl`, so admins learn one syntax
  for annotations and policies (`parse_duration=` lets tests pass another parser), with its bound
  (100 years); time zones are `annotations.parse_time_zone`'s, as for a namespace's own zone.
* Whatever the bytes, the result is errors, never an exception: the daemon reloads files an admin
  may be half-way through writing, and a cycle must not fail on them. Before a single value is
  read, a file is held to MAX_BYTES, to MAX_DEPTH levels of nesting (PyYAML composes recursively,
  and its scanner slows down with the square of the depth) and to MAX_NODES values, an alias
  counting as what it repeats (an alias bomb is small as text and huge as data; a recursive alias
  is endless), which also bounds the time a reload takes. Messages quote values cut short and on
  one line, so a huge key or value is not echoed whole into `janitor check` or the logs.
"""

from __future__ import annotations

import datetime as _dt
import difflib
import enum
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

import yaml
from yaml.events import AliasEvent, Event
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from janitor.annotations import DURATION_BOUND, OutOfRange, format_duration, parse_time_zone, parse_ttl
from janitor.policy import model

DURATION_FORMS = "(e.g. 30m, 8h, 7d)"
MAX_BYTES = 1 << 20  # 1 MiB: as much as a ConfigMap holds
MAX_DEPTH = 64  # levels of nesting; a policy needs 8
MAX_NODES = 20_000  # values, an alias counting as what it repeats; a policy has 15 to 120
_STR, _INT, _FLOAT, _BOOL = (f"tag:yaml.org,2002:{t}" for t in ("str", "int", "float", "bool"))
_NULL = "tag:yaml.org,2002:null"
_NAME_RE = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")  # DNS label: also an annotation value
_GLOB_RE = re.compile(r"[-a-z0-9*?\[\]!]{1,63}")
_KIND_RE = re.compile(r"[A-Z][A-Za-z0-9]{0,62}")
_LABEL_NAME = r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
_LABEL_KEY_RE = re.compile(rf"([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?{_LABEL_NAME}")
_LABEL_VALUE_RE = re.compile(f"({_LABEL_NAME})?")
_CONSTRUCTOR = yaml.constructor.SafeConstructor()
E = TypeVar("E", bound=enum.Enum)
DurationParser = Callable[[str], _dt.timedelta | None]
"""`annotations.parse_ttl`: text -> timedelta, None for 'forever', ValueError otherwise."""


class PolicyError(Exception):
    """One thing wrong in a policy file. `line` is 1-based (None: the file as a whole), `field` the
    dotted path inside the policy (`triggers.idleGpu.window`), `problem` what is wrong and the
    accepted forms. str() is the `file:line: field: problem` line `janitor check` prints."""

    def __init__(self, file: str, line: int | None, field: str, problem: str) -> None:
        super().__init__(file, line, field, problem)
        self.file, self.line, self.field, self.problem = file, line, field, problem

    def __str__(self) -> str:
        where = self.file if self.line is None else f"{self.file}:{self.line}"
        return f"{where}: {self.field}: {self.problem}" if self.field else f"{where}: {self.problem}"


class Loaded(NamedTuple):
    """What `from_paths` read: the policies in first-match order (empty if any error), every error, and
    the files read (what a reloader watches)."""

    policies: tuple[model.Policy, ...]
    errors: tuple[PolicyError, ...]
    files: tuple[Path, ...]


def from_paths(paths: Iterable[str | Path], *, parse_duration: DurationParser = parse_ttl) -> Loaded:
    """Read policy files and directories (their `*.yaml`/`*.yml` files sorted by name, hidden
    files skipped as in ConfigMap mounts) in the order given; policies keep file order."""
    files, errors = _expand(paths)
    policies: list[model.Policy] = []
    first_seen: dict[str, str] = {}
    for path in files:
        try:
            with path.open("rb") as f:
                data = f.read(MAX_BYTES + 1)
            text = data.decode("utf-8")
        except (OSError, UnicodeDecodeError) as e:
            errors.append(PolicyError(str(path), None, "", f"cannot read the file: {_one_line(str(e))}"))
            continue
        if len(data) > MAX_BYTES:
            errors.append(PolicyError(str(path), None, "", _TOO_BIG))
            continue
        parsed, file_errors = from_text(text, file=str(path), parse_duration=parse_duration)
        errors.extend(file_errors)
        for policy in parsed:
            if policy.name in first_seen:
                line = int(policy.source.rsplit(":", 1)[1])
                errors.append(PolicyError(str(path), line, "name",
                                          f"{policy.name!r} is already defined at {first_seen[policy.name]}; "
                                          "policy names must be unique across all files"))
            else:
                first_seen[policy.name] = policy.source
                policies.append(policy)
    return Loaded(() if errors else tuple(policies), tuple(errors), tuple(files))


def from_text(text: str, *, file: str, parse_duration: DurationParser = parse_ttl
              ) -> tuple[tuple[model.Policy, ...], tuple[PolicyError, ...]]:
    """Parse one file's text. Returns the valid policies and all errors (names unique within it)."""
    if len(text) > MAX_BYTES:
        return (), (PolicyError(file, None, "", _TOO_BIG),)
    try:
        root = _Loader.compose(text)
    except _Limit as e:
        return (), (PolicyError(file, e.line, "", e.problem),)
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        problem = " ".join(str(p) for p in (e.context, e.problem) if p)
        return (), (PolicyError(file, mark.line + 1 if mark else None, "", f"not valid YAML: {_one_line(problem)}"),)
    except yaml.YAMLError as e:
        return (), (PolicyError(file, None, "", f"not valid YAML: {_one_line(str(e))}"),)
    if root is None:
        return (), (PolicyError(file, 1, "", "the file is empty: expected 'policies:' with a list of "
                                             "policies (see docs/policies.md)"),)
    reader = _Reader(file, parse_duration)
    top = reader.fields(root, "", ("policies",), required=("policies",))
    policies: list[model.Policy] = []
    if top and "policies" in top:
        seq = top["policies"]
        if not isinstance(seq, SequenceNode) or not seq.value:
            reader.fail(seq, "policies", f"expected a non-empty list of policies, got {_show(seq)}")
        else:
            names: dict[str, int] = {}
            for index, node in enumerate(seq.value):
                policy = _policy(reader, node, index)
                if policy is None:
                    continue
                if policy.name in names:
                    reader.fail(node, "name", f"{policy.name!r} is already defined at {file}:{names[policy.name]}; "
                                              "policy names must be unique")
                else:
                    names[policy.name] = node.start_mark.line + 1
                    policies.append(policy)
    # Reading order is not line order (the policy's own fields are checked after its children).
    return tuple(policies), tuple(sorted(reader.errors, key=lambda e: e.line or 0))


_TOO_BIG = f"the file is larger than {MAX_BYTES >> 20} MiB: split it into several files"


class _Limit(Exception):
    """A file past MAX_DEPTH or MAX_NODES: the whole message, and the 1-based line where it went past."""

    def __init__(self, problem: str, event: Event) -> None:
        super().__init__(problem)
        self.problem = problem
        self.line = event.start_mark.line + 1 if event.start_mark is not None else None


class _Loader(yaml.SafeLoader):
    """PyYAML's safe composer, held to MAX_DEPTH and MAX_NODES as it goes: it stops at the first
    node past a limit, so the rest of a huge or deep file is never scanned. Each node's size (itself
    and everything under it, an alias counting as what it refers to) is kept by id while composing."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.depth = 0
        self.sizes: dict[int, int] = {}

    @classmethod
    def compose(cls, text: str) -> Node | None:
        loader = cls(text)  # reads the text's characters: a ReaderError for NUL and the like
        try:
            return loader.get_single_node()
        finally:
            loader.dispose()

    def compose_node(self, parent: Node | None, index: int) -> Node | None:
        event: Event = self.peek_event()  # type: ignore[no-untyped-call]
        if isinstance(event, AliasEvent):
            node = super().compose_node(parent, index)
            if node is not None and id(node) not in self.sizes:  # still being composed: it contains itself
                raise _Limit(f"too large: alias *{_cut(str(event.anchor))} refers to itself, without end", event)
            return node
        if self.depth >= MAX_DEPTH:
            raise _Limit(f"too deep: nested more than {MAX_DEPTH} levels (a policy needs 8)", event)
        self.depth += 1
        try:
            node = super().compose_node(parent, index)
        finally:
            self.depth -= 1
        if node is None:
            return None
        children: list[Node] = []
        if isinstance(node, SequenceNode):
            children = node.value
        elif isinstance(node, MappingNode):
            children = [part for pair in node.value for part in pair]
        size = 1 + sum(self.sizes[id(child)] for child in children)
        if size > MAX_NODES:
            raise _Limit(f"too large: more than {MAX_NODES:,} values (an alias counts as the values it repeats)",
                         event)
        self.sizes[id(node)] = size
        return node


def _cut(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _one_line(text: str, limit: int = 200) -> str:
    """A message from elsewhere (PyYAML, the OS) on one line, cut short: it may quote the file."""
    return _cut(" ".join(text.split()), limit)


def _expand(paths: Iterable[str | Path]) -> tuple[list[Path], list[PolicyError]]:
    files: list[Path] = []
    errors: list[PolicyError] = []
    seen: set[Path] = set()
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            found = sorted((p for p in path.iterdir() if p.suffix in (".yaml", ".yml")
                            and not p.name.startswith(".") and p.is_file()), key=lambda p: p.name)
            if not found:
                errors.append(PolicyError(str(path), None, "", "no policy files (*.yaml, *.yml) in this directory"))
        elif path.is_file():
            found = [path]
        else:
            errors.append(PolicyError(str(path), None, "", "no such file or directory"))
            found = []
        for p in found:
            if p.resolve() not in seen:
                seen.add(p.resolve())
                files.append(p)
    return files, errors


def _show(node: Node) -> str:
    """A value as an error message quotes it: strings in quotes, so stray spaces show."""
    if isinstance(node, MappingNode):
        return "a mapping"
    if isinstance(node, SequenceNode):
        return "a list"
    return _cut(repr(node.value)) if node.tag == _STR else _one_line(str(node.value), 60)


def _name(key: str) -> str:
    """A key as a field path shows it: as written when it reads as one, else quoted and cut."""
    return key if len(key) <= 60 and key.isprintable() and " " not in key else _cut(repr(key))


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


class _Reader:
    """Reads one file's nodes, recording each problem and carrying on, so all are reported."""

    def __init__(self, file: str, parse_duration: DurationParser) -> None:
        self.file = file
        self.parse_duration = parse_duration
        self.errors: list[PolicyError] = []

    def fail(self, node: Node, path: str, problem: str) -> None:
        self.errors.append(PolicyError(self.file, node.start_mark.line + 1, path, problem))

    def fields(self, node: Node, path: str, known: Sequence[str], *,
               required: Sequence[str] = ()) -> dict[str, Node] | None:
        """A mapping's fields by name; unknown and repeated keys are errors (with a suggestion)."""
        if not isinstance(node, MappingNode):
            self.fail(node, path, f"expected a mapping ({', '.join(known)}), got {_show(node)}")
            return None
        out: dict[str, Node] = {}
        suggested: set[str] = set()
        for key_node, value in node.value:
            key = str(key_node.value) if isinstance(key_node, ScalarNode) else "?"
            where = _join(path, _name(key))
            if key not in known:
                close = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
                hint = f"did you mean '{close[0]}'?" if close else f"known fields: {', '.join(known)}"
                self.fail(key_node, where, f"unknown field; {hint}")
                suggested.update(close)
            elif key in out:
                self.fail(key_node, where, "is given twice; keep one")
            else:
                out[key] = value
        for key in required:
            if key not in out and key not in suggested:  # the typo's error already says it
                self.fail(node, _join(path, key), "is required")
        return out

    def scalar(self, node: Node, path: str, tags: tuple[str, ...], expected: str) -> Any:
        if isinstance(node, ScalarNode) and node.tag in tags:
            try:
                return _CONSTRUCTOR.construct_object(node)
            except (ValueError, KeyError, yaml.YAMLError):  # 5,000 digits; `!!bool maybe`, `!!int x`
                pass
        self.fail(node, path, f"{_show(node)} is not {expected}")
        return None

    def string(self, node: Node, path: str, pattern: re.Pattern[str] | None = None, forms: str = "") -> str | None:
        value = self.scalar(node, path, (_STR,), forms or "a string")
        if value is not None and pattern is not None and not pattern.fullmatch(value):
            self.fail(node, path, f"{_show(node)} is not {forms}")
            return None
        return value  # type: ignore[no-any-return]

    def number(self, node: Node, path: str, low: float, high: float, why: str = "") -> float | None:
        forms = f"a number from {low:g} to {high:g}{why}"
        value = self.scalar(node, path, (_INT, _FLOAT), forms)
        if value is None:
            return None
        if not low <= value <= high:  # NaN fails this too
            self.fail(node, path, f"{_show(node)} is out of range: use {forms}")
            return None
        return float(value)

    def boolean(self, node: Node, path: str) -> bool | None:
        return self.scalar(node, path, (_BOOL,), "true or false")  # type: ignore[no-any-return]

    def choice(self, node: Node, path: str, kind: type[E]) -> E | None:
        forms = " | ".join(str(m.value) for m in kind)
        value = self.string(node, path, forms=f"one of {forms}")
        try:
            return kind(value) if value is not None else None
        except ValueError:
            self.fail(node, path, f"{_show(node)} is not one of {forms}")
            return None

    def duration(self, node: Node, path: str, *, allow_zero: bool = False) -> _dt.timedelta | None:
        if not isinstance(node, ScalarNode) or node.tag != _STR:
            self.fail(node, path, f"{_show(node)} is not a duration {DURATION_FORMS}")
            return None
        try:
            value = self.parse_duration(node.value)
        except OutOfRange:
            self.fail(node, path, f"{_show(node)} is out of range: {DURATION_BOUND}")
            return None
        except ValueError:
            self.fail(node, path, f"{_show(node)} is not a duration {DURATION_FORMS}")
            return None
        if value is None:
            self.fail(node, path, f"'forever' is not allowed here: give a duration {DURATION_FORMS}")
        elif not value and not allow_zero:
            self.fail(node, path, f"must be longer than 0s {DURATION_FORMS}")
            return None
        return value

    def items(self, node: Node, path: str, read: Callable[[Node, str], Any]) -> tuple[Any, ...]:
        """A list, each item read by `read`; items that fail are dropped (their error is recorded)."""
        if not isinstance(node, SequenceNode):
            self.fail(node, path, f"expected a list, got {_show(node)}")
            return ()
        values = (read(item, f"{path}[{i}]") for i, item in enumerate(node.value))
        return tuple(v for v in values if v is not None)


# --- policies, field by field -------------------------------------------------------------------

def _policy(r: _Reader, node: Node, index: int) -> model.Policy | None:
    before = len(r.errors)
    if not isinstance(node, MappingNode):
        r.fail(node, f"policies[{index}]",
               f"expected a policy (a mapping with name, match, triggers), got {_show(node)}")
        return None
    f = r.fields(node, "", ("name", "description", "mode", "match", "triggers", "lifecycle", "activity"),
                 required=("name", "match", "triggers")) or {}
    name = r.string(f["name"], "name", _NAME_RE, "a lower-case DNS label (a-z, 0-9, '-'; at most 63)") \
        if "name" in f else None
    description = r.string(f["description"], "description") if "description" in f else ""
    mode = r.choice(f["mode"], "mode", model.Mode) if "mode" in f else model.Mode.SHADOW
    match = _match(r, f["match"], "match") if "match" in f else None
    triggers = _triggers(r, f["triggers"], "triggers") if "triggers" in f else ()
    lifecycle = _lifecycle(r, f["lifecycle"], "lifecycle") if "lifecycle" in f else model.Lifecycle()
    activity = _activity(r, f["activity"], "activity") if "activity" in f else None
    if activity is not None and not any(isinstance(t, (model.IdleGpu, model.IdleCpu)) for t in triggers):
        r.fail(f["activity"], "activity", "activity rules say when an idle workload is in use after all: give them "
               "to a policy with idleGpu or idleCpu")
    if any(isinstance(t, model.Hung) for t in triggers):
        if len(triggers) > 1:
            r.fail(f["triggers"], "triggers", "hung takes a policy of its own: its action is only a report unless "
                   "the policy says otherwise, which must not quietly apply to other triggers")
        elif not _has(f.get("lifecycle"), "action"):
            lifecycle = replace(lifecycle, action=model.Action.REPORT)  # a stuck job is told, not reclaimed
        else:
            _hung_action(r, f["lifecycle"], triggers[0], lifecycle.action)
    if any(isinstance(t, model.ReservedQuota) for t in triggers):
        lifecycle = _reserved_quota_policy(r, f, triggers, lifecycle)
    if any(isinstance(t, model.OrphanedClaim) for t in triggers):
        lifecycle = _orphaned_claim_policy(r, f, triggers, lifecycle)
    if len(r.errors) > before or name is None or match is None or mode is None:
        return None
    return model.Policy(name=name, description=description or "", mode=mode, match=match, triggers=triggers,
                        lifecycle=lifecycle, source=f"{r.file}:{node.start_mark.line + 1}", activity=activity)


def _match(r: _Reader, node: Node, path: str) -> model.Match | None:
    f = r.fields(node, path, ("namespaces", "namespaceSelector", "podSelector", "kinds"), required=("namespaces",))
    if f is None or "namespaces" not in f:
        return None
    kinds = r.items(f["kinds"], f"{path}.kinds", lambda n, p: _kind(r, n, p)) if "kinds" in f else ()
    return model.Match(
        namespaces=_namespaces(r, f["namespaces"], f"{path}.namespaces"),
        namespace_selector=_selector(r, f["namespaceSelector"], f"{path}.namespaceSelector")
        if "namespaceSelector" in f else model.LabelSelector(),
        pod_selector=(_selector(r, f["podSelector"], f"{path}.podSelector") if "podSelector" in f
                      else model.LabelSelector()),
        kinds=tuple(dict.fromkeys(kinds)),
    )


def _kind(r: _Reader, node: Node, path: str) -> str | None:
    kind = r.string(node, path, _KIND_RE, "a Kubernetes kind such as Deployment, Job, StatefulSet, Notebook or Pod")
    if kind == "DaemonSet":
        r.fail(node, path, "DaemonSet pods are never candidates (one per node is their purpose); remove it")
        return None
    return kind


def _namespaces(r: _Reader, node: Node, path: str) -> model.Namespaces:
    f = r.fields(node, path, ("include", "exclude"), required=("include",)) or {}

    def glob(n: Node, p: str) -> str | None:
        value = r.string(n, p, _GLOB_RE, "a namespace glob (a-z, 0-9, '-', and * ? [...]; at most 63)")
        if value is not None and value.count("[") != value.count("]"):
            r.fail(n, p, f"{_show(n)} has an unbalanced '[': a set is written [abc] or [!abc]")
            return None
        return value

    return model.Namespaces(include=r.items(f["include"], f"{path}.include", glob) if "include" in f else (),
                            exclude=r.items(f["exclude"], f"{path}.exclude", glob) if "exclude" in f else ())


def _selector(r: _Reader, node: Node, path: str) -> model.LabelSelector:
    f = r.fields(node, path, ("matchLabels", "matchExpressions")) or {}
    key_forms = "a label key ([prefix/]name, name: alphanumerics, '-', '_', '.', at most 63)"
    value_forms = "a label value (alphanumerics, '-', '_', '.', at most 63; quote true, 1, yes)"
    labels: list[tuple[str, str]] = []
    if "matchLabels" in f:
        given = f["matchLabels"]
        if not isinstance(given, MappingNode):
            r.fail(given, f"{path}.matchLabels", f"expected a mapping of label key to value, got {_show(given)}")
        else:
            for k, v in given.value:
                key = r.string(k, f"{path}.matchLabels", _LABEL_KEY_RE, key_forms)
                shown = _name(str(k.value)) if isinstance(k, ScalarNode) else "?"
                value = r.string(v, f"{path}.matchLabels.{shown}", _LABEL_VALUE_RE, value_forms)
                if key is not None and value is not None:
                    labels.append((key, value))

    def requirement(n: Node, p: str) -> model.Requirement | None:
        e = r.fields(n, p, ("key", "operator", "values"), required=("key", "operator"))
        if not e or "key" not in e or "operator" not in e:
            return None
        key = r.string(e["key"], f"{p}.key", _LABEL_KEY_RE, key_forms)
        op = r.choice(e["operator"], f"{p}.operator", model.Operator)
        values = r.items(e["values"], f"{p}.values",
                         lambda vn, vp: r.string(vn, vp, _LABEL_VALUE_RE, value_forms)) if "values" in e else ()
        if op in (model.Operator.IN, model.Operator.NOT_IN) and not values:
            r.fail(n, f"{p}.values", f"{op} needs a non-empty list of values")
            return None
        if op in (model.Operator.EXISTS, model.Operator.DOES_NOT_EXIST) and "values" in e:
            r.fail(e["values"], f"{p}.values", f"{op} takes no values; remove them")
            return None
        return model.Requirement(key, op, values) if key is not None and op is not None else None

    expressions = r.items(f["matchExpressions"], f"{path}.matchExpressions", requirement) \
        if "matchExpressions" in f else ()
    return model.LabelSelector(tuple(labels), expressions)


def _triggers(r: _Reader, node: Node, path: str) -> tuple[model.Trigger, ...]:
    before = len(r.errors)
    f = r.fields(node, path, tuple(_TRIGGER_READERS))
    if f is None:
        return ()
    if not f and len(r.errors) == before:  # `{}`, not a mapping of only misspelt keys
        r.fail(node, path, f"give at least one trigger: {', '.join(_TRIGGER_READERS)}")
    return tuple(t for key, n in f.items() if (t := _TRIGGER_READERS[key](r, n, f"{path}.{key}")) is not None)


def _window_fields(r: _Reader, f: dict[str, Node], path: str,
                   default: _dt.timedelta = _dt.timedelta(hours=2)) -> dict[str, Any]:
    """window, minCoverage, minPodAge and maxGap, shared by the triggers on Prometheus evidence;
    minPodAge defaults to window, maxGap to a few scrape intervals of the series' target (known
    only when Prometheus is read)."""
    window = r.duration(f["window"], f"{path}.window") if "window" in f else default
    coverage = r.number(f["minCoverage"], f"{path}.minCoverage", 0, 1) if "minCoverage" in f else 0.8
    age = r.duration(f["minPodAge"], f"{path}.minPodAge", allow_zero=True) if "minPodAge" in f else window
    gap = r.duration(f["maxGap"], f"{path}.maxGap") if "maxGap" in f else None
    if gap is not None and window is not None and gap >= window:
        r.fail(f["maxGap"], f"{path}.maxGap", "must be shorter than the window: a stretch without samples as "
               "long as the window means no data at all")
        gap = None
    return {"window": window, "min_coverage": coverage, "min_pod_age": age, "max_gap": gap}


def _idle_gpu(r: _Reader, node: Node, path: str) -> model.IdleGpu | None:
    f = r.fields(node, path, ("signal", "threshold", "signals", "idlePowerWatts", "window", "minCoverage",
                              "minPodAge", "maxGap", "neverUsed"))
    if f is None:
        return None
    common = _window_fields(r, f, path)
    never = _never_used(r, f["neverUsed"], f"{path}.neverUsed", common["window"], common["min_pod_age"]) \
        if "neverUsed" in f else None
    if "neverUsed" in f and never is None:
        return None
    if "signals" in f and ("signal" in f or "threshold" in f):
        r.fail(f["signals"], f"{path}.signals", "give either signals (several, each with its threshold) or "
               "signal and threshold (one), not both")
        return None
    limits = _signals(r, f["signals"], f"{path}.signals") if "signals" in f else _one_signal(r, f, path)
    power = _idle_power(r, f["idlePowerWatts"], f"{path}.idlePowerWatts") if "idlePowerWatts" in f else ()
    if not limits or power is None:
        return None
    if any(s.relative for s, _ in limits) and not power:
        r.fail(f.get("signals") or f.get("signal") or node, path, f"{model.GpuSignal.POWER.value} is judged "
               "against each GPU model's idle power: give idlePowerWatts (modelName glob: watts)")
        return None
    (signal, threshold), *also = limits
    return model.IdleGpu(signal=signal, threshold=threshold, also=tuple(also), idle_power=power, never_used=never,
                         **common)


def _never_used(r: _Reader, node: Node, path: str, window: _dt.timedelta | None,
                min_age: _dt.timedelta | None) -> model.NeverUsed | None:
    f = r.fields(node, path, ("after", "warnBefore"), required=("after", "warnBefore"))
    if not f or "after" not in f or "warnBefore" not in f:
        return None
    after = r.duration(f["after"], f"{path}.after")
    warn = r.duration(f["warnBefore"], f"{path}.warnBefore")
    if after is None or warn is None or window is None:
        return None
    if min_age is not None and min_age > window:
        r.fail(node, path, f"minPodAge ({_fmt(min_age)}) is longer than the window: pods younger than it are "
               "not judged, never used or not; leave out minPodAge or neverUsed")
        return None
    if after + warn >= window:
        r.fail(node, path, f"after + warnBefore ({_fmt(after + warn)}) must be shorter than the window "
               f"({_fmt(window)}): a never-used pod is judged on its whole life, which the window must hold "
               "through its deadline")
        return None
    return model.NeverUsed(after, warn)


def _fmt(delta: _dt.timedelta) -> str:
    return format_duration(delta)


def _one_signal(r: _Reader, f: dict[str, Node], path: str) -> tuple[tuple[model.GpuSignal, float], ...]:
    signal = r.choice(f["signal"], f"{path}.signal", model.GpuSignal) if "signal" in f else model.GpuSignal.GPU_UTIL
    if signal is None:
        return ()
    threshold = _threshold(r, f.get("threshold"), f"{path}.threshold", signal)
    return () if threshold is None else ((signal, threshold),)


def _threshold(r: _Reader, node: Node | None, path: str, signal: model.GpuSignal) -> float | None:
    if node is None or (isinstance(node, ScalarNode) and node.tag == _NULL):
        return signal.default_threshold
    what = " (a multiple of the GPU's idle power)" if signal.relative else ""
    return r.number(node, path, 1 if signal.relative else 0, signal.maximum, f" for {signal.value}{what}")


def _signals(r: _Reader, node: Node, path: str) -> tuple[tuple[model.GpuSignal, float], ...]:
    """`signals: {FIELD: threshold, ...}`, in the order given; a null threshold is the signal's default."""
    names = tuple(s.value for s in model.GpuSignal)
    f = r.fields(node, path, names)
    if f is None:
        return ()
    if not f:
        r.fail(node, path, f"name at least one signal: {', '.join(names)}")
        return ()
    found = [(model.GpuSignal(k), _threshold(r, n, f"{path}.{k}", model.GpuSignal(k))) for k, n in f.items()]
    if any(t is None for _, t in found) or len(found) != len(node.value):
        return ()
    return tuple((s, t) for s, t in found if t is not None)


def _idle_power(r: _Reader, node: Node, path: str) -> tuple[tuple[str, float], ...] | None:
    """`idlePowerWatts: {modelName glob: watts}`: what each GPU model draws doing nothing."""
    if not isinstance(node, MappingNode) or not node.value:
        r.fail(node, path, "expected a mapping of dcgm-exporter modelName globs to watts, e.g. "
               "'NVIDIA A100*': 55")
        return None
    found: list[tuple[str, float]] = []
    for key, value in node.value:
        glob = r.string(key, f"{path}.{key.value}" if isinstance(key, ScalarNode) else path)
        watts = r.number(value, f"{path}.{glob}", 1, 2000, " watts")
        if glob is None or watts is None:
            return None
        found.append((glob, watts))
    return tuple(found)


def _idle_cpu(r: _Reader, node: Node, path: str) -> model.IdleCpu | None:
    f = r.fields(node, path, ("cores", "fractionOfRequest", "window", "minCoverage", "minPodAge",
                              "maxGap", "ignoreContainers"))
    if f is None:
        return None
    if ("cores" in f) == ("fractionOfRequest" in f):
        r.fail(node, path, "give exactly one of cores (absolute) or fractionOfRequest (0-1)")
    cores = r.number(f["cores"], f"{path}.cores", 0, 1e6) if "cores" in f else None
    fraction = r.number(f["fractionOfRequest"], f"{path}.fractionOfRequest", 0, 1) if "fractionOfRequest" in f else None
    ignore = r.items(f["ignoreContainers"], f"{path}.ignoreContainers",
                     lambda n, p: r.string(n, p, _NAME_RE, "a container name (a DNS label)")) \
        if "ignoreContainers" in f else ()
    return model.IdleCpu(cores=cores, fraction_of_request=fraction, ignore_containers=ignore,
                         **_window_fields(r, f, path))


def _terminating(r: _Reader, node: Node, path: str) -> model.Terminating | None:
    f = r.fields(node, path, ("after", "forceDelete"), required=("after",))
    after = r.duration(f["after"], f"{path}.after") if f and "after" in f else None
    force = r.boolean(f["forceDelete"], f"{path}.forceDelete") if f and "forceDelete" in f else False
    return model.Terminating(after=after, force_delete=bool(force)) if after is not None else None


def _pending(r: _Reader, node: Node, path: str) -> model.Pending | None:
    f = r.fields(node, path, ("after", "includeGated"), required=("after",))
    after = r.duration(f["after"], f"{path}.after") if f and "after" in f else None
    gated = r.boolean(f["includeGated"], f"{path}.includeGated") if f and "includeGated" in f else False
    return model.Pending(after=after, include_gated=bool(gated)) if after is not None else None


def _after_only(kind: type[model.ReservedQuota] | type[model.OrphanedClaim]
                ) -> Callable[[_Reader, Node, str], model.Trigger | None]:
    """The reader of a trigger whose one field is `after`."""
    def read(r: _Reader, node: Node, path: str) -> model.Trigger | None:
        f = r.fields(node, path, ("after",), required=("after",))
        after = r.duration(f["after"], f"{path}.after") if f and "after" in f else None
        return kind(after=after) if after is not None else None
    return read


def _crash_loop(r: _Reader, node: Node, path: str) -> model.CrashLoop | None:
    f = r.fields(node, path, ("restarts", "window", "ignoreContainers"))
    if f is None:
        return None
    default = model.CrashLoop()
    restarts = r.number(f["restarts"], f"{path}.restarts", 1, 10_000) if "restarts" in f else default.restarts
    window = r.duration(f["window"], f"{path}.window") if "window" in f else default.window
    ignore = r.items(f["ignoreContainers"], f"{path}.ignoreContainers",
                     lambda n, p: r.string(n, p, _NAME_RE, "a container name (a DNS label)")) \
        if "ignoreContainers" in f else ()
    if restarts is None or window is None:
        return None
    return model.CrashLoop(restarts=int(restarts), window=window, ignore_containers=tuple(dict.fromkeys(ignore)))


def _has(node: Node | None, key: str) -> bool:
    """Whether a mapping node names `key` (for a default that depends on what was written)."""
    return isinstance(node, MappingNode) and any(isinstance(k, ScalarNode) and k.value == key for k, _ in node.value)


def _hung(r: _Reader, node: Node, path: str) -> model.Hung | None:
    f = r.fields(node, path, ("utilization", "smActive", "power", "idlePowerWatts", "window", "minCoverage",
                              "minPodAge", "maxGap"))
    if f is None:
        return None
    default = model.Hung()
    common = _window_fields(r, f, path, default.window)
    util = r.number(f["utilization"], f"{path}.utilization", 1, 100, " (percent)") if "utilization" in f \
        else default.utilization
    sm = _optional(r, f, "smActive", path, 0, 1, default.sm_active)
    power_watts = _idle_power(r, f["idlePowerWatts"], f"{path}.idlePowerWatts") if "idlePowerWatts" in f else ()
    power = _optional(r, f, "power", path, 1, model.GpuSignal.POWER.maximum, _HUNG_POWER if power_watts else None)
    if util is None or power_watts is None or common["window"] is None:
        return None
    if power is not None and not power_watts:
        r.fail(f["power"], f"{path}.power", "power is judged against each GPU model's idle power: give "
               "idlePowerWatts (modelName glob: watts)")
        return None
    if sm is None and power is None:
        r.fail(node, path, "read at least one of smActive and power: GPU_UTIL alone cannot tell a stuck job "
               "from a working one")
        return None
    return model.Hung(utilization=util, sm_active=sm, power=power, idle_power=power_watts, **common)


def _hung_action(r: _Reader, node: Node, trigger: model.Trigger, action: model.Action) -> None:
    """A hung policy that acts reads both quiet signals (SM activity alone reads 0 under load on some
    drivers) and never deletes: what the stuck job holds may be what its owner needs to find the hang."""
    assert isinstance(trigger, model.Hung) and isinstance(node, MappingNode)
    where = next(v for k, v in node.value if isinstance(k, ScalarNode) and k.value == "action")
    if action is model.Action.DELETE:
        r.fail(where, "lifecycle.action", "a stuck job is suspended, scaled to zero or stopped, never deleted: what "
               "it holds may be what its owner needs to find the hang")
    elif action is not model.Action.REPORT and (trigger.sm_active is None or trigger.power is None):
        r.fail(where, "lifecycle.action", f"a hung policy that will {action} reads both smActive and power (with "
               "idlePowerWatts): one quiet signal alone can be an exporter fault; or leave out the action to report")


def _reserved_quota_policy(r: _Reader, f: dict[str, Node], triggers: tuple[model.Trigger, ...],
                           lifecycle: model.Lifecycle) -> model.Lifecycle:
    """reservedQuota takes a policy of its own, reports unless told to suspend, and never deletes:
    deactivating the Workload releases the quota and keeps the Job and its history, and a default
    meant for idle pods must not quietly apply to a workload that has none."""
    return _own_policy(r, f, triggers, lifecycle, (model.Action.REPORT, model.Action.SUSPEND),
                       "reservedQuota takes a policy of its own: it judges workloads with no pods, whose action is "
                       "a report unless the policy says otherwise",
                       "a workload holding Kueue quota is reported or suspended (its Workload deactivated, which "
                       "releases the quota and keeps the job), never {action}")


def _orphaned_claim_policy(r: _Reader, f: dict[str, Node], triggers: tuple[model.Trigger, ...],
                           lifecycle: model.Lifecycle) -> model.Lifecycle:
    """orphanedClaim takes a policy of its own and reports unless told to delete: a claim has no pods
    to suspend or scale, and a default meant for idle pods must not quietly delete claims."""
    return _own_policy(r, f, triggers, lifecycle, (model.Action.REPORT, model.Action.DELETE),
                       "orphanedClaim takes a policy of its own: it judges DRA ResourceClaims, not pods, and its "
                       "action is a report unless the policy says delete",
                       "a ResourceClaim with no consumer is reported or deleted (which frees its devices); it has "
                       "nothing to {action}")


def _own_policy(r: _Reader, f: dict[str, Node], triggers: tuple[model.Trigger, ...], lifecycle: model.Lifecycle,
                allowed: tuple[model.Action, ...], alone: str, refused: str) -> model.Lifecycle:
    """A trigger that takes a policy of its own (`alone` says why), reports when no action is written,
    and allows only `allowed` (`refused` says why, with {action})."""
    if len(triggers) > 1:
        r.fail(f["triggers"], "triggers", alone)
        return lifecycle
    if not _has(f.get("lifecycle"), "action"):
        return replace(lifecycle, action=model.Action.REPORT)
    if lifecycle.action not in allowed:
        node = f["lifecycle"]
        assert isinstance(node, MappingNode)
        where = next(v for k, v in node.value if isinstance(k, ScalarNode) and k.value == "action")
        r.fail(where, "lifecycle.action", refused.format(action=lifecycle.action))
    return lifecycle


_HUNG_POWER = 1.5  # a spinning kernel draws a little over idle; real work two to four times it


def _optional(r: _Reader, f: dict[str, Node], key: str, path: str, low: float, high: float,
              default: float | None) -> float | None:
    """A number that may be switched off with null."""
    if key not in f:
        return default
    node = f[key]
    if isinstance(node, ScalarNode) and node.tag == _NULL:
        return None
    return r.number(node, f"{path}.{key}", low, high)


# The tagged union's readers, by YAML key: a new trigger kind adds one entry here.
_TRIGGER_READERS: dict[str, Callable[[_Reader, Node, str], model.Trigger | None]] = {
    model.IdleGpu.key: _idle_gpu,
    model.IdleCpu.key: _idle_cpu,
    model.Pending.key: _pending,
    model.Terminating.key: _terminating,
    model.CrashLoop.key: _crash_loop,
    model.Hung.key: _hung,
    model.ReservedQuota.key: _after_only(model.ReservedQuota),
    model.OrphanedClaim.key: _after_only(model.OrphanedClaim),
}


MAX_EXPR = 4000  # characters of PromQL in one activity rule


def _activity(r: _Reader, node: Node, path: str) -> model.Activity | None:
    before = len(r.errors)
    f = r.fields(node, path, ("rules", "minRunningSeconds"))
    if f is None:
        return None
    if not f and len(r.errors) == before:
        r.fail(node, path, "give rules, minRunningSeconds or both")
        return None
    seconds = r.number(f["minRunningSeconds"], f"{path}.minRunningSeconds", 0, 31 * 86400) \
        if "minRunningSeconds" in f else 0.0
    rules = r.items(f["rules"], f"{path}.rules", lambda n, p: _activity_rule(r, n, p)) if "rules" in f else ()
    names = [rule.name for rule in rules]
    for i, name in enumerate(names):
        if name in names[:i]:
            r.fail(f["rules"], f"{path}.rules[{i}].name", f"'{name}' is given twice: each rule has its own name")
    if seconds is None:
        return None
    return model.Activity(rules=rules, min_running=_dt.timedelta(seconds=int(seconds)))


def _activity_rule(r: _Reader, node: Node, path: str) -> model.ActivityRule | None:
    f = r.fields(node, path, ("name", "expr"), required=("name", "expr"))
    if not f or "name" not in f or "expr" not in f:
        return None
    name = r.string(f["name"], f"{path}.name", _NAME_RE, "a lower-case DNS label (a-z, 0-9, '-'; at most 63)")
    expr = r.string(f["expr"], f"{path}.expr")
    if expr is not None and not expr.strip():
        r.fail(f["expr"], f"{path}.expr", "is empty: give a PromQL expression whose samples name the pods in use")
        return None
    if expr is not None and len(expr) > MAX_EXPR:
        r.fail(f["expr"], f"{path}.expr", f"is {len(expr)} characters long: at most {MAX_EXPR}")
        return None
    return model.ActivityRule(name, expr.strip()) if name is not None and expr is not None else None


_DAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
_HOURS = re.compile(r"([01][0-9]|2[0-3]):([0-5][0-9])-([01][0-9]|2[0-4]):([0-5][0-9])")


def _working_hours(r: _Reader, node: Node, path: str) -> model.WorkingHours | None:
    f = r.fields(node, path, ("timeZone", "days", "hours", "grace"), required=("timeZone",))
    if f is None:
        return None
    default = model.WorkingHours("UTC")
    tz = r.string(f["timeZone"], f"{path}.timeZone") if "timeZone" in f else None
    if tz is not None:
        try:
            parse_time_zone(tz)
        except ValueError:
            r.fail(f["timeZone"], f"{path}.timeZone", f"{_show(f['timeZone'])} is not an IANA time zone "
                                                      "(e.g. Europe/Berlin, America/New_York, UTC)")
            tz = None
    days: tuple[int, ...] = default.days
    if "days" in f:
        def day(n: Node, p: str) -> int | None:
            value = r.string(n, p, forms=f"a day: {', '.join(_DAYS)}")
            if value is not None and value not in _DAYS:
                r.fail(n, p, f"{_show(n)} is not a day: use {', '.join(_DAYS)}")
                return None
            return _DAYS.index(value) if value is not None else None

        read = r.items(f["days"], f"{path}.days", day)
        days = tuple(sorted({d for d in read if d is not None}))
        if isinstance(f["days"], SequenceNode) and not f["days"].value:
            r.fail(f["days"], f"{path}.days", "give at least one working day")
    start, end = default.start, default.end
    if "hours" in f:
        text = r.string(f["hours"], f"{path}.hours", _HOURS, 'a range like "09:00-18:00" (quote it)')
        if text is not None:
            h1, m1, h2, m2 = (int(x) for x in _HOURS.fullmatch(text).groups())  # type: ignore[union-attr]
            start = _dt.time(h1, m1)
            end = _dt.time(23, 59, 59) if h2 == 24 else _dt.time(h2, m2)
            if end <= start:
                r.fail(f["hours"], f"{path}.hours", f"{text!r} ends before it starts")
    grace = r.duration(f["grace"], f"{path}.grace") if "grace" in f else default.grace
    if tz is None or grace is None:
        return None
    return model.WorkingHours(tz, days, start, end, grace)


def _lifecycle(r: _Reader, node: Node, path: str) -> model.Lifecycle:
    f = r.fields(node, path, ("warnBefore", "remindEvery", "action", "maxExtension", "honourOptOut", "minGrace",
                              "adminFallbackCounts", "workingHours", "deleteVolumes", "reclaimManaged")) or {}
    d = model.Lifecycle()
    # A None from a reader always comes with an error recorded, so the policy is dropped: the
    # default only keeps the value's type honest.
    warn_before = r.duration(f["warnBefore"], f"{path}.warnBefore") if "warnBefore" in f else None
    remind_every = (r.duration(f["remindEvery"], f"{path}.remindEvery", allow_zero=True)
                    if "remindEvery" in f else None)
    action = r.choice(f["action"], f"{path}.action", model.Action) if "action" in f else None
    max_extension = (r.duration(f["maxExtension"], f"{path}.maxExtension", allow_zero=True)
                     if "maxExtension" in f else None)
    honour = r.boolean(f["honourOptOut"], f"{path}.honourOptOut") if "honourOptOut" in f else None
    fallback = (r.boolean(f["adminFallbackCounts"], f"{path}.adminFallbackCounts")
                if "adminFallbackCounts" in f else None)
    return model.Lifecycle(
        warn_before=d.warn_before if warn_before is None else warn_before,
        remind_every=d.remind_every if remind_every is None else remind_every,
        action=d.action if action is None else action,
        max_extension=d.max_extension if max_extension is None else max_extension,
        honour_opt_out=d.honour_opt_out if honour is None else honour,
        min_grace=r.duration(f["minGrace"], f"{path}.minGrace") if "minGrace" in f else None,
        admin_fallback_counts=d.admin_fallback_counts if fallback is None else fallback,
        working_hours=_working_hours(r, f["workingHours"], f"{path}.workingHours") if "workingHours" in f else None,
        delete_volumes=bool(r.boolean(f["deleteVolumes"], f"{path}.deleteVolumes")) if "deleteVolumes" in f else False,
        reclaim_managed=frozenset(r.items(f["reclaimManaged"], f"{path}.reclaimManaged",
                                          lambda n, p: r.choice(n, p, model.Manager)))
        if "reclaimManaged" in f else frozenset(),
    )
