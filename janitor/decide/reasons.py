"""Why, as data: a `Reason` is a code and the facts behind it (numbers, thresholds, names), rendered
into one sentence for `janitor plan`, Events, the audit log and `janitor/reason`; the Slack
messages read the same codes and facts into a researcher's words (janitor.decide.plain).

Code that needs to know *what* a finding says reads its `code` and facts, never its words: the
admins' report finds never-fitting workloads by `Code.NEVER_FITS`, not by a phrase. Every code has
one template here, so the words for one situation are written once.

Facts are rendered by a small formatter: `None` is empty, a nested `Reason` is its sentence, a
datetime is UTC (`{at}`: 2026-11-23T09:00:00Z, `{at:min}`: 2026-11-23 09:00Z), a timedelta with
`{x:age}` is a short age (2d3h, 5h07m, 12m30s), any other timedelta is in words (`{x}`: 1 min,
7 d, 1 h 30 min; janitor.durations), never as Python writes one (0:01:00), and a tuple with `{xs:, }` is joined by that
separator. Pure: no clock.

Words made of data (a pod's GPUs and their peaks: "GPU 0 peak 3, GPU 1 peak 97") are `Words`: the
data and the function that writes it, run only where the reason is shown (its sentence, `plan -o
json`, a message), never while a cycle decides; the sentence reads the same either way.
"""

from __future__ import annotations

import datetime
import string
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Union

from janitor.durations import in_words

Fact = Union[str, int, float, bool, datetime.datetime, datetime.timedelta, "Reason", "Words", tuple[Any, ...], None]


class Words:
    """A fact's words, written from its data only when they are shown: `render(*data)`, once.

    A cycle judges tens of thousands of pods and shows few of their reasons, so the words of each
    (every GPU's peak, say) are not written while deciding. Where they are shown, they are the text
    `render` writes, and stand for it everywhere: `str()` of them, equal to it (and to other words
    of the same text), hashed as it; so a reason holding them is the reason holding their text."""

    __slots__ = ("_render", "_data", "_text")

    def __init__(self, render: Callable[..., str], *data: Any) -> None:
        self._render, self._data = render, data
        self._text: str | None = None

    def __str__(self) -> str:
        if self._text is None:
            self._text = self._render(*self._data)
        return self._text

    @property
    def written(self) -> bool:
        """Whether they were shown (and so written) yet."""
        return self._text is not None

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Words | str):
            return str(self) == str(other)
        return NotImplemented

    def __hash__(self) -> int:
        return hash(str(self))

    def __repr__(self) -> str:
        return repr(str(self))


