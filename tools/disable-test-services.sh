#!/bin/sh
# The tests start docker-registry, munged, slurmctld and slurmd themselves, as
# private daemons; Debian's packages enable the system's own at boot. Leave them
# disabled at boot (the install itself starts none: the Makefile sets a policy-rc.d).
# Safe to rerun; a daemon running now is left running.
SERVICES="docker-registry munge slurmctld slurmd"
[ "$(id -u)" = 0 ] || exit 0
command -v systemctl >/dev/null 2>&1 || exit 0
for service in $SERVICES; do
  if systemctl is-enabled --quiet "$service" 2>/dev/null; then
    systemctl disable --quiet "$service" 2>/dev/null \
      && echo "make: disabled $service at boot (the tests start their own)" >&2
  fi
done
exit 0
