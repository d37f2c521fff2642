"""Deciding: pure functions from a snapshot of the cluster to a plan of actions; no I/O, no clock."""