class Code(StrEnum):
    # selection: what the janitor leaves alone whatever else is true
    DELETING = "deleting"
    PROTECTED = "protected"
    OPTED_OUT = "opted-out"
    OWNER_UNREADABLE = "owner-unreadable"
    OWNER_CYCLE = "owner-cycle"
    OWNER_DELETING = "owner-deleting"
    POD_DELETING = "pod-deleting"
    # expiry
    TTL_INVALID = "ttl-invalid"
    TTL_FOREVER = "ttl-forever"
    TTL_ZERO = "ttl-zero"
    TTL_PASSED = "ttl-passed"
    TTL_NOT_YET = "ttl-not-yet"
    EXPIRES_OF_MARK = "expires-of-mark"
    EXPIRES_INVALID = "expires-invalid"
    EXPIRES_PASSED = "expires-passed"
    EXPIRES_NOT_YET = "expires-not-yet"
    COPIED_BY_CONTROLLER = "copied-by-controller"
    INHERITED = "inherited"
    OWNER_NOT_VISIBLE = "owner-not-visible"
    MALFORMED_KEPT = "malformed-kept"
    # idle GPU and CPU, per pod
    NOT_STARTED = "not-started"
    TOO_YOUNG = "too-young"
    NO_EVIDENCE_READ = "no-evidence-read"
    EVIDENCE_FAILED = "evidence-failed"
    SERIES_COUNT = "series-count"
    UID_MIXED = "uid-mixed"
    UID_OTHER = "uid-other"
    UID_BESIDE = "uid-beside"
    GPU_LOW_COVERAGE = "gpu-low-coverage"
    NON_FINITE = "non-finite"
    MIG_SIGNAL = "mig-signal"
    NO_INTERVAL = "no-interval"
    GAP = "gap"
    NON_FINITE_SAMPLES = "non-finite-samples"
    GPU_IDLE = "gpu-idle"
    GPU_PARTIAL = "gpu-partial"
    GPU_BUSY = "gpu-busy"
    GPU_SIGNALS_IDLE = "gpu-signals-idle"
    GPU_SIGNALS_PARTIAL = "gpu-signals-partial"
    GPU_SIGNALS_BUSY = "gpu-signals-busy"
    SIGNALS_LEFT = "signals-left"
    NO_SIGNAL = "no-signal"
    SIGNALS_DISAGREE = "signals-disagree"
    NO_IDLE_POWER = "no-idle-power"
    CPU_NO_SERIES = "cpu-no-series"
    CPU_LOW_COVERAGE = "cpu-low-coverage"
    CPU_NO_REQUEST = "cpu-no-request"
    CPU_IDLE = "cpu-idle"
    CPU_BUSY = "cpu-busy"
    POD_STARTING = "pod-starting"
    # the policy's activity rules, per workload
    ACTIVITY = "activity"
    ACTIVITY_FAILED = "activity-failed"
    ACTIVITY_UNATTRIBUTED = "activity-unattributed"
    ACTIVITY_UNREAD = "activity-unread"
    ACTIVITY_FLOOR = "activity-floor"
    NEVER_USED = "never-used"
    CPU_BEFORE_START = "cpu-before-start"
    NEVER_USED_SINCE_MARK = "never-used-since-mark"
    # idle, per workload
    NO_PODS = "no-pods"
    PODS_IN_USE = "pods-in-use"
    PODS_UNSURE = "pods-unsure"
    ALL_IDLE = "all-idle"
    WORKLOAD_UNKNOWN = "workload-unknown"
    # hung: busy on GPU_UTIL, quiet on compute and power
    GPU_HUNG = "gpu-hung"
    GPU_WORKS = "gpu-works"
    GPU_UTIL_DIPS = "gpu-util-dips"
    HUNG_MIG = "hung-mig"
    SM_ZERO_UNDER_LOAD = "sm-zero-under-load"
    ALL_HUNG = "all-hung"
    PODS_NOT_HUNG = "pods-not-hung"
    # pending
    POD = "pod"  # "<pod>: <why>"
    GATED = "gated"
    UNSCHEDULABLE = "unschedulable"
    NOT_STARTED_YET = "not-started-yet"
    NOT_SCHEDULED = "not-scheduled"
    MISFIT_RESOURCE = "misfit-resource"
    MISFIT_SELECTOR = "misfit-selector"
    MISFIT_AFFINITY = "misfit-affinity"
    MISFIT_TAINT = "misfit-taint"
    NEVER_FITS = "never-fits"
    STUCK_TOO_SHORT = "stuck-too-short"
    STUCK_FOR = "stuck-for"
    SOME_RUNNING = "some-running"
    SOME_PENDING = "some-pending"
    NONE_RUNS = "none-runs"
    INIT_RUNNING = "init-running"
    SINCE_INIT = "since-init"
    FITS_LATER = "fits-later"
    ONCE_UNCORDONED = "once-uncordoned"
    ONCE_READY = "once-ready"
    ONCE_UNTAINTED = "once-untainted"
    ONCE_DEVICES = "once-devices"
    # crash loop
    RESTARTS = "restarts"
    OOM = "oom"
    SOME_LOOPING = "some-looping"
    ALL_LOOPING = "all-looping"
    NOW_WAITING = "now-waiting"
    NOW_RUNNING = "now-running"
    NOT_LOOPING = "not-looping"
    TOO_FEW_RESTARTS = "too-few-restarts"
    EXIT_BEFORE_WINDOW = "exit-before-window"
    LONG_LAST_RUN = "long-last-run"
    RECOVERED = "recovered"
    COMPLETED = "completed"
    NO_LAST_EXIT = "no-last-exit"
    SIDECARS_IGNORED = "sidecars-ignored"
    NONE_LOOPING = "none-looping"
    # terminating
    HOLD_FINALIZERS = "hold-finalizers"
    HOLD_NODE_GONE = "hold-node-gone"
    HOLD_NODE_NOT_READY = "hold-node-not-ready"
    HOLD_D_STATE = "hold-d-state"
    HOLD_NOTHING = "hold-nothing"
    REMEDY_FINALIZERS = "remedy-finalizers"
    REMEDY_OUT_OF_SERVICE = "remedy-out-of-service"
    REMEDY_REBOOT = "remedy-reboot"
    REMEDY_KUBELET = "remedy-kubelet"
    REMEDY_EVENTS = "remedy-events"
    REMEDY_FORCE = "remedy-force"
    REMEDY_UNPROVEN = "remedy-unproven"
    PROOF_NODE_DELETED = "proof-node-deleted"
    PROOF_OUT_OF_SERVICE = "proof-out-of-service"
    PROOF_AGENT_CLEAR = "proof-agent-clear"
    NOT_FORCED = "not-forced"
    UNPROVEN_FINALIZERS = "unproven-finalizers"
    UNPROVEN_STATEFULSET = "unproven-statefulset"
    UNPROVEN_D_STATE = "unproven-d-state"
    UNPROVEN_NO_NODE = "unproven-no-node"
    UNPROVEN_NODES_EARLIER = "unproven-nodes-earlier"
    UNPROVEN_NOT_READY = "unproven-not-ready"
    UNPROVEN_NO_AGENT = "unproven-no-agent"
    UNPROVEN_OLD_AGENT = "unproven-old-agent"
    UNPROVEN_AGENT_SIGHT_UNKNOWN = "unproven-agent-sight-unknown"
    UNPROVEN_AGENT_BLIND = "unproven-agent-blind"
    AGENT_BLIND_CAUSES = "agent-blind-causes"
    AGENT_BLIND_ALONE = "agent-blind-alone"
    UNPROVEN_AGENT_STARTING = "unproven-agent-starting"
    UNPROVEN_AGENT_LEFTOVERS = "unproven-agent-leftovers"
    UNPROVEN_AGENT_RESTARTED = "unproven-agent-restarted"
    UNPROVEN_NOT_SCANNED_SINCE = "unproven-not-scanned-since"
    UNPROVEN_STALE = "unproven-stale"
    UNPROVEN_ALIVE = "unproven-alive"
    UNPROVEN_NOT_REPORTED = "unproven-not-reported"
    STUCK_TERMINATING = "stuck-terminating"
    FORCE_DELETED = "force-deleted"
    # the lifecycle
    MARKED = "marked"
    USERS_EXPIRES = "users-expires"
    ACTION_DOES_NOT_FIT = "action-does-not-fit"
    MARK_CAPPED = "mark-capped"
    NO_LONGER_COVERED = "no-longer-covered"
    COVERAGE_UNSURE = "coverage-unsure"
    SIGHT_LOST = "sight-lost"
    ACTION_NO_LONGER_FITS = "action-no-longer-fits"
    VOLUMES_WOULD_GO = "volumes-would-go"
    VOLUMES_NOW_AT_RISK = "volumes-now-at-risk"
    MARK_BROKEN = "mark-broken"
    COPY_REMOVED = "copy-removed"
    COPY_OF_SOURCE = "copy-of-source"
    OTHER_POLICY = "other-policy"
    IN_USE = "in-use"
    NOT_SURE = "not-sure"
    RECOVER = "recover"
    RESEND = "resend"
    WARN_AGAIN_VOLUMES = "warn-again-volumes"
    NOT_WARNED_NOT_IDLE = "not-warned-not-idle"
    ADMINS_ONLY = "admins-only"
    WARNING_PACED = "warning-paced"
    WARN = "warn"
    WARN_AGAIN_ACTION = "warn-again-action"
    WARN_NEW_OWNER = "warn-new-owner"
    WAIT_NOT_IDLE = "wait-not-idle"
    EXTEND = "extend"
    DEADLINE_MOVED = "deadline-moved"
    KEPT_UNTIL = "kept-until"
    KEEP_UNPARSEABLE = "keep-unparseable"
    DELIVERY_GRACE = "delivery-grace"
    REPORT_ONLY = "report-only"
    MANAGED_REPORT_ONLY = "managed-report-only"
    KUEUE_UNREACHED = "kueue-unreached"
    KUEUE_INACTIVE = "kueue-inactive"
    KUEUE_RUNS = "kueue-runs"
    RECLAIM_HELD = "reclaim-held"
    RECLAIM_HOLDING = "reclaim-holding"
    RECLAIM_UNDONE = "reclaim-undone"
    RECLAIM_UNCHECKED = "reclaim-unchecked"
    RECLAIM_RECORD_BROKEN = "reclaim-record-broken"
    NOT_AGAIN_UNDONE = "not-again-undone"
    RECREATED_BY_GITOPS = "recreated-by-gitops"
    RECREATED_BY_NAME = "recreated-by-name"
    RECLAIM = "reclaim"
    RELEASED = "released"
    REMIND = "remind"
    WAITING = "waiting"
    STOPPED = "stopped"
    # the re-check right before acting
    GONE = "gone"
    NO_LONGER_DUE = "no-longer-due"
    STILL_DUE = "still-due"
    FREE_TEXT = "text"  # words from outside (an error message), shown as they are
    # pending, where nodes can be added (janitor.decide.autoscaling)
    WAITS_FOR_NODE = "waits-for-node"
    AUTOSCALING_ON = "autoscaling-on"
    SCALE_UP_TRIGGERED = "scale-up-triggered"
    NODE_NOMINATED = "node-nominated"
    AUTOSCALER_SAID = "autoscaler-said"
    NEVER_UNSETTLED = "never-unsettled"
    NEVER_STALE = "never-stale"
    AUTOSCALER_NEVER = "autoscaler-never"
    NEVER_NOT_ALL = "never-not-all"
    # the janitor's own annotations, written by someone else
    KEEP_UNTRUSTED = "keep-untrusted"
    # quota held by a Kueue Workload with no pods (janitor.decide.triggers.reserved)
    QUOTA_HELD = "quota-held"
    QUOTA_HELD_SHORT = "quota-held-short"
    QUOTA_NOT_HELD = "quota-not-held"
    QUOTA_PODS = "quota-pods"
    QUOTA_UNREAD = "quota-unread"
    QUOTA_ABOVE = "quota-above"
    QUOTA_FINISHED = "quota-finished"
    QUOTA_RUNNING = "quota-running"
    # DRA claims holding devices with no consumer (janitor.decide.triggers.orphaned_claim)
    CLAIM_HELD = "claim-held"
    CLAIM_HELD_SHORT = "claim-held-short"
    CLAIM_FREE = "claim-free"
    CLAIM_NAMED = "claim-named"
    CLAIM_UNSURE = "claim-unsure"


