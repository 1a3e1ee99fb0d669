#!/usr/bin/env bash
# Builds the real control plane the `controlplane` tests and benchmarks/bench_vs_kube_scheduler.py
# run against: kube-apiserver, kube-controller-manager, kube-scheduler (k8s.io/kubernetes at the
# release go.mod pins) and an embedded etcd (./etcd), and the kubelet of the same release for the
# `node` tests (tests/node), into a cache directory outside the repository. A no-op when that
# directory already holds binaries built from the same go.mod, go.sum, etcd/main.go and this
# script. Prints how long it took; the last line is the directory.
#
#   tests/controlplane/build.sh            # build (or find) the binaries
#   NODEAGENT_CONTROLPLANE_DIR=/x build.sh # build into /x instead of the cache
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cd "$here"

if ! command -v go >/dev/null 2>&1; then
  echo "build.sh: no Go toolchain on PATH; the controlplane tests will skip" >&2
  exit 3
fi

version="$(awk '$1 == "k8s.io/kubernetes" { print $2 }' go.mod)"
out="${NODEAGENT_CONTROLPLANE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/nodeagent/controlplane/$version}"
binaries=(kube-apiserver kube-controller-manager kube-scheduler kubelet etcd)
stamp="$(cat go.mod go.sum etcd/main.go build.sh | sha256sum | cut -d' ' -f1)"

start=$(date +%s)
have_all=1
for binary in "${binaries[@]}"; do
  [ -x "$out/$binary" ] || have_all=0
done
if [ "$have_all" -eq 1 ] && [ "$(cat "$out/.stamp" 2>/dev/null)" = "$stamp" ]; then
  echo "build.sh: control plane $version already built (0 s)"
  echo "$out"
  exit 0
fi

mkdir -p "$out"
rm -f "$out/.stamp"
echo "build.sh: building control plane $version into $out (cold: about 10 min on 2 cores)" >&2
# The version the binaries report (/version, component banners) is the pinned release, as a
# release build's would be; -s -w drop the symbol tables the tests never read. One `go build`
# for all of them: the kubelet shares most of its packages with the others, and any change to
# go.mod or go.sum invalidates every binary alike, so one stamp covers them (a re-link with a
# warm Go build cache takes a minute or two).
pkg=k8s.io/component-base/version
minor="$(echo "$version" | cut -d. -f2)"
ldflags="-s -w -X $pkg.gitVersion=$version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
ldflags="$ldflags -X $pkg.gitTreeState=clean"
go build -trimpath -buildvcs=false -ldflags "$ldflags" -o "$out/" \
  k8s.io/kubernetes/cmd/kube-apiserver \
  k8s.io/kubernetes/cmd/kube-controller-manager \
  k8s.io/kubernetes/cmd/kube-scheduler \
  k8s.io/kubernetes/cmd/kubelet \
  ./etcd
echo "$stamp" >"$out/.stamp"
echo "build.sh: built control plane $version in $(($(date +%s) - start)) s"
echo "$out"
