#!/usr/bin/env bash
# Install what aitb needs on a fresh Debian 12 / Ubuntu 24.04 machine (run as root):
# Debian packages, then the project's Python environment in .venv, then -- when the host kernel
# lacks sch_netem, or with --vm -- the stock-kernel VM path (qemu, busybox, the distribution's
# kernel under .vm/kernel/ and its modules under /lib/modules/<release>).
# Used by `make setup`, `make vm`, by .ci/run and by the Vagrantfile, so all install the same.
#   scripts/setup.sh        packages + .venv; the VM path only if the host kernel lacks netem
#   scripts/setup.sh --vm   the same, and the VM path unconditionally
#   scripts/setup.sh --no-vm  never the VM path
set -euo pipefail
cd "$(dirname "$0")/.."

VM_MODE=auto
case "${1:-}" in
  --vm) VM_MODE=yes ;;
  --no-vm) VM_MODE=no ;;
  "") ;;
  *) echo "scripts/setup.sh: unknown option $1 (expected --vm or --no-vm)" >&2; exit 2 ;;
esac

if [ "$(id -u)" -ne 0 ]; then
  echo "scripts/setup.sh: run as root (it installs Debian packages and aitb needs root for namespaces)" >&2
  exit 2
fi

export DEBIAN_FRONTEND=noninteractive
APT_UPDATED=no

apt_install() {  # install the Debian packages named in "$@" that are not installed yet
  local missing=() p
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  echo "setup: installing Debian packages: ${missing[*]}"
  if [ "$APT_UPDATED" = no ]; then apt-get update -qq; APT_UPDATED=yes; fi
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
}

apt_install python3 python3-venv python3-dev gcc make git \
  iproute2 iputils-ping ethtool procps kmod iptables nftables \
  tcpdump iperf3 tshark chromium openssh-server \
  mininet bridge-utils openvswitch-switch \
  docker.io busybox-static  # mininet + bridge-utils + openvswitch-switch: the mininet backend,
                            # its OVS switches and the peer of bench/bringup.py; docker.io: the
                            # engine of container hosts (started by a lab only if none runs);
                            # busybox-static: the test image of container hosts;
                            # chromium: headless screenshots of report.html in the tests
                            # openssh-server: the sshd of the test cluster's machines
                            # (tests/netns/test_cluster_ssh.py starts its own, by pid)

APT_UPDATED=$APT_UPDATED bash scripts/setup_frr.sh  # FRRouting for `routing: frr` labs, its system service off

PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e '.[dev,vm,ray]'
.venv/bin/python -m analysis.tcpflows.warm_cache   # compile the pcap kernel once (numba cache)
apt_install libnetfilter-queue-dev libmnl-dev && .venv/bin/python -m testbed.delay.nfqueue.build  # native delay line (no sch_netem)
.venv/bin/python -c 'from models.lifeline import hold_binary; print(hold_binary())'  # the exec wrapper every lab process starts through
# The mininet backend imports Debian's Mininet (pure Python + /usr/bin/mnexec) from the venv:
# a symlink of the mininet package directory only, so the venv keeps its own versions of
# everything else in dist-packages and follows Debian's updates of Mininet.
MN_DIR=$(/usr/bin/python3 -c 'import mininet, os; print(os.path.dirname(mininet.__file__))')
SITE=$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
ln -sfn "$MN_DIR" "$SITE/mininet"
.venv/bin/python -c 'import mininet.net, mininet.node' \
  || { echo "setup: Mininet from $MN_DIR does not import in .venv" >&2; exit 1; }
echo "setup: done (.venv/bin/aitb)"

if [ "$VM_MODE" = auto ]; then
  # The probe tries to add a netem qdisc in a throwaway namespace (testbed/host/capabilities.py):
  # exit 0 = present, 3 = absent, anything else = the probe failed (stop here, loudly).
  status=0
  .venv/bin/python -m testbed.host.capabilities --has netem || status=$?
  case $status in
    0) echo "setup: host kernel has sch_netem; the VM path is not needed (make vm installs it anyway)"
       exit 0 ;;
    3) echo "setup: host kernel lacks sch_netem: installing the stock-kernel VM path" ;;
    *) echo "setup: the capability probe failed (exit $status)" >&2; exit 1 ;;
  esac
fi
[ "$VM_MODE" = no ] && exit 0
bash scripts/setup-vm.sh
