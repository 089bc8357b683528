#!/usr/bin/env bash
# A real single-node Slurm cluster on this machine, for the workflow's cluster path (docs/running.md#on-a-slurm-cluster):
# munge, MariaDB, slurmdbd (accounting: Snakemake's Slurm executor reads job states with sacct), slurmctld and
# slurmd, started directly (no systemd) and without cgroups: processes are tracked by /proc and memory limits are
# enforced by polling (a job past its --mem is killed). One partition, one fake GPU (a gres with no device) so that
# jobs asking for a GPU can be scheduled and read back.
#
#   sudo scripts/local-slurm.sh start     install what is missing, configure, start; idempotent
#   sudo scripts/local-slurm.sh status    exit 0 when every daemon answers and the node is up
#   sudo scripts/local-slurm.sh stop      stop the daemons start started, and only those
#
# It writes /etc/slurm/{slurm,slurmdbd,gres}.conf (refusing to overwrite ones it did not write) and keeps its state,
# logs and pid files under /var/lib/twoscale-slurm. A daemon that already answers when start runs (a munge or MariaDB
# of the machine's own, say) is used as it is and left running by stop: start records each daemon it launches, with
# its pid file, in /var/lib/twoscale-slurm/started, and stop ends only those. TWOSCALE_SLURM_PARTITION names the
# partition (default twoscale).
set -euo pipefail

PARTITION=${TWOSCALE_SLURM_PARTITION:-twoscale}
CLUSTER=twoscale
STATE=/var/lib/twoscale-slurm
MARK="# written by twoscale's scripts/local-slurm.sh"
NODE=$(hostname -s)
CHANGED=0  # set when start rewrites a configuration file
STARTED=$STATE/started  # a line "DAEMON PIDFILE" for each daemon start launched
DAEMONS=(slurmd slurmctld slurmdbd mariadbd munged)  # the order stop ends them in

