"""Synthetic dcgm-exporter, kubelet cAdvisor, kube-state-metrics and node-exporter for the sandbox.

`model` holds the pod/node views, `values` the usage timelines tests set, `render` the pure
renderers, `exposition` the text formats, `server` the HTTP server and its control client.
"""

from devenv.exporters.model import ContainerView, NodeView, PodView
from devenv.exporters.server import ExporterServer, ValuesControl
from devenv.exporters.values import ABSENT, Kind, Segment, Values

__all__ = [
    "ABSENT",
    "ContainerView",
    "ExporterServer",
    "Kind",
    "NodeView",
    "PodView",
    "Segment",
    "Values",
    "ValuesControl",
]
