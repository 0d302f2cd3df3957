#!/bin/bash
# Start a private two-node Slurm cluster (Debian's slurm-wlm 22.05 + munge) whose
# whole state lives under CONFDIR. Clients reach it with SLURM_CONF=CONFDIR/slurm.conf.
# Stop it with tools/slurm-ci/stop.sh CONFDIR. Needs root (SlurmUser=root).
set -euo pipefail

[ $# = 1 ] || { echo "usage: $0 CONFDIR" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "$0: must run as root" >&2; exit 1; }
PATH=$PATH:/usr/sbin:/sbin  # the daemons' home, missing from some PATHs
for exe in slurmctld slurmd sinfo munged munge unmunge; do
  command -v "$exe" >/dev/null || { echo "$0: $exe is missing: run \`make setup-system\` as root" >&2; exit 1; }
done
mkdir -p "$1"
CONFDIR=$(cd "$1" && pwd)
HOST=$(hostname -s)
# Non-default ports, so a system Slurm on 6817/6818 does not clash;
# HPCAI_SLURM_CI_PORT_BASE moves them, for a second cluster on one machine.
BASE=${HPCAI_SLURM_CI_PORT_BASE:-17000}
CTLD_PORT=$BASE NODE1_PORT=$((BASE + 1)) NODE2_PORT=$((BASE + 2))
export SLURM_CONF=$CONFDIR/slurm.conf

# A port someone already listens on means another cluster (or ours, not stopped).
for port in $CTLD_PORT $NODE1_PORT $NODE2_PORT; do
  if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
    echo "$0: port $port is already in use (another Slurm started by tools/slurm-ci? stop it with stop.sh on its CONFDIR)" >&2
    exit 1
  fi
done

# munged: Slurm authenticates through the system's munged socket.
if ! { munge -n | unmunge; } </dev/null >/dev/null 2>&1; then
  mkdir -p /run/munge && chown munge:munge /run/munge
  su -s /bin/sh munge -c /usr/sbin/munged
  cp /run/munge/munged.pid "$CONFDIR/munged.started"  # stop.sh stops only a munged we started
  munge -n </dev/null | unmunge >/dev/null || { echo "$0: munged does not answer" >&2; exit 1; }
fi

mkdir -p "$CONFDIR"/{state,spool/node1,spool/node2,log,run}
# HPCAI_SLURM_CI_ACCOUNTING=1: job accounting for sacct (a private MariaDB and slurmdbd,
# tools/slurm-ci/accounting.sh) and two GPUs a node as GRES, so that sacct reports
# gres/gpu in AllocTRES. Their File= are /dev/null and /dev/zero: slurmd drops a GPU
# without a file, and with TaskPlugin=task/none no device is constrained.
ACCOUNTING=${HPCAI_SLURM_CI_ACCOUNTING:-0}
# Two CPUs a node (both nodes share this machine's cores; Slurm does not mind),
# one on a single-core machine, where slurmd would mark CPUs=2 invalid.
CPUS=$(( $(nproc) >= 2 ? 2 : 1 ))
cat >"$SLURM_CONF" <<CONF
ClusterName=hpcai-ci
SlurmctldHost=$HOST(127.0.0.1)
SlurmctldPort=$CTLD_PORT
AuthType=auth/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmUser=root
JobAcctGatherType=jobacct_gather/none
MpiDefault=none
MailProg=/bin/true
ReturnToService=2
KillWait=30
# Finished jobs stay known to scontrol for 10 minutes (sacct only with HPCAI_SLURM_CI_ACCOUNTING=1).
MinJobAge=600
# Schedule a batch job when it is submitted (the default waits up to 3 s).
SchedulerParameters=batch_sched_delay=0
StateSaveLocation=$CONFDIR/state
SlurmdSpoolDir=$CONFDIR/spool/%n
SlurmctldPidFile=$CONFDIR/run/slurmctld.pid
SlurmdPidFile=$CONFDIR/run/slurmd-%n.pid
SlurmctldLogFile=$CONFDIR/log/slurmctld.log
SlurmdLogFile=$CONFDIR/log/slurmd-%n.log
NodeName=node1 NodeHostname=$HOST NodeAddr=127.0.0.1 Port=$NODE1_PORT CPUs=$CPUS RealMemory=8000
NodeName=node2 NodeHostname=$HOST NodeAddr=127.0.0.1 Port=$NODE2_PORT CPUs=$CPUS RealMemory=8000
PartitionName=ci Nodes=node1,node2 Default=YES MaxTime=INFINITE State=UP
CONF
if [ "$ACCOUNTING" = 1 ]; then
  sed -i 's/^\(NodeName=node[12] .*\)$/\1 Gres=gpu:2/' "$SLURM_CONF"
  cat >>"$SLURM_CONF" <<CONF
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=127.0.0.1
AccountingStoragePort=$((BASE + 7))
AccountingStorageTRES=gres/gpu
GresTypes=gpu
CONF
  printf 'Name=gpu File=/dev/null\nName=gpu File=/dev/zero\n' >"$CONFDIR/gres.conf"
  "$(dirname "$0")/accounting.sh" "$CONFDIR" $((BASE + 6)) $((BASE + 7)) || {
    echo "$0: job accounting did not start; see $CONFDIR/log/slurmdbd.log and mariadb.log" >&2; exit 1; }
fi

# What went wrong, from the daemons' logs; stop.sh cleans up what did start.
fail() {
  echo "$0: $1; sinfo says:" >&2
  sinfo -N >&2 2>&1 || true
  for log in "$CONFDIR"/log/*.log; do echo "== $log" >&2; tail -n 20 "$log" >&2; done
  echo "$0: run tools/slurm-ci/stop.sh $CONFDIR to stop what did start" >&2
  exit 1
}

# -c: a fresh cluster, no jobs recovered from an earlier run in this CONFDIR.
slurmctld -c -f "$SLURM_CONF" || fail "slurmctld did not start"
slurmd -f "$SLURM_CONF" -N node1 || fail "slurmd node1 did not start"
slurmd -f "$SLURM_CONF" -N node2 || fail "slurmd node2 did not start"

for _ in $(seq 60); do
  [ "$(sinfo -h -N -o '%t' 2>/dev/null | grep -c '^idle$')" = 2 ] && exit 0
  sleep 0.5
done
fail "the nodes did not come up idle within 30 s"
