"""kube-idle-janitor: reclaims idle GPUs and expired objects on shared Kubernetes clusters."""

from importlib.metadata import PackageNotFoundError, version

try:
    # Set at build time from the git tag (setuptools-scm): one source for the CLI, the image and the chart.
    __version__ = version("kube-idle-janitor")
except PackageNotFoundError:  # run from a tree that was never installed
    __version__ = "0.0.0+unknown"
