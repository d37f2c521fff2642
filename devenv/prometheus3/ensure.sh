#!/usr/bin/env bash
# Builds Prometheus 3 (prometheus and promtool) from its Go module, once per version set, so the
# sandbox can run the same major version as the labs beside Debian's 2.x. The binaries land in
# ${XDG_CACHE_HOME:-~/.cache}/janitor-prometheus/<key>/, where <key> covers every input that
# changes them (Prometheus and Go versions, platform, this script), so a warm machine skips the
# build. Prints that directory last; `--cached` only says where a complete build is.
#
# What is left out, and why:
#   - the web UI assets (tag `builtinassets`): the sandbox and the tests use the HTTP API only;
#   - the optional service discoveries (tag `remove_all_sd`, upstream's own switch; static, file
#     and http SD stay): the sandbox scrapes static targets, and the cloud SDKs are most of the
#     compile time.
# The build is reproducible: the module and its dependencies come checksummed from the module
# proxy, `-trimpath` drops local paths, and the version stamp carries no user, host or date.
set -euo pipefail

PROM_VERSION=3.16.0
PROM_MODULE_VERSION=v0.316.0  # Prometheus 3.x tags its Go module v0.3xx.y: v0.316.0 is 3.16.0
TAGS="netgo,remove_all_sd"

export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=
go_version=$(go env GOVERSION)
script_sum=$(sha256sum "$0" | cut -c1-12)
key="v${PROM_VERSION}-${go_version}-$(go env GOOS)-$(go env GOARCH)-${script_sum}"
cache_root="${XDG_CACHE_HOME:-$HOME/.cache}/janitor-prometheus"
out="$cache_root/$key"

complete() {
  [ -x "$out/prometheus" ] && [ -x "$out/promtool" ] || return 1
  "$out/prometheus" --version 2>/dev/null | grep -q "version $PROM_VERSION" &&
    "$out/promtool" --version 2>/dev/null | grep -q "version $PROM_VERSION"
}

if [ "${1:-}" = "--cached" ]; then
  complete && echo "$out" && exit 0
  exit 1
fi

mkdir -p "$cache_root"
exec 9>"$cache_root/.lock"
flock 9   # one build at a time; a second caller waits and then finds the cache warm

if complete; then
  echo "prometheus3: cache hit ($key)" >&2
  echo "$out"
  exit 0
fi

echo "prometheus3: cache miss, building Prometheus $PROM_VERSION ($key; a few minutes on 2 cores)" >&2
start=$(date +%s)
tmp=$(mktemp -d "$cache_root/.build-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
pkg=github.com/prometheus/common/version
ld="-s -w -X $pkg.Version=$PROM_VERSION -X $pkg.Revision=$PROM_MODULE_VERSION -X $pkg.Branch=module"
# Both commands come from one module at one version, so one `go install` resolves it once.
(cd "$tmp" && GOBIN="$tmp" go install -trimpath -tags "$TAGS" -ldflags "$ld" \
  "github.com/prometheus/prometheus/cmd/prometheus@$PROM_MODULE_VERSION" \
  "github.com/prometheus/prometheus/cmd/promtool@$PROM_MODULE_VERSION")
chmod 755 "$tmp"  # mktemp made it private; the binaries are for every user of this cache
rm -rf "$out"
mv "$tmp" "$out"
trap - EXIT
complete || { echo "prometheus3: built binaries do not report version $PROM_VERSION" >&2; exit 1; }
echo "prometheus3: built in $(( $(date +%s) - start ))s into $out" >&2
echo "$out"
