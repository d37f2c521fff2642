"""The node agent (DaemonSet): finds leftovers of deleted pods stuck in D state, and OOM kills."""
