#!/bin/sh
# The tests start docker-registry, munged, slurmctld, slurmd and prometheus themselves, as
# private daemons (and ipmi_sim instead of the host's IPMI drivers, which
# openipmi's init script loads); Debian's packages enable the system's own at
# boot. Leave them disabled at boot (the install itself starts none: the Makefile sets a policy-rc.d).
# Safe to rerun; a daemon running now is left running.
# Usage: disable-test-services.sh [--root DIR]   (DIR: another root, as systemctl --root)
SERVICES="docker-registry munge slurmctld slurmd slurmdbd mariadb openipmi prometheus"
ROOT_OPT=""
if [ "${1:-}" = "--root" ] && [ -n "${2:-}" ]; then
  ROOT_OPT="--root=$2"
elif [ "$(id -u)" != 0 ]; then
  exit 0  # not root: nothing of the system's to change
fi
command -v systemctl >/dev/null 2>&1 || exit 0
for service in $SERVICES; do
  # shellcheck disable=SC2086  # ROOT_OPT is empty or one word
  if systemctl $ROOT_OPT is-enabled --quiet "$service" 2>/dev/null; then
    systemctl $ROOT_OPT disable --quiet "$service" 2>/dev/null \
      && echo "make: disabled $service at boot (the tests start their own)" >&2
  fi
done
exit 0
