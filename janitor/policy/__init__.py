"""Admin policies: the YAML files admins edit, parsed into plain values (no client libraries)."""
