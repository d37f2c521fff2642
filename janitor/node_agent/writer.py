"""What the node agent writes about its node: its conditions and its Warning Events.

A condition is patched merged by type, as node-problem-detector does, and its `lastTransitionTime`
moves only when the status changes. An Event is posted once per leftover task and once per GPU
holder (announced again only if it goes and comes back). What it writes is decided by the agent
(`janitor.node_agent.agent`); this only writes it, and says what could not be written.
"""

from __future__ import annotations

import datetime
import logging
import socket

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from janitor import node_report
from janitor.node_agent import holders
from janitor.node_agent.tracker import Leftover

logger = logging.getLogger("janitor.node_agent.agent")  # one logger for the agent's words

COMPONENT = "kube-idle-janitor-node-agent"
EVENT_NAMESPACE = "default"  # where Events about Nodes go, as the kubelet's do


def no_answer(error: BaseException) -> bool:
    """No HTTP answer at all (the client gives a TLS failure status 0), as janitor.kubeapi judges it."""
    if isinstance(error, ApiException):
        return not error.status
    return isinstance(error, HTTPError | OSError)


def failed(error: BaseException, what: str, *args: object) -> None:
    """A request that got an answer is said; one that got none is the client's outage's to say
    (once, and how often it goes on), so each scan does not repeat it."""
    if no_answer(error):
        logger.debug(what + ": no answer (%s)", *args, type(error).__name__)
    else:
        logger.warning(what + ": %s", *args, error)


class NodeWriter:
    """The agent's writes for one node."""

    def __init__(self, core: client.CoreV1Api, node: str) -> None:
        self.core, self.node = core, node
        self._announced: set[tuple[int, int, str]] = set()  # leftovers already given a Node Event
        self._announced_holders: set[tuple[int, int, str]] = set()  # (pid, minor, pod uid) given a Node Event
        self._node_uid = ""  # read with the node, for the Events' involvedObject

    def condition(self, ctype: str, status: str, reason: str, message: str, now: datetime.datetime) -> bool:
        """Patch the condition (merged by type, as node-problem-detector does); True if written.
        `lastTransitionTime` moves only when the status changes."""
        stamp = now.strftime("%Y-%m-%dT%H:%M:%SZ")
        try:
            node = self.core.read_node(self.node)
        except (ApiException, HTTPError, OSError) as e:
            failed(e, "cannot read node %s", self.node)
            return False
        self._node_uid = (node.metadata.uid if node.metadata is not None else None) or ""
        conditions = (node.status.conditions if node.status is not None else None) or []
        previous = next((c for c in conditions if c.type == ctype), None)
        kept = previous.last_transition_time if previous is not None and previous.status == status else None
        changed = previous is None or previous.status != status
        transition = kept.strftime("%Y-%m-%dT%H:%M:%SZ") if kept is not None else stamp
        body = {"status": {"conditions": [{
            "type": ctype, "status": status, "reason": reason, "message": message[:node_report.MESSAGE_MAX],
            "lastHeartbeatTime": stamp, "lastTransitionTime": transition}]}}
        try:
            self.core.patch_node_status(self.node, body)
        except (ApiException, HTTPError, OSError) as e:
            failed(e, "cannot set condition %s on node %s", ctype, self.node)
            return False
        if changed:  # leftovers and blindness need a look; starting and all clear are routine
            needs_look = status == "True" or reason == node_report.REASON_CANNOT_SEE
            logger.log(logging.WARNING if needs_look else logging.INFO, "%s=%s on node %s: %s", ctype, status,
                       self.node, message)
        return True

    def leftovers(self, leftovers: list[Leftover], now: datetime.datetime) -> None:
        self._announced = self._announce(self._announced, node_report.EVENT_LEFTOVER,
                                         {(f.pid, f.tid, f.pod_uid): f.describe(now) for f in leftovers})

    def holders(self, held: list[holders.GpuHolder], now: datetime.datetime) -> None:
        self._announced_holders = self._announce(self._announced_holders, node_report.EVENT_GPU_HELD,
                                                 {(h.pid, h.gpu.minor, h.pod_uid): h.describe(now) for h in held})

    def _announce(self, announced: set[tuple[int, int, str]], reason: str,
                  found: dict[tuple[int, int, str], str]) -> set[tuple[int, int, str]]:
        """One Node Event per key not announced yet; the keys announced and still found after it (one
        that is gone may be announced again if it ever comes back)."""
        node = {"kind": "Node", "name": self.node, "uid": self._node_uid, "apiVersion": "v1"}
        told = announced & found.keys()
        for key, message in found.items():
            if key not in told and self.event(EVENT_NAMESPACE, node, reason, message):
                told.add(key)
        return told

    def event(self, namespace: str, involved: dict[str, str], reason: str, message: str) -> bool:
        now = datetime.datetime.now(datetime.timezone.utc)
        body = client.CoreV1Event(
            metadata=client.V1ObjectMeta(generate_name=f"{involved['name'][:200]}.", namespace=namespace),
            involved_object=client.V1ObjectReference(**{k: involved[k] for k in involved if k != "apiVersion"},
                                                     api_version=involved["apiVersion"]),
            reason=reason, message=message[:1024], type="Warning",
            source=client.V1EventSource(component=COMPONENT, host=self.node),
            reporting_component=COMPONENT, reporting_instance=socket.gethostname()[:128],
            first_timestamp=now, last_timestamp=now, count=1)
        try:
            self.core.create_namespaced_event(namespace, body)
        except (ApiException, HTTPError, OSError) as e:
            failed(e, "cannot post %s Event on %s/%s", reason, involved["kind"], involved["name"])
            return False
        logger.warning("%s %s/%s: %s", reason, involved["kind"], involved["name"], message)
        return True
