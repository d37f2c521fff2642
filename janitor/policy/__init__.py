"""Admin policies: the YAML files admins edit, parsed into plain values (no client libraries).

Import the modules and call them qualified:
`load.from_paths(paths, parse_duration=annotations.parse_ttl)` returns `(policies, errors, files)`;
`model` holds the values (`Policy`, its `Match`, triggers and `Lifecycle`) and `first_match`;
`endings` holds the lifecycle's actions, each with everything the layers above must agree on.
The file format is documented in docs/policies.md.
"""
