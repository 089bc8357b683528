#!/usr/bin/env bash
# A shared MLflow tracking server on this machine, backed by PostgreSQL: what a cluster's stage jobs log to
# instead of the SQLite file, which parallel writers on a network file system corrupt.
set -Eeuo pipefail

usage() {
    cat <<EOF
usage: scripts/local-mlflow-server.sh start|stop|status

  start   install PostgreSQL if missing (apt-get), start a PostgreSQL cluster of its own (bound to 127.0.0.1:
          only the server talks to it) and an MLflow server on it, bound to MLFLOW_HOST; print the line to
          export, with the address the nodes use, e.g.
            eval "\$(scripts/local-mlflow-server.sh start)"
          Running it again while both are up changes nothing; asking for another address, port or options
          while the server is up is refused (stop it first).
  stop    stop the MLflow server and the PostgreSQL cluster (data and artifacts are kept)
  status  say whether each is up; exit 0 if both are

State (database, artifacts, logs, pid file) lives in .cluster/mlflow/ of the repository.
Environment:
  MLFLOW_HOST         the address the server binds (127.0.0.1): 127.0.0.1 reaches this machine only, which
                      compute nodes cannot; for them, this machine's address on the cluster's network (or
                      0.0.0.0, every interface)
  MLFLOW_PUBLIC_HOST  the name or address the nodes use, put in the printed MLFLOW_TRACKING_URI (MLFLOW_HOST, or
                      this machine's fully qualified name when MLFLOW_HOST is 0.0.0.0 or ::)
  MLFLOW_SERVER_ALLOWED_HOSTS  Host headers the server answers (MLflow's own setting); by default, for a bind
                      other than 127.0.0.1, MLFLOW_PUBLIC_HOST, localhost and 127.0.0.1: add any other name the
                      nodes use (a request under another name gets 403 while /health still answers)
  MLFLOW_SERVER_OPTS  more options for "mlflow server", split on spaces (e.g. --app-name basic-auth)
  MLFLOW_PORT (5050), MLFLOW_PG_PORT (5433), MLFLOW_WORKERS (4), MLFLOW_START_TIMEOUT (180 s)

Securing a bind other than 127.0.0.1: as started here, the server has no authentication, so whoever reaches its
port can read, change and delete every run. Do one of these, best in this order:
  - bind only the cluster's private interface and let only the compute nodes reach the port (a firewall rule,
    e.g. nft/iptables accepting the nodes' subnet on MLFLOW_PORT and dropping the rest);
  - keep 127.0.0.1 and put a reverse proxy with TLS and authentication (nginx, Caddy) in front, on an address the
    nodes reach; the jobs send MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD as HTTP basic auth;
  - MLflow's own basic auth: MLFLOW_SERVER_OPTS="--app-name basic-auth", which needs Flask-WTF in .venv
    (pip install 'mlflow[auth]'; not part of make setup-cluster), MLFLOW_FLASK_SERVER_SECRET_KEY (any long random
    string) and, the first time, MLFLOW_AUTH_ADMIN_PASSWORD for the admin user; its user database is
    .cluster/mlflow/basic_auth.db. The jobs then export MLFLOW_TRACKING_USERNAME=admin (or a user made through
    its API) and MLFLOW_TRACKING_PASSWORD. Plain HTTP: the password crosses the network in clear, so use it on a
    private network only, or behind a TLS proxy.
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
HOST=${MLFLOW_HOST:-127.0.0.1}
BINDFILE=$STATE/server.bind  # how the running server was started: its address, the URI printed, its options
DB=mlflow  # the database and the role that owns it
read -ra SERVER_OPTS <<<"${MLFLOW_SERVER_OPTS:-}"

# An address in a URL: an IPv6 address in brackets.
url_host() {
    if [[ $1 == *:* ]]; then echo "[$1]"; else echo "$1"; fi
}

case $HOST in
    0.0.0.0) LOCAL_HOST=127.0.0.1 ;;  # the server on every interface: this machine asks it on the loopback
    :: | "[::]") HOST=:: LOCAL_HOST=::1 ;;
    *) LOCAL_HOST=${HOST#[} LOCAL_HOST=${LOCAL_HOST%]} ;;
esac
case $HOST in
    0.0.0.0 | ::) PUBLIC_HOST=${MLFLOW_PUBLIC_HOST:-$(hostname -f 2>/dev/null || hostname)} ;;
    *) PUBLIC_HOST=${MLFLOW_PUBLIC_HOST:-$LOCAL_HOST} ;;
esac
LOCAL_URI=http://$(url_host "$LOCAL_HOST"):$PORT  # what this script checks the server's health on
URI=http://$(url_host "$PUBLIC_HOST"):$PORT       # what the jobs log to
case $LOCAL_HOST in
    127.* | ::1 | localhost) LOOPBACK=1 ;;
    *) LOOPBACK=0 ;;
