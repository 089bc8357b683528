#!/usr/bin/env bash
# A shared MLflow tracking server on this machine, backed by PostgreSQL: what a cluster's stage jobs log to
# instead of the SQLite file, which parallel writers on a network file system corrupt.
set -Eeuo pipefail

usage() {
    cat <<EOF
usage: scripts/local-mlflow-server.sh start|stop|status

  start   install PostgreSQL if missing (apt-get), start a PostgreSQL cluster of its own and an MLflow
          server on it, both bound to 127.0.0.1; print the line to export, e.g.
            eval "\$(scripts/local-mlflow-server.sh start)"
          Running it again while both are up changes nothing.
  stop    stop the MLflow server and the PostgreSQL cluster (data and artifacts are kept)
  status  say whether each is up; exit 0 if both are

State (database, artifacts, logs, pid file) lives in .cluster/mlflow/ of the repository.
Environment: MLFLOW_PORT (5050), MLFLOW_PG_PORT (5433), MLFLOW_WORKERS (4), MLFLOW_START_TIMEOUT (180 s).
EOF
}

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
STATE=$ROOT/.cluster/mlflow
PGDATA=$STATE/postgres
PGPASS=$STATE/pgpass
PIDFILE=$STATE/server.pid
SERVER_LOG=$STATE/server.log
SETUP_LOG=$STATE/setup.log
VENV=$ROOT/.venv
PORT=${MLFLOW_PORT:-5050}
PG_PORT=${MLFLOW_PG_PORT:-5433}
WORKERS=${MLFLOW_WORKERS:-4}
TIMEOUT=${MLFLOW_START_TIMEOUT:-180}
DB=mlflow  # the database and the role that owns it
URI=http://127.0.0.1:$PORT

started=()  # what this `start` brought up, taken down again if it fails

die() {
    echo "error: $*" >&2
    exit 1
}

trap 'die "$BASH_COMMAND failed (exit $?)${log:+; see $log}"' ERR
trap 'rollback $?' EXIT

