#!/bin/bash
# Stop the cluster tools/slurm-ci/start.sh started under CONFDIR: its jobs, its
# daemons (by their pid files), and munged only if start.sh started it.
set -uo pipefail

[ $# = 1 ] || { echo "usage: $0 CONFDIR" >&2; exit 2; }
CONFDIR=$(cd "$1" && pwd) || exit 1
export SLURM_CONF=$CONFDIR/slurm.conf

# A pid from a file is signalled only while it is still that daemon: pids wrap
# around quickly, and a stale file must not kill whatever has the number now.
is_daemon() {  # PID NAME
  [ "$(cat "/proc/$1/comm" 2>/dev/null)" = "$2" ]
}

# Wait up to SECONDS for each PID:NAME to exit (they were sent SIGTERM), then SIGKILL it.
wait_pids() {
  local seconds=$1 entry pid name; shift
  for entry in "$@"; do
    pid=${entry%%:*} name=${entry#*:}
    for _ in $(seq $((seconds * 10))); do
      is_daemon "$pid" "$name" || continue 2
      sleep 0.1
    done
    echo "$0: $name (pid $pid) did not exit in ${seconds}s; killing it" >&2
    kill -KILL "$pid" 2>/dev/null
  done
}

# Jobs first: their slurmstepd processes outlive slurmd. Bounded by KillWait (30 s).
if [ -s "$CONFDIR/run/slurmctld.pid" ] && scancel -p ci 2>/dev/null; then
  for _ in $(seq 80); do
    [ -z "$(squeue -h -t PD,R,CG -o %i 2>/dev/null)" ] && break
    sleep 0.5
  done
fi

# All daemons at once: each takes a second or more to shut down.
pids=()
for pidfile in "$CONFDIR"/run/slurmd-*.pid "$CONFDIR/run/slurmctld.pid"; do
  name=$(basename "$pidfile" .pid); name=${name%%-*}
  pid=$(cat "$pidfile" 2>/dev/null) && is_daemon "$pid" "$name" &&
    kill -TERM "$pid" 2>/dev/null && pids+=("$pid:$name")
done
wait_pids 15 "${pids[@]}"
# Job accounting (HPCAI_SLURM_CI_ACCOUNTING=1): slurmdbd, then its database.
for daemon in slurmdbd mariadbd; do
  pid=$(cat "$CONFDIR/run/$daemon.pid" 2>/dev/null) && is_daemon "$pid" "$daemon" &&
    kill -TERM "$pid" 2>/dev/null && wait_pids 30 "$pid:$daemon"
done
rm -f "$CONFDIR"/run/*.pid
if [ -s "$CONFDIR/munged.started" ]; then
  pid=$(cat "$CONFDIR/munged.started")
  is_daemon "$pid" munged && kill -TERM "$pid" 2>/dev/null && wait_pids 10 "$pid:munged"
  rm -f "$CONFDIR/munged.started"
fi
exit 0
