#!/usr/bin/env bash
# A throwaway PostgreSQL cluster (Debian's `postgresql` package) for the tests of the
# consumer kit's PostgresStore and the examples: initdb into a fresh directory, the
# server on 127.0.0.1 only, one database, password (SCRAM) authentication.
#
#   scripts/postgres.sh up       initdb a fresh cluster and start it (no-op if running)
#   scripts/postgres.sh down     stop it and delete its directory
#   scripts/postgres.sh status   exit 0 if running and answering, else 1
#   scripts/postgres.sh dsn      print the connection string (libpq key=value form)
#   scripts/postgres.sh logs     tail its log (default: -n 100)
#
# Environment:
#   POSTGRES_STATE_DIR  its directory (default .postgres, relative to the repo root). When
#                       run as root the server runs as the user `postgres` (the server
#                       refuses root), so the directory must be one that user can reach:
#                       not under a 0700 directory of root's, such as pytest's tmp dirs
#   POSTGRES_PORT       TCP port on 127.0.0.1 (default 25432)
#   POSTGRES_BIN        the directory of initdb/pg_ctl/postgres (default: the newest
#                       /usr/lib/postgresql/*/bin, else those on PATH)
#   POSTGRES_READY_TIMEOUT  seconds to wait for it to answer (default 60)
#
# The password is made up by `up` and kept in <state dir>/password (mode 600); `dsn`
# prints it. Needs Debian's `postgresql` package (scripts/ensure-test-tools.sh installs it).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

STATE_DIR="${POSTGRES_STATE_DIR:-.postgres}"
case "$STATE_DIR" in /*) ;; *) STATE_DIR="$ROOT/$STATE_DIR" ;; esac
PORT="${POSTGRES_PORT:-25432}"
READY_TIMEOUT="${POSTGRES_READY_TIMEOUT:-60}"
DATA="$STATE_DIR/data"
LOG_FILE="$STATE_DIR/postgres.log"
PASSWORD_FILE="$STATE_DIR/password"
DB_USER="bridge"
DB_NAME="bridge"
# shellcheck source=scripts/service-common.sh
source "$ROOT/scripts/service-common.sh"

log() { echo "postgres.sh: $*" >&2; }
die() { log "ERROR: $*"; exit 1; }

bin_dir() {
    if [[ -n "${POSTGRES_BIN:-}" ]]; then echo "$POSTGRES_BIN"; return; fi
    # Debian keeps the server's programs out of PATH, one directory per major version.
    local newest
    newest="$(compgen -G '/usr/lib/postgresql/*/bin/initdb' | sort -V | tail -n 1 || true)"
    if [[ -n "$newest" ]]; then dirname "$newest"; return; fi
    command -v initdb >/dev/null 2>&1 && dirname "$(command -v initdb)" && return
    die "initdb not found: install Debian's postgresql package (scripts/ensure-test-tools.sh)"
}

# The server and initdb refuse to run as root: then they run as `postgres`, the user
# Debian's package creates.
as_owner() {
    if [[ "$(id -u)" -ne 0 ]]; then "$@"; return; fi
    id postgres >/dev/null 2>&1 || die "running as root and there is no user 'postgres' (Debian's postgresql package makes it)"
    if command -v runuser >/dev/null 2>&1; then
        runuser -u postgres -- "$@"
    else
        setpriv --reuid=postgres --regid=postgres --init-groups -- "$@"
    fi
}

pg_ctl() { as_owner "$(bin_dir)/pg_ctl" -D "$DATA" "$@"; }

dsn() {
    [[ -f "$PASSWORD_FILE" ]] || die "no cluster in $STATE_DIR (run: scripts/postgres.sh up)"
    echo "host=127.0.0.1 port=$PORT dbname=$DB_NAME user=$DB_USER password=$(cat "$PASSWORD_FILE")"
}

answers() {
    [[ -f "$PASSWORD_FILE" ]] || return 1
    "$(bin_dir)/pg_isready" -q -h 127.0.0.1 -p "$PORT" -d "$DB_NAME" -U "$DB_USER" -t 2
}

running() { [[ -f "$DATA/postmaster.pid" ]] && pg_ctl status >/dev/null 2>&1; }

up() {
    if running && answers; then log "already running on 127.0.0.1:$PORT"; return 0; fi
    [[ -d "$DATA" ]] && { pg_ctl stop -m immediate >/dev/null 2>&1 || true; rm -rf "$DATA"; }
    port_open "$PORT" && die "port $PORT is taken by something else (set POSTGRES_PORT)"
    local bin start=$SECONDS
    bin="$(bin_dir)"
    mkdir -p "$STATE_DIR"
    umask 077
    head -c 18 /dev/urandom | base64 | tr '+/' '-_' >"$PASSWORD_FILE"
    local pwfile="$STATE_DIR/.initdb-password"
    cp "$PASSWORD_FILE" "$pwfile"
    if [[ "$(id -u)" -eq 0 ]]; then
        # The server's user owns the cluster; root keeps the password file of `dsn`.
        chown postgres "$STATE_DIR" "$pwfile"
        touch "$LOG_FILE" && chown postgres "$LOG_FILE"
    fi
    as_owner "$bin/initdb" -D "$DATA" -U "$DB_USER" --pwfile="$pwfile" -A scram-sha-256 -E UTF8 \
        --no-locale >"$STATE_DIR/initdb.log" 2>&1 || { rm -f "$pwfile"; cat "$STATE_DIR/initdb.log" >&2; die "initdb failed"; }
    rm -f "$pwfile"
    # The server must not inherit the state lock (fd 8) nor our output: it outlives us.
    # Loopback TCP only, the socket in the cluster's own directory (not /var/run/postgresql,
    # which may not exist or belong to a system cluster); fsync stays on: the tests kill
    # consumers, not the server, and what they check is what a real server keeps.
    pg_ctl -l "$LOG_FILE" -w -t "$READY_TIMEOUT" \
        -o "-c listen_addresses=127.0.0.1 -p $PORT -k $DATA -c max_connections=50" start \
        </dev/null >/dev/null 2>>"$STATE_DIR/pg_ctl.log" 8>&- ||
        { tail -n 30 "$LOG_FILE" >&2; die "the server did not start"; }
    PGPASSWORD="$(cat "$PASSWORD_FILE")" "$bin/psql" -q -h 127.0.0.1 -p "$PORT" -U "$DB_USER" -d postgres \
        -c "CREATE DATABASE $DB_NAME" >/dev/null || die "CREATE DATABASE failed"
    answers || die "the server started but does not answer on 127.0.0.1:$PORT"
    log "ready in $((SECONDS - start))s on 127.0.0.1:$PORT"
    echo "postgres up at 127.0.0.1:$PORT"
}

down() {
    if [[ -d "$DATA" ]]; then pg_ctl stop -m fast -t 30 >/dev/null 2>&1 || pg_ctl stop -m immediate >/dev/null 2>&1 || true; fi
    rm -rf "$STATE_DIR"
}

cmd="${1:-}"
case "$cmd" in
    up) lock_state; up ;;
    down) lock_state; down ;;
    status) running && answers ;;
    dsn) dsn ;;
    logs) shift; tail "${@:--n 100}" "$LOG_FILE" ;;
    *) usage; exit 2 ;;
esac
