#!/usr/bin/env bash
# Builds helm (for the chart's lint, template and install tests) from its Go module, once per
# version, like the control plane in ../testbin: the binary lands in
# ${XDG_CACHE_HOME:-~/.cache}/janitor-helm/<key>/helm and this prints that directory last.
set -euo pipefail

HELM_VERSION=v3.22.0
export GOTOOLCHAIN=local CGO_ENABLED=0
go_version=$(go env GOVERSION)
inputs_sum=$(sha256sum "$0" | cut -c1-12)
key="helm-${HELM_VERSION}_${go_version}_$(go env GOOS)-$(go env GOARCH)_${inputs_sum}"
cache_root="${XDG_CACHE_HOME:-$HOME/.cache}/janitor-helm"
out="$cache_root/$key"

complete() { [ -x "$out/helm" ] && "$out/helm" version --short 2>/dev/null | grep -q "^$HELM_VERSION"; }

if [ "${1:-}" = "--cached" ]; then  # only say where a complete build is; never build
  complete && echo "$out" && exit 0
  exit 1
fi

mkdir -p "$cache_root"
exec 9>"$cache_root/.lock"
flock 9
if complete; then
  echo "helm: cache hit ($key)" >&2
  echo "$out"
  exit 0
fi
echo "helm: cache miss, building $key (a few minutes on 2 cores)" >&2
start=$(date +%s)
tmp=$(mktemp -d "$cache_root/.build-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
# The Kubernetes version helm assumes without a cluster (template, lint), as its Makefile stamps it
# from the client-go it builds with (v0.37).
k8s="-X helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=37 -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMinor=37"
ld="-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION -X helm.sh/helm/v3/internal/version.gitTreeState=clean $k8s"
(cd "$tmp" && GOFLAGS= GOBIN="$tmp" go install -trimpath -ldflags "$ld" "helm.sh/helm/v3/cmd/helm@$HELM_VERSION")
rm -rf "$out"
mv "$tmp" "$out"
trap - EXIT
echo "helm: built in $(( $(date +%s) - start ))s into $out" >&2
echo "$out"
