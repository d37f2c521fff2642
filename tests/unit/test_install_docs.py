"""The install steps in the docs, in the order an admin types them.

Aspects covered:
- the Slack token's Secret exists before the janitor's pods start: the token reaches the pods as
  an environment variable (read once, at start, and `optional`), so a Secret created after
  `kubectl apply` is never read and no warning can ever be sent;
- the namespace the Secret goes in exists before the Secret, applied from the base (not created:
  a created one makes `kubectl apply -k` warn that it lacks last-applied-configuration).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SECRET = re.compile(r"kubectl -n kube-idle-janitor create secret generic kube-idle-janitor-slack")
APPLY = re.compile(r"kubectl apply -k \S*(manifests/base|kube-idle-janitor)\b")
# Applied, not created: `kubectl apply -k` later finds it with its last-applied-configuration.
NAMESPACE = re.compile(r"kubectl apply -f \S*manifests/base/namespace\.yaml")


def shell_blocks(path: Path) -> list[list[str]]:
    text = path.read_text()
    return [block.splitlines() for block in re.findall(r"```sh\n(.*?)```", text, re.S)]


@pytest.mark.parametrize("doc", ["docs/admin-guide.md", "manifests/README.md"])
def test_the_slack_secret_is_created_before_the_pods_start(doc: str) -> None:
    installs = [b for b in shell_blocks(ROOT / doc) if any(APPLY.search(line) for line in b)]
    assert installs, f"{doc} has no install block"
    for block in installs:
        applied = next(i for i, line in enumerate(block) if APPLY.search(line))
        secret = next((i for i, line in enumerate(block) if SECRET.search(line)), None)
        namespace = next((i for i, line in enumerate(block) if NAMESPACE.search(line)), None)
        assert secret is not None and secret < applied, f"{doc}: the Secret must come before `kubectl apply`: {block}"
        assert namespace is not None and namespace < secret, f"{doc}: create the namespace first: {block}"
