#!/usr/bin/env bash
# Install FRRouting (Debian's frr package) for `routing: frr` labs WITHOUT its system-wide
# service: aitb starts zebra/bgpd/ospfd/bfdd itself inside each router's namespace, with
# their config, pid files and vty sockets under the run's state directory
# (testbed/routing/frr.py), never /etc/frr or /var/run/frr. Debian's postinst enables and starts
# frr.service; here a policy-rc.d (invoke-rc.d(8), deb-systemd-invoke honour it) refuses
# every start during the install, and frr.service is then stopped and disabled wherever
# systemd runs. Idempotent: run again, it installs nothing and leaves the service off.
# Called by scripts/setup.sh (as root; DEBIAN_FRONTEND=noninteractive).
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive

if ! dpkg-query -W -f='${Status}' frr 2>/dev/null | grep -q "install ok installed"; then
  echo "setup: installing Debian package frr (its system service stays off)"
  POLICY=/usr/sbin/policy-rc.d
  SAVED=""
  if [ -e "$POLICY" ]; then SAVED=$(mktemp /usr/sbin/.policy-rc.d.aitb.XXXXXX); cp -p "$POLICY" "$SAVED"; fi
  restore_policy() {
    if [ -n "$SAVED" ]; then mv -f "$SAVED" "$POLICY"; else rm -f "$POLICY"; fi
  }
  trap restore_policy EXIT
  printf '#!/bin/sh\n# aitb scripts/setup_frr.sh: no service starts while frr installs\nexit 101\n' > "$POLICY"
  chmod 0755 "$POLICY"
  if [ "${APT_UPDATED:-no}" = no ]; then apt-get update -qq; fi
  apt-get install -y -qq --no-install-recommends frr
  restore_policy
  trap - EXIT
fi

# the system-wide instance must not run (it would own /var/run/frr and fight the lab's
# daemons over the root namespace's routes): stop and disable it where systemd manages it
# (and disabled for the next boot, also where systemd is installed but not running)
if command -v systemctl >/dev/null; then
  if [ -d /run/systemd/system ]; then
    systemctl disable --now frr.service >/dev/null 2>&1 || true
    if systemctl is-active --quiet frr.service; then
      echo "setup: frr.service is still active after systemctl disable --now" >&2; exit 1
    fi
  else
    systemctl disable frr.service >/dev/null 2>&1 || true
  fi
fi
for d in zebra bgpd ospfd bfdd; do
  [ -x /usr/lib/frr/$d ] || { echo "setup: /usr/lib/frr/$d missing after installing frr" >&2; exit 1; }
done