_T: Mapping[Code, str] = {
    Code.CLAIM_HELD: "it has held {devices} since {since} ({quiet:age}) {whom}",
    Code.CLAIM_HELD_SHORT: "it holds {devices} {whom}, seen so since {since} ({quiet:age}): judged after {after}",
    Code.CLAIM_FREE: "{words}",
    Code.CLAIM_NAMED: "pod {pod} ({phase}) names it: it is in use, or about to be",
    Code.CLAIM_UNSURE: "whether anything uses it cannot be told: {problem}",
    Code.QUOTA_HELD: ("its Kueue Workload {workload} has held quota (QuotaReserved or Admitted) since {since} "
                      "({held:age}), and none of its pods has run or waited for {quiet:age}{evicted}"),
    Code.QUOTA_HELD_SHORT: ("its Kueue Workload {workload} holds quota with no pod running or waiting, since "
                            "{since} ({held:age}): judged after {after}"),
    Code.QUOTA_FINISHED: "its Kueue Workload {workload} finished: its ClusterQueue no longer counts its quota",
    Code.QUOTA_RUNNING: ("neither evicted nor suspended: the {kind} runs as far as Kueue ({workload}) and its spec "
                         "say (its next pod may be on its way)"),
    Code.QUOTA_NOT_HELD: "its Kueue Workload {workload} holds no quota (neither QuotaReserved nor Admitted is True)",
    Code.QUOTA_PODS: "{count} of its pods run or wait ({pod}: {phase}): its quota is in use",
    Code.QUOTA_UNREAD: "what its Kueue Workload holds cannot be told: {problem}",
    Code.QUOTA_ABOVE: ("its Kueue Workload's owner is not the workload the janitor acts on ({top} is, with "
                       "--cronjob-target {mode}): not judged"),
    Code.DELETING: "already being deleted",
    Code.PROTECTED: "namespace {namespace} is protected",
    Code.OPTED_OUT: "opted out (janitor/opt-out: true on {where})",
    Code.OWNER_UNREADABLE: "owner {owner} (uid {uid}) cannot be read: not listed, forbidden or gone",
    Code.OWNER_CYCLE: "its ownerReferences form a cycle through {owner}: the workload on top cannot be told",
    Code.OWNER_DELETING: "owner {owner} is already being deleted",
    Code.POD_DELETING: "the pod is already being deleted",
    Code.TTL_INVALID: "invalid janitor/ttl: {error}",
    Code.TTL_FOREVER: "janitor/ttl is forever",
    Code.TTL_ZERO: "janitor/ttl {value} is zero: no TTL, as in kube-janitor",
    Code.TTL_PASSED: "janitor/ttl {value} passed: created {created}, age {age:age}, expired {deadline}",
    Code.TTL_NOT_YET: "janitor/ttl {value}: age {age:age}, expires {deadline}",
    Code.EXPIRES_OF_MARK: "the object carries the janitor's mark ({mark}): only the lifecycle acts on a marked "
                          "object, never the plain expiry path on its janitor/expires",
    Code.EXPIRES_INVALID: "invalid janitor/expires: {error}",
    Code.EXPIRES_PASSED: "janitor/expires {value} passed ({ago:age} ago)",
    Code.EXPIRES_NOT_YET: "janitor/expires {value}: in {left:age}",
    Code.COPIED_BY_CONTROLLER: "{key}={value} is a copy its {controller_kind} controller made from "
                               "{controller}; only the {controller_kind}'s own annotation counts",
    Code.INHERITED: "{key}={value} is in the pod template of {source}, so every pod inherits it; pods are not "
                    "deleted one by one (the controller would recreate them). Put it on the {kind} itself, "
                    "outside its template, to expire the workload.",
    Code.OWNER_NOT_VISIBLE: "owner {owner} is not visible, so it cannot be told whether {key} was inherited "
                            "from its pod template; kept",
    Code.MALFORMED_KEPT: "{why}; the object is kept",
    Code.NOT_STARTED: "its containers have not started",
    Code.TOO_YOUNG: "running for {running} only; judged after {needed} (samples before its start belong to "
                    "another pod)",
    Code.NO_EVIDENCE_READ: "no {signal} evidence was read this cycle",
    Code.EVIDENCE_FAILED: "no usable {signal} data: {error}",
    Code.SERIES_COUNT: "{series} {signal} series for {gpus} requested GPUs",
    Code.UID_MIXED: "of the {signal} series under its name {labelled} carry a pod UID and {bare} carry none (the "
                    "exporter's pod UID labels changed within the window): which samples are its own cannot be told",
    Code.UID_OTHER: "its name's {others} {signal} series carry another pod's UID (one of the same name before it), "
                    "none its own",
    Code.UID_BESIDE: "{others} {signal} series under its name carry a UID that is not its own, inside a window it "
                     "ran for the whole of (no earlier pod's samples fall there): whose samples they are cannot "
                     "be told",
    Code.GPU_LOW_COVERAGE: "GPU {gpu}: samples cover {coverage:.0%} of the {window} window (at least "
                           "{needed:.0%} needed)",
    Code.NON_FINITE: "GPU {gpu}: no finite value in the window",
    Code.MIG_SIGNAL: "{what} is a MIG slice, and {signal} does not measure MIG slices (dcgm-exporter reports it "
                     "as 0 whatever runs there); a policy needs DCGM_FI_PROF_GR_ENGINE_ACTIVE to judge it",
    Code.NO_INTERVAL: "{what}: how often Prometheus scrapes it is unknown (its job is not among Prometheus' "
                      "targets), so whether samples are missing cannot be told",
    Code.GAP: "{what}: no samples for {gap:age} at a stretch within the last {window:age} (at most {allowed:age} "
              "is accepted); it may have been busy then",
    Code.NON_FINITE_SAMPLES: "{what}: NaN or infinite samples within the last {window:age}; what it did then is "
                             "unknown",
    Code.GPU_IDLE: "idle: {detail} ({signal} <= {threshold:g} over {window})",
    Code.GPU_PARTIAL: "{idle} of {total} GPUs idle: {detail} ({signal} <= {threshold:g} over {window})",
    Code.GPU_BUSY: "busy: {detail}",
    Code.GPU_SIGNALS_IDLE: "idle: {detail} ({within} over {window}){missing}",
    Code.GPU_SIGNALS_PARTIAL: "{idle} of {total} GPUs idle, in use: {detail}{missing}",
    Code.GPU_SIGNALS_BUSY: "busy: {detail}",
    Code.SIGNALS_LEFT: "; not read: {left: and }",
    Code.NO_SIGNAL: "none of the signals the policy reads ({signals}) can be read for its GPUs: {left: and }",
    Code.NO_IDLE_POWER: "no idle power is given for {model} (idlePowerWatts), so its power cannot be judged",
    Code.SIGNALS_DISAGREE: "the signals ({signals}) name different GPUs of the pod: which GPU is which cannot be "
                           "told",
    Code.CPU_NO_SERIES: "no CPU series for its app containers",
    Code.CPU_LOW_COVERAGE: "CPU samples cover {coverage:.0%} of the {window} window",
    Code.CPU_NO_REQUEST: "no CPU request to compare a fraction of it with",
    Code.CPU_IDLE: "idle: CPU peak {peak:.3g} cores <= {limit} over {window}",
    Code.CPU_BUSY: "busy: CPU peak {peak:.3g} cores > {limit}",
    Code.POD_STARTING: "pod {pod} is starting ({phase}): in use again, or about to be",
    Code.ACTIVITY: "in use: activity rule {rule} names pod {pod}",
    Code.ACTIVITY_FAILED: "counted as in use: activity rule {rule} could not be evaluated ({error})",
    Code.ACTIVITY_UNATTRIBUTED: "counted as in use: activity rule {rule} returned {samples} samples without namespace "
                                "and pod labels, so whose use they show cannot be told",
    Code.ACTIVITY_UNREAD: "counted as in use: activity rule {rule} was not evaluated (Prometheus was not asked)",
    Code.NEVER_USED: "never used since it started {life:age} ago: {why}",
    Code.NEVER_USED_SINCE_MARK: "never used, but its pods started after the mark ({marked}), whose warning was of "
                                "another pod: not acted on until the window judges them",
    Code.CPU_BEFORE_START: "{samples} CPU points under its name, more than its {running:age} since it started hold: "
                           "an earlier pod's of the same name are among them",
    Code.ACTIVITY_FLOOR: "in use: pod {pod} has run {running:age}, less than the policy's minRunningSeconds "
                         "({floor:age})",
    Code.NO_PODS: "no pods",
    Code.PODS_IN_USE: "{busy} of {total} pods in use ({pod}: {why})",
    Code.PODS_UNSURE: "{unsure} of {total} pods cannot be judged ({pod}: {why})",
    Code.ALL_IDLE: "all {total} pods idle ({shown:; }{more})",
    Code.WORKLOAD_UNKNOWN: "workload unknown: {why}",
    Code.GPU_HUNG: "stuck: {detail} ({signal} >= {utilization:g} at every sample while {within} over {window})",
    Code.GPU_WORKS: "not stuck: {detail}",
    Code.GPU_UTIL_DIPS: "not stuck: {detail} ({signal} below {utilization:g} within the last {window:age})",
    Code.HUNG_MIG: "{what} is a MIG slice, and {signal} does not measure MIG slices: a stuck job cannot be told there",
    Code.SM_ZERO_UNDER_LOAD: "GPU {gpu}: {signal} reads 0 at every sample while GPU_UTIL reads busy, a known exporter "
                             "fault (the PROF fields stop under load on some drivers); a spinning kernel keeps an SM "
                             "busy, so this is not judged",
    Code.ALL_HUNG: "stuck since {since:min} on {gpus} GPUs: they report busy ({signal}), but {quiet} idle "
                   "({shown:; }{more})",
    Code.PODS_NOT_HUNG: "{working} of {total} pods not stuck ({pod}: {why})",
    Code.POD: "{pod}: {why}",
    Code.GATED: "scheduling gated: queued on purpose",
    Code.UNSCHEDULABLE: "unschedulable: {message}",
    Code.NOT_STARTED_YET: "scheduled but not started: {reasons}",
    Code.NOT_SCHEDULED: "not scheduled yet (no PodScheduled condition)",
    Code.MISFIT_RESOURCE: "{resource}: asks {amount:g}, a node has {has:g}",
    Code.MISFIT_SELECTOR: "nodeSelector {key}={value} matches no node",
    Code.MISFIT_AFFINITY: "required node affinity matches no node",
    Code.MISFIT_TAINT: "taint {key}={value}:{effect} not tolerated",
    Code.NEVER_FITS: "no node could ever run it: {shown}",
    Code.STUCK_TOO_SHORT: "{state}, for {stuck:age} (acted on after {after:age})",
    Code.STUCK_FOR: "{state}, for {stuck:age}",
    Code.SOME_RUNNING: "{running} of {total} pods running; not acted on while any runs ({first})",
    Code.SOME_PENDING: "{count} of {waiting} pending pods: {first}",
    Code.NONE_RUNS: "none of its {total} pods runs: {first}",
    Code.INIT_RUNNING: "init container {container} running since {since:min}: starting, not stuck",
    Code.SINCE_INIT: "{state} (counted from init container {container} {done} at {at:min})",
    Code.FITS_LATER: "waiting, not never fitting: {node} could run it once {once: and }{more}; {state}",
    Code.ONCE_UNCORDONED: "the node is uncordoned",
    Code.ONCE_READY: "the node is Ready again",
    Code.ONCE_UNTAINTED: "its {key} taint is lifted",
    Code.ONCE_DEVICES: "its device plugin reports all its {resource} again (allocatable {has:g} of {full:g})",
    Code.RESTARTS: "{pod}: container {container}: {restarts} restarts, last exit {last_exit} at {at:min} after a "
                   "{ran:age} run, {now}{oom}{ignored}",
    Code.OOM: "; OOM: {limit}{agent}; {explained}",
    Code.SOME_LOOPING: "{looping} of {total} GPU pods crash-looping; not acted on while others run ({first})",
    Code.ALL_LOOPING: "crash-looping while holding {gpus} GPUs: {shown:; }",
    Code.NOW_WAITING: "now waiting ({reason})",
    Code.NOW_RUNNING: "running again since {since:min}",
    Code.NOT_LOOPING: "{pod}: not crash-looping: {why}{ignored}",
    Code.TOO_FEW_RESTARTS: "container {container}: {restarts} restarts, fewer than {needed}",
    Code.EXIT_BEFORE_WINDOW: "container {container}: {restarts} restarts, the last exit {ago:age} ago, before the "
                             "{window:age} window",
    Code.LONG_LAST_RUN: "container {container}: {restarts} restarts in its life, but its last run lasted {ran:age} "
                        "(it started before the {window:age} window): a failure, not a loop",
    Code.RECOVERED: "container {container}: {restarts} restarts, then running for {running:age} since, longer than "
                    "its last run ({ran:age}) and {floor:age}: recovered",
    Code.COMPLETED: "container {container}: {restarts} restarts, then completed",
    Code.NO_LAST_EXIT: "container {container}: {restarts} restarts, no last exit recorded",
    Code.SIDECARS_IGNORED: "; sidecar restarts not counted: {names:, }",
    Code.NONE_LOOPING: "restarted, but none of its {total} GPU pods is crash-looping ({first})",
    Code.HOLD_FINALIZERS: "finalizers {finalizers:, }",
    Code.HOLD_NODE_GONE: "its node {node} is gone",
    Code.HOLD_NODE_NOT_READY: "its node {node} is NotReady",
    Code.HOLD_D_STATE: "processes stuck in D state on {node} (node agent: {summary})",
    Code.HOLD_NOTHING: "nothing the API shows (kubelet slow or stuck?)",
    Code.REMEDY_FINALIZERS: "check the controllers of its finalizers; remove one only if its controller is gone",
    Code.REMEDY_OUT_OF_SERVICE: "if {node} is down for good: taint it "
                                "node.kubernetes.io/out-of-service=nodeshutdown:NoExecute, or delete the Node",
    Code.REMEDY_REBOOT: "drain and reboot {node}: a process in D state cannot be killed",
    Code.REMEDY_KUBELET: "look at the kubelet on {node}",
    Code.REMEDY_EVENTS: "look at the pod's events",
    Code.REMEDY_FORCE: "force delete: {proof}",
    Code.REMEDY_UNPROVEN: "{remedy}{not_forced}",
    Code.PROOF_NODE_DELETED: "its node {node} was deleted",
    Code.PROOF_OUT_OF_SERVICE: "an admin tainted {node} node.kubernetes.io/out-of-service",
    Code.PROOF_AGENT_CLEAR: "the node agent on {node} (running since {started}) found no process of it in its scan "
                            "at {at}, after the deletion, on a Ready node",
    Code.NOT_FORCED: "; not force deleted: {why}",
    Code.UNPROVEN_FINALIZERS: "grace 0 does not remove finalizers",
    Code.UNPROVEN_STATEFULSET: "a StatefulSet's pod (a second copy could start while this one still runs)",
    Code.UNPROVEN_D_STATE: "the node agent on {node} reports a process of it stuck in D state",
    Code.UNPROVEN_NO_NODE: "nothing was read of its node {node}",
    Code.UNPROVEN_NODES_EARLIER: "its node {node} is not in the nodes as listed at {at}, before it began "
                                 "terminating: no evidence that the node is gone",
    Code.UNPROVEN_NOT_READY: "its node {node} is not Ready, so its processes may run with no kubelet to stop them; "
                             "the node agent's word does not count there",
    Code.UNPROVEN_NO_AGENT: "no node agent reports on {node}",
    Code.UNPROVEN_OLD_AGENT: "the node agent on {node} does not report what it saw per pod (an older version)",
    Code.UNPROVEN_AGENT_SIGHT_UNKNOWN: "the node agent on {node} does not say whether it can see other pods' processes "
                                       "(an older version), so its 'gone' proves nothing",
    Code.UNPROVEN_AGENT_BLIND: "the node agent on {node} saw no process of any other pod on that node in its last "
                               "scan ({visible} of the {listed} other pods listed there), so its 'gone' proves "
                               "nothing: {causes}",
    Code.AGENT_BLIND_CAUSES: "check that it runs with hostPID, that its --proc-root is the host's /proc, and that it "
                             "does not run in a sandboxed runtime (gVisor, Kata)",
    Code.AGENT_BLIND_ALONE: "no pod but its own runs there to show that it can see pods' processes",
    Code.UNPROVEN_AGENT_STARTING: "the node agent on {node} has no verdict yet: {scans} of {sustain} scans since it "
                                  "started at {started}",
    Code.UNPROVEN_AGENT_LEFTOVERS: "the node agent on {node} reports processes of deleted pods stuck in D state there",
    Code.UNPROVEN_AGENT_RESTARTED: "the node agent on {node} started at {started}, after the deletion, so it cannot "
                                   "have watched the pod's processes go",
    Code.UNPROVEN_NOT_SCANNED_SINCE: "the node agent on {node} has not scanned since the deletion (its last scan: "
                                     "{at})",
    Code.UNPROVEN_STALE: "the node agent on {node} last scanned at {at}, {age:age} away from when its node was "
                         "read; a report counts for {limit:age}",
    Code.UNPROVEN_ALIVE: "the node agent on {node} saw a process of it alive in its scan at {at}",
    Code.UNPROVEN_NOT_REPORTED: "the node agent on {node} did not report it gone in its scan at {at}",
    Code.STUCK_TERMINATING: "Terminating since {since}, {overdue:age} past its grace; held by {holds:, }"
                            "{not_forced}",
    Code.FORCE_DELETED: "Terminating since {since} ({holds:, }); force deleted (grace 0) by policy {policy} "
                        "because {proof}",
    Code.MARKED: "{condition}: marked, to {action} at {deadline} at the earliest{paced}",
    Code.USERS_EXPIRES: "{condition}, but the user's own janitor/expires is in force; the janitor does not mark "
                        "over it",
    Code.ACTION_DOES_NOT_FIT: "{condition}, but action {action} does not apply to a {kind}; not marked",
    Code.MARK_CAPPED: "{condition}; new-mark cap reached ({over:, }), marked in a later cycle",
    Code.ACTION_NO_LONGER_FITS: "policy {policy}'s action is now {action}, which does not apply to a {kind}; unmarked",
    Code.VOLUMES_WOULD_GO: "{condition}, but {action} would delete its volumes ({rule}) and policy {policy} does not "
                           "allow that (lifecycle.deleteVolumes); not marked",
    Code.VOLUMES_NOW_AT_RISK: "{action} would now delete its volumes ({rule}) and policy {policy} does not allow that "
                              "(lifecycle.deleteVolumes); unmarked",
    Code.NO_LONGER_COVERED: "no longer covered: policy {policy} is gone, in shadow mode or no longer matches, "
                            "or the workload has no running pods",
    Code.SIGHT_LOST: "left as it is: {kind} could not be read ({why}), so nothing is marked, warned, cancelled "
                     "or acted on until it can",
    Code.COVERAGE_UNSURE: "kept marked: pods in its namespace could not be traced to their workload ({why}), so "
                          "whether policy {policy} still covers it is not known this cycle",
    Code.MARK_BROKEN: "the mark does not parse ({problems:; }): removed, to start again",
    Code.COPY_REMOVED: "a copy of the mark of another object (janitor/marked-uid {uid}): never acted on; removed",
    Code.COPY_OF_SOURCE: "a copy of {source}'s mark, made by its controller: never acted on",
    Code.OTHER_POLICY: "marked by policy {marked}, now decided by {policy}",
    Code.WARN_AGAIN_VOLUMES: "{action} would now delete its volumes (its retention policy changed), which the "
                             "warning did not say: warning again, with the full notice, before anything happens",
    Code.IN_USE: "in use ({trigger}, policy {policy}): {why}",
    Code.NOT_SURE: "not acted on while {trigger} (policy {policy}) is not idle: {why}",
    Code.RECOVER: "a {kind} was being sent at {at}; asking Slack whether it arrived before sending again",
    Code.RESEND: "{why}; it did not arrive, sending again",
    Code.NOT_WARNED_NOT_IDLE: "marked, not warned; not {condition} now: {why}",
    Code.ADMINS_ONLY: "only the admins could be warned (no owner known); it is not acted on until an owner is "
                      "set and warned (or the policy's adminFallbackCounts)",
    Code.WARNING_PACED: "marked; the warning waits for the per-owner message pace",
    Code.WARN: "marked; warning the owner{again}",
    Code.WARN_AGAIN_ACTION: "the warning said {warned}; the policy now says {action}: warning again before acting",
    Code.WARN_NEW_OWNER: "the warning went to {was}; its owner is {owner} now: warning them, with the full notice, "
                         "before acting",
    Code.WAIT_NOT_IDLE: "marked; not acted on while not {condition}: {why}",
    Code.EXTEND: "deadline moves to {deadline}: {why}",
    Code.DEADLINE_MOVED: ("the mark's deadline ({deadline}) moves from janitor/expires to janitor/deadline, which "
                          "kube-janitor does not delete on"),
    Code.KEPT_UNTIL: "kept until {until}{capped}",
    Code.KEEP_UNPARSEABLE: "janitor/keep-until={value} does not parse: kept until the cap",
    Code.DELIVERY_GRACE: "delivery + grace",
    Code.REPORT_ONLY: "deadline {deadline} passed; the policy only reports, so nothing is done to it",
    Code.MANAGED_REPORT_ONLY: ("deadline {deadline} passed; {manager} restores it, so a {action} would not hold: "
                               "reported, nothing is done to it (a policy reclaims from it with "
                               "lifecycle.reclaimManaged)"),
    Code.KUEUE_INACTIVE: "its Kueue Workload {workload} is deactivated already (by Kueue or an admin): the janitor "
                         "neither does nor claims its {action}",
    Code.KUEUE_RUNS: "Kueue admits its running Job {job}, which would be suspended with it, and Kueue un-suspends a "
                     "Job it admits: nothing is done (suspend the Jobs themselves: --cronjob-target job)",
    Code.KUEUE_UNREACHED: ("Kueue admits it, so its {action} goes through its Kueue Workload (Kueue undoes a {action} "
                           "of the {kind} itself), and {problem}: not acted on"),
    Code.RECLAIM_HELD: "the {action} of {at} held: its owner is told it is done",
    Code.RECLAIM_HOLDING: "the {action} of {at} holds so far; its owner is told it is done once it held {after:age}",
    Code.RECLAIM_UNDONE: "the {action} of {at} did not hold: {by} undid it; {again}",
    Code.RECLAIM_UNCHECKED: "whether the {action} held cannot be read from the object: checked again next cycle",
    Code.RECLAIM_RECORD_BROKEN: "janitor/reclaimed '{value}' is not the janitor's record: removed",
    Code.RECREATED_BY_GITOPS: ("{key} {value} passed, but {tool} keeps this object and would create it again at "
                               "once: not deleted; remove {key} where {tool} takes it from (Git)"),
    Code.RECREATED_BY_NAME: ("{key} {value} passed, but a {kind} of this name with this {key} was deleted on it "
                             "lately and is back (a sync re-created it): not deleted again; remove {key} where it "
                             "comes from"),
    Code.NOT_AGAIN_UNDONE: ("its {action} of {at} was undone by {by}: policy {policy} does not mark it again "
                            "(remove janitor/undone to let it)"),
    Code.RECLAIM: "{condition} since before {marked} and warned at {warned}; deadline {deadline} passed: {action} "
                  "(policy {policy}): {why}",
    Code.RELEASED: "released by its owner ({by}, {at}) after the warning of {warned}: {action} now (policy {policy}): "
                   "{why}",
    Code.REMIND: "still {condition}; reminding the owner of the deadline {deadline}",
    Code.WAITING: "marked and warned; {action} at {deadline}{extended}",
    Code.STOPPED: "a stopped Notebook's pods are on their way out; not marked",
    Code.GONE: "gone or recreated before acting",
    Code.NO_LONGER_DUE: "no longer due on a fresh read: {why}",
    Code.STILL_DUE: "still due on a fresh read",
    Code.FREE_TEXT: "{text}",
    Code.WAITS_FOR_NODE: "waiting for a node, not never fitting: no node now could run it ({shown}), but {said}; "
                         "{state}",
    Code.AUTOSCALING_ON: "nodes can be added here ({signs:; }) and no autoscaler has said that none could run it",
    Code.SCALE_UP_TRIGGERED: "{source} triggered a scale-up of {groups:, } at {at}",
    Code.NODE_NOMINATED: "{source} nominated {targets:, } for it at {at}",
    Code.AUTOSCALER_SAID: "{source} said at {at}: {detail}",
    Code.NEVER_UNSETTLED: "{source} says none of the nodes it can add could run it ({detail}), since {first}; "
                          "that counts once it has said so for {settle:age}",
    Code.NEVER_STALE: "{source} said at {at} that none of the nodes it can add could run it ({detail}), and has "
                      "not said so since",
    Code.AUTOSCALER_NEVER: "{never}; and {source} can add no node that could ({detail}; said since {first})",
    Code.NEVER_NOT_ALL: "{source} says none of the nodes it can add could run it ({detail}), but {silent: and } "
                        "runs here too and has said nothing about it",
    Code.KEEP_UNTRUSTED: "janitor/keep-until is not honoured: {keys: and } on this mark was not written by the janitor "
                         "(someone else wrote it last), so its cap cannot be counted; an admin can remove the mark "
                         "with `janitor unmark`, and the next one has a cap again",
}


