"""kube-idle-janitor: reclaims idle GPUs and expired objects on shared Kubernetes clusters."""

__version__ = "0.1.0"