rollback() {
    (( $1 != 0 )) || return 0
    trap - ERR
    local i
    for ((i = ${#started[@]} - 1; i >= 0; i--)); do
        "stop_${started[i]}" || true
    done
}

# PostgreSQL refuses to run as root: as root, its commands run as the `postgres` user.
as_owner() {
    if (( EUID == 0 )); then
        runuser -u postgres -- "$@"
    else
        "$@"
    fi
}

# Debian keeps PostgreSQL's programs off PATH, a directory per major version: the cluster's, else the newest.
pg_bin() {
    local version dir
    version=$(cat "$PGDATA/PG_VERSION" 2>/dev/null || true)
    dir=/usr/lib/postgresql/$version/bin
    if [[ -z $version || ! -x $dir/pg_ctl ]]; then
        dir=$(find /usr/lib/postgresql -mindepth 2 -maxdepth 2 -name bin 2>/dev/null | sort -V | tail -n 1) \
            || true
    fi
    echo "${dir:-$(dirname "$(command -v pg_ctl || echo /missing/pg_ctl)")}"
}

install_postgresql() {
    [[ -x $(pg_bin)/pg_ctl ]] && return 0
    (( EUID == 0 )) || die "PostgreSQL is not installed: run as root, or install the postgresql package"
    echo "note: installing postgresql with apt-get (log: $SETUP_LOG)" >&2
    log=$SETUP_LOG
    export DEBIAN_FRONTEND=noninteractive
    if ! apt-get install -y --no-install-recommends postgresql >>"$SETUP_LOG" 2>&1; then
        apt-get update >>"$SETUP_LOG" 2>&1
        apt-get install -y --no-install-recommends postgresql >>"$SETUP_LOG" 2>&1
    fi
    [[ -x $(pg_bin)/pg_ctl ]] || die "apt-get installed postgresql, but no pg_ctl was found; see $SETUP_LOG"
    unset log
}

check_venv() {
    [[ -x $VENV/bin/mlflow ]] || die "no mlflow in $VENV: run make setup"
    "$VENV/bin/python" -c "import psycopg" 2>/dev/null || die "no psycopg in $VENV: run make setup-cluster"
}

port_taken() {
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

pg_ctl() {
    as_owner "$(pg_bin)/pg_ctl" -D "$PGDATA" "$@"
}

postgres_up() {
    [[ -f $PGDATA/PG_VERSION ]] && pg_ctl status >/dev/null 2>&1
}

psql_admin() {
    as_owner "$(pg_bin)/psql" -h "$PGDATA" -p "$PG_PORT" -d postgres -v ON_ERROR_STOP=1 -qtA "$@" \
        2>>"$SETUP_LOG"
}

init_cluster() {
    [[ -f $PGDATA/PG_VERSION ]] && return 0
    (( EUID != 0 )) || runuser -u postgres -- test -x "$STATE" \
        || die "the postgres user cannot reach $STATE (a parent directory is private to its owner)"
    log=$SETUP_LOG
    mkdir -p "$PGDATA"
    (( EUID != 0 )) || chown postgres: "$PGDATA"
    as_owner "$(pg_bin)/initdb" -D "$PGDATA" --encoding=UTF8 --no-locale --auth-local=peer \
        --auth-host=scram-sha-256 >>"$SETUP_LOG" 2>&1
    unset log
}

start_postgres() {
    postgres_up && return 0
    ! port_taken "$PG_PORT" || die "port $PG_PORT is taken by another program: set MLFLOW_PG_PORT"
    local socket=$PGDATA/.s.PGSQL.$PG_PORT
    (( ${#socket} < 108 )) || die "the socket path $socket is too long for a Unix socket: move the repository"
    log=$STATE/postgres.log
    touch "$log"
    (( EUID != 0 )) || chown postgres: "$log"
    started+=(postgres)
    # the socket lives in the data directory: only its owner (peer authentication) administers the cluster
    pg_ctl -l "$log" -w -t 60 start \
        -o "-c listen_addresses=127.0.0.1 -c port=$PG_PORT -c unix_socket_directories='$PGDATA'" \
        >>"$SETUP_LOG" 2>&1
    unset log
}

stop_postgres() {
    postgres_up || return 0
    pg_ctl -m fast -w -t 60 stop >>"$SETUP_LOG" 2>&1
}

# The role's password is made once and kept in a pgpass file, read by libpq: it never shows in a command line.
ensure_database() {
    local password made=0
    log=$SETUP_LOG
    if [[ ! -s $PGPASS ]]; then
        (umask 077 && echo "127.0.0.1:*:$DB:$DB:$(openssl rand -hex 24)" >"$PGPASS")
        made=1
    fi
    password=$(cut -d: -f5 "$PGPASS")
    if [[ -z $(psql_admin -c "SELECT 1 FROM pg_roles WHERE rolname = '$DB'") ]]; then
        echo "CREATE ROLE $DB LOGIN PASSWORD '$password'" | psql_admin
    elif (( made )); then
        echo "ALTER ROLE $DB PASSWORD '$password'" | psql_admin
    fi
    if [[ -z $(psql_admin -c "SELECT 1 FROM pg_database WHERE datname = '$DB'") ]]; then
        psql_admin -c "CREATE DATABASE $DB OWNER $DB"
    fi
    unset log
}

server_pid() {
    local pid
    pid=$(cat "$PIDFILE" 2>/dev/null) || return 1
    [[ $pid =~ ^[0-9]+$ ]] && tr '\0' ' ' 2>/dev/null <"/proc/$pid/cmdline" | grep -q "mlflow server" \
        && echo "$pid"
}

healthy() {
    [[ $(curl -fsS --max-time 5 "$URI/health" 2>/dev/null) == OK ]]
}

start_server() {
    if ! server_pid >/dev/null; then
        rm -f "$PIDFILE"
        ! port_taken "$PORT" || die "port $PORT is taken by another program: set MLFLOW_PORT"
        mkdir -p "$STATE/artifacts"
        started+=(server)
        # setsid: the server and its uvicorn workers form one process group, stopped together. No GenAI jobs
        # here: their runner and queue consumers would take a gigabyte of memory for nothing.
        PGPASSFILE=$PGPASS MLFLOW_DISABLE_TELEMETRY=true MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false \
            setsid nohup "$VENV/bin/mlflow" server \
            --backend-store-uri "postgresql+psycopg://$DB@127.0.0.1:$PG_PORT/$DB" \
            --artifacts-destination "$STATE/artifacts" \
            --host 127.0.0.1 --port "$PORT" --workers "$WORKERS" >>"$SERVER_LOG" 2>&1 </dev/null &
        echo $! >"$PIDFILE"
    fi
    wait_healthy
}

wait_healthy() {
    local deadline=$((SECONDS + TIMEOUT))
    until healthy; do
        server_pid >/dev/null || die "mlflow server exited; see $SERVER_LOG"
        (( SECONDS < deadline )) || die "mlflow server gave no answer on $URI in ${TIMEOUT}s; see $SERVER_LOG"
        sleep 1
    done
}

stop_server() {
    local pid
    if pid=$(server_pid); then
        kill -TERM -- "-$pid" 2>/dev/null || true
        for _ in $(seq 30); do
            kill -0 -- "-$pid" 2>/dev/null || break
            sleep 1
        done
        kill -KILL -- "-$pid" 2>/dev/null || true
    fi
    rm -f "$PIDFILE"
}

start() {
    check_venv
    mkdir -p "$STATE"
    install_postgresql
    init_cluster
    start_postgres
    ensure_database
    start_server
    echo "export MLFLOW_TRACKING_URI=$URI"
}

stop() {
    stop_server
    stop_postgres || die "PostgreSQL did not stop; see $SETUP_LOG and $STATE/postgres.log"
}

status() {
    local up=0 pid
    if postgres_up; then
        echo "postgresql: up on 127.0.0.1:$PG_PORT ($PGDATA)"
    else
        echo "postgresql: down"
        up=1
    fi
    if pid=$(server_pid) && healthy; then
        echo "mlflow server: up on $URI (pid $pid)"
    else
        echo "mlflow server: down${pid:+ (pid $pid does not answer)}"
        up=1
    fi
    return "$up"
}

case ${1:-} in
    start | stop) "$1" ;;
    status) status || exit 1 ;;
    -h | --help | help) usage ;;
    *)
        usage >&2
        exit 2
        ;;
esac
