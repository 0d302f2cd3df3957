#!/bin/bash
# Job accounting for the private cluster of start.sh (HPCAI_SLURM_CI_ACCOUNTING=1):
# Debian's MariaDB on DB_PORT and slurmdbd on DBD_PORT, both on 127.0.0.1 only, with
# all their state under CONFDIR (stop.sh stops them by their pid files).
# The database runs without grant tables: it listens on loopback alone, for a
# cluster that lives as long as one test session. Never do this on a real cluster.
set -euo pipefail

[ $# = 3 ] || { echo "usage: $0 CONFDIR DB_PORT DBD_PORT" >&2; exit 2; }
CONFDIR=$1 DB_PORT=$2 DBD_PORT=$3
PATH=$PATH:/usr/sbin:/sbin
for exe in mariadbd mariadb-install-db mariadb-admin slurmdbd sacctmgr; do
  command -v "$exe" >/dev/null || { echo "$0: $exe is missing: run \`make setup-system\` as root" >&2; exit 1; }
done
mkdir -p "$CONFDIR/db" "$CONFDIR/run" "$CONFDIR/log"
mariadb-install-db --no-defaults --user=root --datadir="$CONFDIR/db" --skip-test-db \
  >"$CONFDIR/log/mariadb-install.log" 2>&1
mariadbd --no-defaults --user=root --datadir="$CONFDIR/db" --skip-grant-tables \
  --bind-address=127.0.0.1 --port="$DB_PORT" --socket="$CONFDIR/run/mariadb.sock" \
  --pid-file="$CONFDIR/run/mariadbd.pid" --log-error="$CONFDIR/log/mariadb.log" \
  </dev/null >>"$CONFDIR/log/mariadb.log" 2>&1 &
for _ in $(seq 120); do
  mariadb-admin --no-defaults --socket="$CONFDIR/run/mariadb.sock" ping >/dev/null 2>&1 && break
  sleep 0.5
done
mariadb-admin --no-defaults --socket="$CONFDIR/run/mariadb.sock" ping >/dev/null

# slurmdbd reads slurmdbd.conf beside slurm.conf; it must be the SlurmUser's, 0600.
cat >"$CONFDIR/slurmdbd.conf" <<CONF
AuthType=auth/munge
DbdAddr=127.0.0.1
DbdHost=localhost
DbdPort=$DBD_PORT
SlurmUser=root
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$DB_PORT
StorageUser=root
StorageLoc=slurm_acct_db
PidFile=$CONFDIR/run/slurmdbd.pid
LogFile=$CONFDIR/log/slurmdbd.log
CONF
chmod 600 "$CONFDIR/slurmdbd.conf"
SLURM_CONF=$CONFDIR/slurm.conf slurmdbd
for _ in $(seq 60); do
  SLURM_CONF=$CONFDIR/slurm.conf sacctmgr -n list cluster >/dev/null 2>&1 && break
  sleep 0.5
done
# slurmctld registers only with a cluster slurmdbd already knows.
SLURM_CONF=$CONFDIR/slurm.conf sacctmgr -i add cluster hpcai-ci >/dev/null
