#!/usr/bin/env bash
# Installs what the sandbox and the tests need on a fresh Debian machine, and nothing twice:
#   - Prometheus and promtool (Debian package `prometheus`),
#   - a virtualenv in .venv with the project and its test extra,
#   - the control-plane binaries, built from Go modules once and cached in ~/.cache,
#   - Prometheus 3 (prometheus, promtool), built from its Go module once and cached in ~/.cache:
#     the evidence tests run on both majors,
#   - helm, built from its Go module once and cached in ~/.cache (the chart's tests).
# Safe to run again: each step checks first and says what it did.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

step() { printf '==> %s\n' "$*" >&2; }

if ! command -v prometheus >/dev/null || ! command -v promtool >/dev/null; then
  step "installing Prometheus (apt)"
  sudo_=""; [ "$(id -u)" -eq 0 ] || sudo_="sudo"
  $sudo_ apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_ apt-get install -y -qq --no-install-recommends prometheus >/dev/null
else
  step "Prometheus present: $(prometheus --version 2>&1 | head -n1)"
fi
command -v go >/dev/null || { echo "Go is required to build the sandbox's control plane" >&2; exit 1; }

if [ ! -x .venv/bin/python ]; then
  step "creating .venv"
  python3 -m venv .venv
fi
step "installing the project and its test extra into .venv"
.venv/bin/python -m pip install -q --disable-pip-version-check -e '.[test]'

step "control-plane binaries"
bash devenv/testbin/ensure.sh >/dev/null

step "Prometheus 3 binaries"
bash devenv/prometheus3/ensure.sh >/dev/null

step "helm (the chart's tests)"
bash devenv/helm/ensure.sh >/dev/null