esac
# Whether this call asks for a particular server; if not, a later `start` takes the one that runs as it is.
ASKED=${MLFLOW_HOST+1}${MLFLOW_PUBLIC_HOST+1}${MLFLOW_PORT+1}${MLFLOW_SERVER_OPTS+1}${MLFLOW_SERVER_ALLOWED_HOSTS+1}
# MLflow answers only the Host headers it allows (localhost and private addresses by default): for the nodes, the
# name they use, unless MLFLOW_SERVER_ALLOWED_HOSTS says otherwise (mlflow reads it itself).
if [[ $HOST != 127.0.0.1 && -z ${MLFLOW_SERVER_ALLOWED_HOSTS:-} ]]; then
    host=$(url_host "$PUBLIC_HOST")
    export MLFLOW_SERVER_ALLOWED_HOSTS="$host,$host:$PORT,localhost,localhost:$PORT,127.0.0.1,127.0.0.1:$PORT"
    unset host
fi
BIND="$HOST $URI $LOCAL_URI ${MLFLOW_SERVER_ALLOWED_HOSTS:-} ${SERVER_OPTS[*]}"

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

port_taken() {  # port_taken PORT [ADDRESS]
    (exec 3<>"/dev/tcp/${2:-127.0.0.1}/$1") 2>/dev/null
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
    [[ $(curl -fsS --max-time 5 "$(bind_field 3)/health" 2>/dev/null) == OK ]]
}

# How the running server was started: its address, the URI printed, the URI this machine asks, the Host headers
# allowed and the options. A server started before these were recorded is on 127.0.0.1.
running_bind() {
    cat "$BINDFILE" 2>/dev/null || echo "127.0.0.1 http://127.0.0.1:$PORT http://127.0.0.1:$PORT  "
}

bind_field() {  # bind_field N: the Nth of running_bind's fields
    running_bind | cut -d' ' -f"$1"
}

start_server() {
    if server_pid >/dev/null; then
        [[ -z $ASKED || $(running_bind) == "$BIND" ]] \
            || die "the mlflow server is up on $(bind_field 1) for $(bind_field 2), not as asked here" \
                "(MLFLOW_HOST, MLFLOW_PUBLIC_HOST, MLFLOW_PORT, MLFLOW_SERVER_OPTS or MLFLOW_SERVER_ALLOWED_HOSTS" \
                "differ): run stop first"
    else
        rm -f "$PIDFILE" "$BINDFILE"
        ! port_taken "$PORT" "$LOCAL_HOST" || die "port $PORT is taken by another program: set MLFLOW_PORT"
        if (( ! LOOPBACK )) && [[ " ${SERVER_OPTS[*]} " != *basic-auth* ]]; then
            echo "warning: the mlflow server listens on $HOST:$PORT without authentication: restrict who reaches" \
                "it (scripts/local-mlflow-server.sh --help)" >&2
        fi
        mkdir -p "$STATE/artifacts"
        started+=(server)
        echo "$BIND" >"$BINDFILE"
        # setsid: the server and its uvicorn workers form one process group, stopped together. No GenAI jobs
        # here: their runner and queue consumers would take a gigabyte of memory for nothing. Run from the state
        # folder: what the server keeps relative to its working directory (basic auth's user database) lands there.
        (
            cd "$STATE"
            PGPASSFILE=$PGPASS MLFLOW_DISABLE_TELEMETRY=true MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false \
                exec setsid nohup "$VENV/bin/mlflow" server \
                --backend-store-uri "postgresql+psycopg://$DB@127.0.0.1:$PG_PORT/$DB" \
                --artifacts-destination "$STATE/artifacts" \
                --host "$HOST" --port "$PORT" --workers "$WORKERS" "${SERVER_OPTS[@]}" \
                >>"$SERVER_LOG" 2>&1 </dev/null
        ) &
        echo $! >"$PIDFILE"
    fi
    wait_healthy
}

wait_healthy() {
    local deadline=$((SECONDS + TIMEOUT))
    until healthy; do
        server_pid >/dev/null || die "mlflow server exited; see $SERVER_LOG"
        (( SECONDS < deadline )) || die "mlflow server gave no answer on $(bind_field 3) in ${TIMEOUT}s; see $SERVER_LOG"
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
    rm -f "$PIDFILE" "$BINDFILE"
}

start() {
    check_venv
    mkdir -p "$STATE"
    install_postgresql
    init_cluster
    start_postgres
    ensure_database
    start_server
    echo "export MLFLOW_TRACKING_URI=$(bind_field 2)"
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
        echo "mlflow server: up on $(bind_field 2) (pid $pid, bound to $(bind_field 1))"
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