def _age(delta: datetime.timedelta) -> str:
    seconds = int(delta.total_seconds())
    if seconds >= 86400:
        return f"{seconds // 86400}d{seconds % 86400 // 3600}h"
    if seconds >= 3600:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    if seconds >= 60:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds}s"


class _Formatter(string.Formatter):
    def format_field(self, value: Any, format_spec: str) -> str:
        if value is None:
            return ""
        if isinstance(value, Reason | Words):
            return str(value)
        if isinstance(value, datetime.datetime):
            utc = value.astimezone(datetime.timezone.utc)
            return utc.strftime("%Y-%m-%d %H:%MZ" if format_spec == "min" else "%Y-%m-%dT%H:%M:%SZ")
        if isinstance(value, datetime.timedelta):
            return _age(value) if format_spec == "age" else in_words(value)
        if isinstance(value, tuple):
            return (format_spec or ", ").join(self.format_field(v, "") for v in value)
        return str(super().format_field(value, format_spec))


_FORMATTER = _Formatter()


@dataclass(frozen=True, slots=True)
class Reason:
    """A code and its facts; `str()` is the sentence."""

    code: Code
    facts: tuple[tuple[str, Fact], ...] = ()

    def __str__(self) -> str:
        return str(_FORMATTER.vformat(_T[self.code], (), dict(self.facts)))

    def fact(self, name: str) -> Fact:
        """The fact of that name (the last, as a dict of the facts keeps it), or None. Asked of
        every pod's verdict in a cycle: the few facts are looked through, no dict is made of them."""
        for key, value in reversed(self.facts):
            if key == name:
                return value
        return None

    def codes(self) -> frozenset[Code]:
        """This code and those of every reason nested in its facts."""
        found = {self.code}
        for _, value in self.facts:
            for item in value if isinstance(value, tuple) else (value,):
                if isinstance(item, Reason):
                    found |= item.codes()
        return frozenset(found)


def why(code: Code, **facts: Fact) -> Reason:
    """A reason; the facts' names are the template's placeholders."""
    return Reason(code, tuple(facts.items()))


def text(words: str) -> Reason:
    """Words from outside the janitor (an apiserver error, a scheduler message), shown as they are."""
    return Reason(Code.FREE_TEXT, (("text", words),))
