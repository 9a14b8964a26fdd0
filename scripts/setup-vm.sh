#!/usr/bin/env bash
# The stock-kernel VM path of aitb (`aitb --vm`, `make test-vm` on hosts without sch_netem):
# qemu and busybox from Debian, the distribution's stock kernel unpacked under .vm/kernel/ of
# this checkout, its modules installed under /lib/modules/<release> (the guest sees the host's
# filesystem, so it loads modules from there), and the Python image .vm/python.ext4.
# Idempotent. Run as root; called by setup.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
export DEBIAN_FRONTEND=noninteractive

KDIR=.vm/kernel
# The metapackage names the current versioned kernel package (e.g. linux-image-6.1.0-57-amd64).
META=${AITB_VM_KERNEL_META:-linux-image-amd64}

need=()
for p in qemu-system-x86 busybox-static e2fsprogs; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || need+=("$p")
done
if [ ${#need[@]} -gt 0 ]; then
  echo "setup-vm: installing Debian packages: ${need[*]}"
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need[@]}"
fi

pkg=$(apt-cache depends "$META" | awk '$1 == "Depends:" && $2 ~ /^linux-image-/ {print $2; exit}')
if [ -z "$pkg" ]; then
  apt-get update -qq
  pkg=$(apt-cache depends "$META" | awk '$1 == "Depends:" && $2 ~ /^linux-image-/ {print $2; exit}')
fi
if [ -z "$pkg" ]; then
  echo "setup-vm: cannot resolve the kernel package from $META (apt-cache depends $META)" >&2
  exit 1
fi
release=${pkg#linux-image-}

if [ ! -f "$KDIR/boot/vmlinuz-$release" ]; then
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  chown _apt "$tmp" 2>/dev/null || true  # apt-get download drops privileges to _apt
  echo "setup-vm: downloading $pkg"
  (cd "$tmp" && apt-get download -q "$pkg")
  rm -rf "$KDIR.new"
  mkdir -p "$KDIR.new"
  dpkg -x "$tmp/$pkg"_*.deb "$KDIR.new"
  test -f "$KDIR.new/boot/vmlinuz-$release"
  rm -rf "$KDIR"
  mv "$KDIR.new" "$KDIR"
fi
# Modules where the guest looks for them; left alone when present (other checkouts share them).
if [ ! -f "/lib/modules/$release/modules.dep" ]; then
  mkdir -p /lib/modules
  rm -rf "/lib/modules/$release.new"
  cp -a "$KDIR/lib/modules/$release" "/lib/modules/$release.new"
  rm -rf "/lib/modules/$release"  # a partial copy: no modules.dep
  mv -T "/lib/modules/$release.new" "/lib/modules/$release"
  depmod "$release"
fi
echo "setup-vm: stock kernel $release in $KDIR, modules in /lib/modules/$release"
# The guest reads the host's files over 9p without caching, slow for Python's many small
# imports: a read-only ext4 image of the interpreter's stdlib and .venv (precompiled) is mounted
# over the same paths in the guest (testbed/vm/image.py). Rebuilt lazily before a boot when its
# inputs change; built here so that the first VM run does not pay for it. A failure is not
# fatal: the VM then reads Python over 9p (slower) and says so.
.venv/bin/python -m testbed.vm.image || echo "setup-vm: no Python image; the VM will be slower" >&2
