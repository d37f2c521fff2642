#!/usr/bin/env bash
# Builds the sandbox's control plane (kube-apiserver, kube-controller-manager, kube-scheduler,
# etcd, and kubectl for the tests that follow the install steps) from this Go module, and kwok from its own module, once per version set. The binaries
# land in ${XDG_CACHE_HOME:-~/.cache}/janitor-testbin/<key>/, where <key> covers every input
# that changes them, so a warm machine skips the build entirely. Prints that directory last.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
K8S_VERSION=$(sed -n 's/^require k8s.io\/kubernetes \(v[0-9.]*\)$/\1/p; s/^\tk8s.io\/kubernetes \(v[0-9.]*\)$/\1/p' "$here/go.mod" | head -n1)
ETCD_VERSION=$(sed -n 's/^\tgo.etcd.io\/etcd\/server\/v3 \(v[0-9.]*\).*/\1/p' "$here/go.mod" | head -n1)
KWOK_VERSION=v0.8.0

export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-mod=mod
go_version=$(go env GOVERSION)
inputs_sum=$(cat "$here/go.mod" "$here/go.sum" "$here/tools.go" "$0" | sha256sum | cut -c1-12)
key="k8s-${K8S_VERSION}_etcd-${ETCD_VERSION}_kwok-${KWOK_VERSION}_${go_version}_$(go env GOOS)-$(go env GOARCH)_${inputs_sum}"
cache_root="${XDG_CACHE_HOME:-$HOME/.cache}/janitor-testbin"
out="$cache_root/$key"
bins=(kube-apiserver kube-controller-manager kube-scheduler kubectl etcd kwok)

complete() {
  for b in "${bins[@]}"; do [ -x "$out/$b" ] || return 1; done
  "$out/kube-apiserver" --version 2>/dev/null | grep -q "$K8S_VERSION"
}

if [ "${1:-}" = "--cached" ]; then  # only say where a complete build is; never build
  complete && echo "$out" && exit 0
  exit 1
fi

mkdir -p "$cache_root"
exec 9>"$cache_root/.lock"
flock 9   # one build at a time; a second caller waits and then finds the cache warm

if complete; then
  echo "testbin: cache hit ($key)" >&2
  echo "$out"
  exit 0
fi

echo "testbin: cache miss, building $key (a cold build takes tens of minutes on 2 cores)" >&2
start=$(date +%s)
tmp=$(mktemp -d "$cache_root/.build-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
minor=${K8S_VERSION#v1.}; minor=${minor%%.*}
ld="-s -w -X k8s.io/component-base/version.gitVersion=$K8S_VERSION -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor -X k8s.io/component-base/version.gitTreeState=clean"
(
  cd "$here"
  go build -trimpath -ldflags "$ld" -o "$tmp/" \
    k8s.io/kubernetes/cmd/kube-apiserver \
    k8s.io/kubernetes/cmd/kube-controller-manager \
    k8s.io/kubernetes/cmd/kube-scheduler \
    k8s.io/kubernetes/cmd/kubectl
  go build -trimpath -ldflags "-s -w" -o "$tmp/etcd" go.etcd.io/etcd/server/v3
)
# kwok has no replace lines, so it installs from its own module without this wrapper.
(cd "$tmp" && GOFLAGS= GOBIN="$tmp" go install -trimpath -ldflags "-s -w" "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION")
rm -rf "$out"
mv "$tmp" "$out"
trap - EXIT
echo "testbin: built in $(( $(date +%s) - start ))s into $out" >&2
echo "$out"
