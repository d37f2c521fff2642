"""Acting: applying planned actions to Kubernetes and Slack, idempotently."""
