#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Runs Debian sid's Apptainer from its debootstrapped root (made by setup.sh).
# Installed as `apptainer` and `singularity`; arguments pass through unchanged.
#
# Each call enters a private mount namespace, binds the host's working folders
# at the same paths, and pivot_roots into the sid root (Apptainer refuses a
# plain chroot). As root it sets APPTAINER_USERNS: the privileged path wants a
# capability these machines lack, the user-namespace path does not.
set -euo pipefail
ROOT_DEFAULT=/var/lib/hpcai/apptainer-sid
ROOT=${HPCAI_APPTAINER_ROOT:-$ROOT_DEFAULT}
# Host folders seen inside at the same paths (colon-separated; missing ones skipped).
BINDS=${HPCAI_APPTAINER_BINDS:-/tmp:/var/tmp:/work:/root:/home:/srv:/mnt:/scratch:/data}

if [ "${1:-}" = "__inside" ]; then
  shift
  cd "$ROOT"
  mkdir -p .oldroot
  pivot_root . .oldroot
  mount -t proc proc /proc
  umount -l /.oldroot
  cd "$HPCAI_SHIM_CWD" 2>/dev/null || cd /
  [ "$(id -u)" = 0 ] && export APPTAINER_USERNS=1
  exec -a "$HPCAI_SHIM_NAME" /usr/bin/apptainer "$@"
fi

[ -x "$ROOT/usr/bin/apptainer" ] || {
  echo "apptainer: its Debian sid root $ROOT is missing; run tools/apptainer-sid/setup.sh as root" >&2
  exit 127; }
[ "$(id -u)" = 0 ] || {
  echo "apptainer: this shim needs root to enter $ROOT (mount namespace); run as root" >&2
  exit 126; }

export HPCAI_SHIM_CWD=$PWD HPCAI_SHIM_NAME=$(basename "$0")
exec unshare --mount --propagation private -- /bin/bash -c '
  set -e
  ROOT=$1; BINDS=$2; shift 2
  mount --bind "$ROOT" "$ROOT"
  mount --rbind /dev "$ROOT/dev"
  mount --rbind /sys "$ROOT/sys"
  # The host CA bundle: builds that pip install through a proxy need it.
  mount --bind /etc/ssl/certs "$ROOT/etc/ssl/certs"
  IFS=:
  for dir in $BINDS; do
    if [ -d "$dir" ] && [ ! -L "$dir" ]; then
      mkdir -p "$ROOT$dir"
      mount --rbind "$dir" "$ROOT$dir"
    fi
  done
  # The working folder too, wherever it is. Whether it is under a bound folder
  # is decided by path, not by "exists in the root": the mount point made by an
  # earlier call stays behind in the root as an empty folder.
  under_bound=no
  for dir in $BINDS; do
    case "$HPCAI_SHIM_CWD/" in "${dir%/}/"*) [ -d "$dir" ] && [ ! -L "$dir" ] && under_bound=yes ;; esac
  done
  unset IFS
  case "$HPCAI_SHIM_CWD" in
    /|/etc*|/usr*|/bin*|/sbin*|/lib*|/dev*|/proc*|/sys*|/var/lib/hpcai*) ;;
    *) if [ "$under_bound" = no ]; then
         mkdir -p "$ROOT$HPCAI_SHIM_CWD" && mount --rbind "$HPCAI_SHIM_CWD" "$ROOT$HPCAI_SHIM_CWD"
       fi ;;
  esac
  exec "$0" __inside "$@"
' "$0" "$ROOT" "$BINDS" "$@"
