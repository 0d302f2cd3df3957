#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# A real Apptainer on a Debian 12 host that has none (CI, development machines).
#
# Debian bookworm ships no Apptainer, and sid's 1.4.5 needs a newer glibc, so
# it runs from a debootstrapped sid root entered with pivot_root (see
# shared/notes/apptainer-on-ci.md). This script makes that root and puts a
# small `apptainer` (and `singularity`) command on the host's PATH that runs
# the real binary inside it, with the host's working folders bound at the same
# paths. Nothing here is used on a host with its own Apptainer.
#
# Usage (as root): tools/apptainer-sid/setup.sh [ROOT] [BINDIR]
#        tools/apptainer-sid/setup.sh --stale   (any user: exit 0 when the
#        `apptainer` on PATH is this shim but older than shim.sh, so that
#        `make setup-system` reinstalls it)
set -euo pipefail

ROOT=${1:-${HPCAI_APPTAINER_ROOT:-/var/lib/hpcai/apptainer-sid}}
BINDIR=${2:-/usr/local/bin}
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
HERE=$(cd "$(dirname "$0")" && pwd)

if [ "${1:-}" = --stale ]; then
  installed=$(command -v apptainer) || exit 1
  grep -q "Runs Debian sid's Apptainer" "$installed" || exit 1  # a site's own Apptainer
  # setup.sh rewrites ROOT_DEFAULT on install; the rest must match.
  cmp -s <(sed '/^ROOT_DEFAULT=/d' "$installed") <(sed '/^ROOT_DEFAULT=/d' "$HERE/shim.sh") && exit 1
  exit 0
fi

die() { echo "apptainer-sid: $*" >&2; exit 1; }
[ "$(id -u)" = 0 ] || die "must run as root (it debootstraps a root file system and installs $BINDIR/apptainer)"
command -v apt-get >/dev/null || die "needs a Debian host (apt-get not found)"

if [ ! -x "$ROOT/usr/bin/apptainer" ]; then
  echo "apptainer-sid: installing debootstrap and squashfs-tools" >&2
  apt-get update -q >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends debootstrap squashfs-tools >/dev/null
  echo "apptainer-sid: debootstrapping Debian sid with apptainer into $ROOT (about a minute)" >&2
  rm -rf "$ROOT.partial"
  mkdir -p "$(dirname "$ROOT")"
  debootstrap --variant=minbase \
    --include=apptainer,ca-certificates,squashfuse,fuse2fs,uidmap,debootstrap \
    sid "$ROOT.partial" "$MIRROR" >"$ROOT.debootstrap.log" 2>&1 \
    || die "debootstrap failed; see $ROOT.debootstrap.log"
  mv "$ROOT.partial" "$ROOT"
fi

# Apptainer builds resolve names and read /etc/hosts inside the root.
cp /etc/hosts /etc/resolv.conf "$ROOT/etc/"
# Bootstrap: debootstrap definitions (the CPU flavour) run debootstrap inside.
[ -x "$ROOT/usr/sbin/debootstrap" ] || chroot "$ROOT" apt-get install -y -q --no-install-recommends debootstrap >/dev/null
# --fakeroot builds as root need a subordinate id range for root.
for f in subuid subgid; do
  grep -q '^root:' "$ROOT/etc/$f" 2>/dev/null || echo "root:100000:65536" >>"$ROOT/etc/$f"
done

install -m 0755 "$HERE/shim.sh" "$BINDIR/apptainer"
ln -sf apptainer "$BINDIR/singularity"
sed -i "s|^ROOT_DEFAULT=.*|ROOT_DEFAULT=$ROOT|" "$BINDIR/apptainer"
echo "apptainer-sid: $("$BINDIR/apptainer" --version) ready ($BINDIR/apptainer runs it from $ROOT)" >&2