die() { echo "error: $*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || die "local-slurm.sh needs root: it installs packages, writes /etc/slurm and starts daemons"

quietly() { "$@" >>"$STATE/log/setup.log" 2>&1; }

wait_for() {  # wait_for SECONDS DESCRIPTION COMMAND...: poll COMMAND until it succeeds
    local seconds=$1 what=$2
    shift 2
    for _ in $(seq "$((seconds * 4))"); do
        "$@" >/dev/null 2>&1 && return 0
        sleep 0.25
    done
    die "$what did not come up within ${seconds}s (logs: $STATE/log/)"
}

install_packages() {
    local tool
    for tool in munged mariadbd slurmdbd slurmctld slurmd sacct; do
        command -v "$tool" >/dev/null && continue
        DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null \
            && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq slurm-wlm slurmdbd munge mariadb-server >/dev/null \
            || die "apt-get could not install slurm-wlm, slurmdbd, munge and mariadb-server"
        return
    done
}

write_config() {  # write_config PATH OWNER MODE: stdin to PATH, unless a file not written by this script is there
    local path=$1
    if [ -e "$path" ] && ! grep -qF "$MARK" "$path"; then
        die "$path exists and was not written by this script: is this machine already part of a cluster?"
    fi
    { echo "$MARK"; cat; } >"$path.tmp"
    chown "$2" "$path.tmp" && chmod "$3" "$path.tmp"
    cmp -s "$path.tmp" "$path" && rm "$path.tmp" && return
    mv "$path.tmp" "$path"
    CHANGED=1
}

configure() {
    mkdir -p "$STATE"/{log,ctld,d} /etc/slurm
    chown slurm:slurm "$STATE" "$STATE"/{log,ctld}
    [ -s "$STATE/db-password" ] || (umask 077 && head -c 18 /dev/urandom | base64 | tr -d '/+=' >"$STATE/db-password")
    local password memory hardware
    password=$(cat "$STATE/db-password")
    hardware=$(slurmd -C | head -1)  # this node as slurmd sees it: CPUs, sockets, cores, threads, RealMemory
    memory=$(sed -n 's/.*RealMemory=\([0-9]*\).*/\1/p' <<<"$hardware")
    memory=$((memory * 9 / 10))  # the rest for the daemons and the shell
    write_config /etc/slurm/slurm.conf root:root 644 <<EOF
ClusterName=$CLUSTER
SlurmctldHost=$NODE(127.0.0.1)
SlurmUser=slurm
AuthType=auth/munge
StateSaveLocation=$STATE/ctld
SlurmdSpoolDir=$STATE/d
SlurmctldPidFile=$STATE/slurmctld.pid
SlurmdPidFile=$STATE/slurmd.pid
SlurmctldLogFile=$STATE/log/slurmctld.log
SlurmdLogFile=$STATE/log/slurmd.log
# no cgroups on this machine: processes tracked through /proc, memory polled and enforced every 2 s
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/linux
JobAcctGatherFrequency=task=2
JobAcctGatherParams=OverMemoryKill
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
AccountingStorageTRES=gres/gpu
AccountingStoreFlags=job_comment
GresTypes=gpu
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
SchedulerType=sched/backfill
ReturnToService=2
MpiDefault=none
MinJobAge=300
$(sed "s/RealMemory=[0-9]*/RealMemory=$memory/" <<<"$hardware") NodeAddr=127.0.0.1 Gres=gpu:1 State=UNKNOWN
PartitionName=$PARTITION Nodes=$NODE Default=YES MaxTime=INFINITE State=UP
EOF
    write_config /etc/slurm/gres.conf root:root 644 <<EOF
NodeName=$NODE Name=gpu File=/dev/null Count=1
EOF
    write_config /etc/slurm/slurmdbd.conf slurm:slurm 600 <<EOF
AuthType=auth/munge
DbdHost=localhost
SlurmUser=slurm
StorageType=accounting_storage/mysql
StorageHost=localhost
StorageUser=slurm
StoragePass=$password
StorageLoc=slurm_acct_db
PidFile=$STATE/slurmdbd.pid
LogFile=$STATE/log/slurmdbd.log
EOF
}

launched() {  # launched DAEMON PIDFILE: start launched DAEMON, whose pid PIDFILE will hold; stop ends it
    { grep -v "^$1 " "$STARTED" 2>/dev/null || true; echo "$1 $2"; } >"$STARTED.tmp"
    mv "$STARTED.tmp" "$STARTED"
}

munge_up() { munge -n | unmunge; }
database_up() { mariadb-admin --socket=/run/mysqld/mysqld.sock ping; }
slurmdbd_up() { sacctmgr -n show cluster; }
node_state() { sinfo -h -N -n "$NODE" -p "$PARTITION" -o %t; }
node_up() { [[ "$(node_state)" =~ ^(idle|mix|alloc)$ ]]; }

start_munge() {
    munge_up >/dev/null 2>&1 && return
    mkdir -p /run/munge && chown munge:munge /run/munge
    quietly runuser -u munge -- /usr/sbin/munged --pid-file=/run/munge/munged.pid
    launched munged /run/munge/munged.pid
    wait_for 10 "munged" munge_up
}

start_database() {
    if ! database_up >/dev/null 2>&1; then
        mkdir -p /run/mysqld && chown mysql:mysql /run/mysqld
        [ -d /var/lib/mysql/mysql ] || quietly mariadb-install-db --user=mysql --datadir=/var/lib/mysql
        nohup runuser -u mysql -- mariadbd --datadir=/var/lib/mysql --socket=/run/mysqld/mysqld.sock \
            --bind-address=127.0.0.1 --pid-file=/run/mysqld/mysqld.pid >>"$STATE/log/mariadb.log" 2>&1 &
        launched mariadbd /run/mysqld/mysqld.pid
        wait_for 30 "MariaDB" database_up
    fi
    quietly mariadb --socket=/run/mysqld/mysqld.sock -e "
        CREATE DATABASE IF NOT EXISTS slurm_acct_db;
        CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY '$(cat "$STATE/db-password")';
        ALTER USER 'slurm'@'localhost' IDENTIFIED BY '$(cat "$STATE/db-password")';
        GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost';" || die "could not create Slurm's accounting database"
}

start_slurm() {
    if ! slurmdbd_up >/dev/null 2>&1; then
        quietly slurmdbd
        launched slurmdbd "$STATE/slurmdbd.pid"
        wait_for 30 "slurmdbd" slurmdbd_up
    fi
    sacctmgr -n -P show cluster format=cluster | grep -qx "$CLUSTER" || quietly sacctmgr -i add cluster "$CLUSTER"
    sacctmgr -n -P show account format=account | grep -qx twoscale || quietly sacctmgr -i add account twoscale cluster="$CLUSTER"
    local user
    for user in root ${SUDO_USER:-}; do
        [ -n "$(sacctmgr -n -P show assoc where user="$user" account=twoscale format=user)" ] \
            || quietly sacctmgr -i add user "$user" account=twoscale defaultaccount=twoscale
    done
    if scontrol ping 2>/dev/null | grep -q UP; then
        [ "$CHANGED" = 0 ] || quietly scontrol reconfigure  # running daemons read a changed configuration
    else
        quietly slurmctld
        launched slurmctld "$STATE/slurmctld.pid"
        wait_for 30 "slurmctld" bash -c "scontrol ping | grep -q UP"
    fi
    pgrep -x slurmd >/dev/null || { quietly slurmd; launched slurmd "$STATE/slurmd.pid"; }
    wait_for 30 "slurmd" bash -c "[ -n \"\$(sinfo -h -N -n $NODE -o %t)\" ]"
    # a node drained by an earlier configuration (or a killed slurmd) comes back into service
    [[ "$(node_state)" =~ ^(drain|drng|down|inval) ]] && quietly scontrol update nodename="$NODE" state=resume
    wait_for 30 "the node $NODE" node_up
}

status() {
    local down=0
    munge_up >/dev/null 2>&1 && echo "munge: up" || { echo "munge: down"; down=1; }
    database_up >/dev/null 2>&1 && echo "mariadb: up" || { echo "mariadb: down"; down=1; }
    slurmdbd_up >/dev/null 2>&1 && echo "slurmdbd: up" || { echo "slurmdbd: down"; down=1; }
    scontrol ping 2>/dev/null | grep -q UP && echo "slurmctld: up" || { echo "slurmctld: down"; down=1; }
    node_up 2>/dev/null && echo "node $NODE in partition $PARTITION: up" || { echo "node $NODE: down"; down=1; }
    return $down
}

stop_daemon() {  # stop_daemon NAME PIDFILE: end the process PIDFILE names if it is still NAME (its pid not reused)
    local pid
    pid=$(cat "$2" 2>/dev/null) || return 1
    [[ $pid =~ ^[0-9]+$ && "$(cat "/proc/$pid/comm" 2>/dev/null)" == "$1" ]] || return 1
    kill "$pid" 2>/dev/null || return 1
    for _ in $(seq 120); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.25; done
    kill -9 "$pid" 2>/dev/null || true
}

stop() {
    local name pidfile stopped=() kept=()
    for name in "${DAEMONS[@]}"; do
        pidfile=$(sed -n "s/^$name //p" "$STARTED" 2>/dev/null || true)
        if [ -n "$pidfile" ] && stop_daemon "$name" "$pidfile"; then
            stopped+=("$name")
        elif pgrep -x "$name" >/dev/null; then
            kept+=("$name")
        fi
    done
    rm -f "$STARTED"
    echo "stopped: ${stopped[*]:-nothing}"
    [ ${#kept[@]} = 0 ] || echo "left running, not started by start: ${kept[*]}"
}

case "${1:-}" in
    start)
        install_packages
        configure
        start_munge
        start_database
        start_slurm
        echo "Slurm is up: partition $PARTITION on $NODE ($(sinfo -h -p "$PARTITION" -o '%c CPUs, %m MB, %G'))"
        ;;
    status) status ;;
    stop) [ -d "$STATE" ] && stop || echo "not started" ;;
    *) die "usage: scripts/local-slurm.sh start|status|stop" ;;
esac
