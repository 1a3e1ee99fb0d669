#!/usr/bin/env bash
# Installs everything the test suite needs on a fresh Debian machine, then runs the
# linters and the tests. Used by README ("install and test") and by CI (.ci/run).
set -euo pipefail
cd "$(dirname "$0")/.."

# Debian packages for real-component tests: Prometheus + promtool (metrics lint,
# alert-rule unit tests, a real scrape), systemd-analyze (unit verification),
# containerd + runc (node-level reclaim against a real CRI runtime; with the CNI plugins and
# a static libc, the real node of tests/node), user-mode-linux (a real cgroup v2 kernel run
# as a process: tests/uml).
need_apt=()
command -v prometheus >/dev/null 2>&1 || need_apt+=(prometheus)
command -v systemd-analyze >/dev/null 2>&1 || need_apt+=(systemd)
command -v containerd >/dev/null 2>&1 || need_apt+=(containerd)
command -v runc >/dev/null 2>&1 || need_apt+=(runc)
[ -x /usr/lib/cni/bridge ] || need_apt+=(containernetworking-plugins)
[ -f /usr/lib/x86_64-linux-gnu/libc.a ] || need_apt+=(libc6-dev)
command -v gcc >/dev/null 2>&1 || need_apt+=(gcc)
command -v ip >/dev/null 2>&1 || need_apt+=(iproute2)
[ -x /usr/bin/linux.uml ] || need_apt+=(user-mode-linux)
if [ "${#need_apt[@]}" -gt 0 ]; then
  if [ "$(id -u)" -eq 0 ]; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${need_apt[@]}" >/dev/null
  else
    echo "note: not root, cannot apt-get install ${need_apt[*]}; tests that need them will skip" >&2
  fi
fi

python3 -m pip install -q --disable-pip-version-check -e '.[test]'

echo "== ruff"
python3 -m ruff check .
python3 -m ruff format --check .
echo "== mypy --strict"
python3 -m mypy
# The real control plane for the `controlplane` tests (tests/controlplane/build.sh): built
# from Go modules into a cache outside the tree, a no-op once there; without Go they skip.
if command -v go >/dev/null 2>&1; then nice -n 10 tests/controlplane/build.sh; fi
# Helm for the chart tests (tests/helm/build.sh, the same way): without Go they skip.
if command -v go >/dev/null 2>&1; then nice -n 10 tests/helm/build.sh; fi

echo "== pytest"
python3 -m pytest -q -p no:cacheprovider "$@"
