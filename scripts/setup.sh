#!/usr/bin/env bash
# Install what aitb needs on a fresh Debian 12 / Ubuntu 24.04 machine (run as root):
# Debian packages, then the project's Python environment in .venv.
# Used by `make setup`, by .ci/run and by the Vagrantfile, so all three install the same.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "$(id -u)" -ne 0 ]; then
  echo "scripts/setup.sh: run as root (it installs Debian packages and aitb needs root for namespaces)" >&2
  exit 2
fi

export DEBIAN_FRONTEND=noninteractive
APT_PACKAGES=(
  python3 python3-venv python3-dev gcc make git
  iproute2 iputils-ping ethtool procps kmod
  tcpdump iperf3 tshark
)
missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing Debian packages: ${missing[*]}"
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e '.[dev,vm]'
.venv/bin/python -m analysis.tcpflows.fast   # compile the pcap kernel once (numba cache)
echo "setup: done (.venv/bin/aitb)"
