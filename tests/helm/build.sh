#!/usr/bin/env bash
# Builds the `helm` the chart tests (tests/helm) run: helm.sh/helm/v4 at the release go.mod
# pins, into a cache directory outside the repository, as tests/controlplane/build.sh builds
# the control plane. A no-op when that directory already holds a binary built from the same
# go.mod, go.sum and this script. Prints how long it took; the last line is the binary.
#
#   tests/helm/build.sh                  # build (or find) helm
#   NODEAGENT_HELM_DIR=/x build.sh       # build into /x instead of the cache
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cd "$here"

if ! command -v go >/dev/null 2>&1; then
  echo "build.sh: no Go toolchain on PATH; the helm tests will skip" >&2
  exit 3
fi

module=helm.sh/helm/v4
version="$(awk -v m="$module" '$1 == m { print $2 }' go.mod)"
out="${NODEAGENT_HELM_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/nodeagent/helm/$version}"
stamp="$(cat go.mod go.sum build.sh | sha256sum | cut -d' ' -f1)"

start=$(date +%s)
if [ -x "$out/helm" ] && [ "$(cat "$out/.stamp" 2>/dev/null)" = "$stamp" ]; then
  echo "build.sh: helm $version already built (0 s)"
  echo "$out/helm"
  exit 0
fi

mkdir -p "$out"
rm -f "$out/.stamp"
echo "build.sh: building helm $version into $out (cold: about 2 min on 2 cores)" >&2
# `helm version` reports the pinned release, as a release build's would; the Kubernetes
# version `helm template` assumes offline comes from the client-go in the build info.
pkg=$module/internal/version
ldflags="-s -w -X $pkg.version=$version -X $pkg.metadata= -X $pkg.gitTreeState=clean"
CGO_ENABLED=0 go build -trimpath -buildvcs=false -ldflags "$ldflags" -o "$out/helm" \
  $module/cmd/helm
echo "$stamp" >"$out/.stamp"
echo "build.sh: built helm $version in $(($(date +%s) - start)) s"
echo "$out/helm"
