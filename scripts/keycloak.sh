#!/usr/bin/env bash
# Local Keycloak (an OpenID Connect provider issuing real signed tokens) for the
# tests that involve identity, run from the distribution keycloak/pom.xml
# resolves from Maven Central. Development mode: HTTP on loopback only, an
# embedded H2 database in the state dir, the realm file imported at start.
#
#   scripts/keycloak.sh up            start a fresh Keycloak and import the realm (no-op if running)
#   scripts/keycloak.sh down          stop it and delete its state (database, realm, logs)
#   scripts/keycloak.sh status        exit 0 if running and answering, else 1
#   scripts/keycloak.sh logs [tail args] tail its log (default: -n 100)
#
# Environment:
#   KEYCLOAK_STATE_DIR       state dir, relative to the repo root (default .keycloak)
#   KEYCLOAK_PORT            HTTP port on 127.0.0.1 (default 19180); the issuer of
#                            realm R is http://127.0.0.1:<port>/realms/R
#   KEYCLOAK_REALM_FILE      realm JSON imported at start (default tests/fixtures/keycloak/realm.json)
#   KEYCLOAK_ADMIN           bootstrap admin user of the master realm (default admin)
#   KEYCLOAK_ADMIN_PASSWORD  its password; when unset `up` makes one up and writes it
#                            to <state dir>/admin-password (mode 600)
#   KEYCLOAK_READY_TIMEOUT   seconds to wait for readiness (default 240: the first start
#                            on a busy 2-core machine also builds the server, ~1 min)
#   KEYCLOAK_HEAP_OPTS       default "-Xms64m -Xmx512m" (kc.sh's own default outside containers)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

STATE_DIR="${KEYCLOAK_STATE_DIR:-.keycloak}"
case "$STATE_DIR" in /*) ;; *) STATE_DIR="$ROOT/$STATE_DIR" ;; esac
PORT="${KEYCLOAK_PORT:-19180}"
REALM_FILE="${KEYCLOAK_REALM_FILE:-tests/fixtures/keycloak/realm.json}"
case "$REALM_FILE" in /*) ;; *) REALM_FILE="$ROOT/$REALM_FILE" ;; esac
ADMIN="${KEYCLOAK_ADMIN:-admin}"
ADMIN_PASSWORD="${KEYCLOAK_ADMIN_PASSWORD:-}"
READY_TIMEOUT="${KEYCLOAK_READY_TIMEOUT:-240}"
HEAP_OPTS="${KEYCLOAK_HEAP_OPTS:--Xms64m -Xmx512m}"

KC_DIR="$ROOT/keycloak"
DIST_ROOT="$KC_DIR/dist"
MARKER="$DIST_ROOT/.resolved"          # sha256 of pom.xml after a successful unpack
RESOLVE_LOCK="$KC_DIR/.resolve.lock"
# Held while a server starts: its first start in a mode writes the build into
# the shared distribution (lib/quarkus), which two starts must not do at once.
BUILD_LOCK="$KC_DIR/.build.lock"
# Keycloak keeps its database, import dir and transaction log under its home
# dir. Each state dir gets a home of its own: links to the shared distribution
# and a private data/.
HOME_DIR="$STATE_DIR/home"
PID_FILE="$STATE_DIR/keycloak.pid"
OUT_FILE="$STATE_DIR/keycloak.out"     # the server's stdout/stderr: its log
PASSWORD_FILE="$STATE_DIR/admin-password"
URL="http://127.0.0.1:$PORT"
# shellcheck source=scripts/service-common.sh
source "$ROOT/scripts/service-common.sh"

log() { echo "keycloak.sh: $*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# --- distribution ---------------------------------------------------------------
pom_hash() { sha256sum "$KC_DIR/pom.xml" | cut -d' ' -f1; }

dist_dir() { compgen -G "$DIST_ROOT/keycloak-*/bin/kc.sh" | head -n 1 | xargs -r dirname | xargs -r dirname; }

dist_ok() {
    [[ -f "$MARKER" && "$(cat "$MARKER")" == "$(pom_hash)" && -n "$(dist_dir)" ]]
}

resolve_dist() {
    dist_ok && return 0
    command -v mvn >/dev/null 2>&1 || die "keycloak/dist is missing or stale and mvn is not installed"
    (
        if command -v flock >/dev/null 2>&1; then exec 9>"$RESOLVE_LOCK"; flock 9; fi
        dist_ok && exit 0
        log "resolving the Keycloak distribution with Maven into keycloak/dist ..."
        local start=$SECONDS
        # Unpack from scratch: a half-unpacked or older distribution must not mix in.
        rm -rf "$DIST_ROOT"
        (cd "$KC_DIR" && mvn -q -B dependency:unpack) >&2 || die "mvn dependency:unpack failed (see output above)"
        [[ -n "$(dist_dir)" ]] || die "bin/kc.sh missing after the mvn run"
        pom_hash >"$MARKER"
        log "distribution unpacked in $((SECONDS - start))s"
    )
}

# --- process / readiness helpers ------------------------------------------------
# Print the pid of the server started by this script for this state dir, if alive.
# (kc.sh, which forwards signals to its java, or the java it exec'd after a build.)
server_pid() {
    [[ -f "$PID_FILE" ]] || return 1
    local pid args
    pid="$(cat "$PID_FILE" 2>/dev/null)" || return 1
    [[ "$pid" =~ ^[0-9]+$ ]] || return 1
    pid_alive "$pid" || return 1
    # Guard against pid reuse: must be Keycloak running on our home dir.
    args="$(ps -ww -o args= -p "$pid" 2>/dev/null)" || return 1
    [[ "$args" == *"kc.home.dir=$HOME_DIR"* ]] || return 1
    echo "$pid"
}

# The master realm's discovery document answers once the server listens, which
# it does only after the realm import finished.
answering() {
    curl -sf -o /dev/null --max-time 5 "$URL/realms/master/.well-known/openid-configuration"
}

show_failure_log() {
    if [[ -s "$OUT_FILE" ]]; then
        log "---- last 60 lines of $OUT_FILE ----"
        tail -n 60 "$OUT_FILE" >&2
    fi
}

# --- start / stop ---------------------------------------------------------------
make_home() {
    local dist="$1" d
    rm -rf "$HOME_DIR"
    mkdir -p "$HOME_DIR/data/import"
    for d in bin conf lib providers themes; do ln -s "$dist/$d" "$HOME_DIR/$d"; done
    cp "$REALM_FILE" "$HOME_DIR/data/import/realm.json"
}

start_server() {
    local dist
    dist="$(dist_dir)"
    make_home "$dist"
    : >"$OUT_FILE"
    rm -f "$PID_FILE"
    local start=$SECONDS
    exec 7>"$BUILD_LOCK"
    if command -v flock >/dev/null 2>&1; then flock 7; fi
    # New session (setsid) so the server survives the calling shell and `down`
    # can signal kc.sh and its java as one group; the inner shell records its
    # own pid and then execs kc.sh (same pid). A -D given to kc.sh comes after
    # its own on the java command line, so kc.home.dir points at our home.
    KC_BOOTSTRAP_ADMIN_USERNAME="$ADMIN" KC_BOOTSTRAP_ADMIN_PASSWORD="$ADMIN_PASSWORD" \
        JAVA_OPTS_KC_HEAP="$HEAP_OPTS" \
        setsid bash -c 'echo $$ >"$0"; exec "$@"' "$PID_FILE" \
        "$dist/bin/kc.sh" "-Dkc.home.dir=$HOME_DIR" start-dev --import-realm \
        --http-host=127.0.0.1 --http-port="$PORT" --hostname="$URL" \
        </dev/null >>"$OUT_FILE" 2>&1 7>&- 8>&- 9>&- &
    local i pid=""
    for i in $(seq 50); do [[ -s "$PID_FILE" ]] && break; sleep 0.1; done
    pid="$(cat "$PID_FILE" 2>/dev/null || true)"
    [[ -n "$pid" ]] || die "Keycloak did not start (no pid file)"

    local deadline=$((SECONDS + READY_TIMEOUT)) building=1
    while ! answering; do
        if ! pid_alive "$pid"; then
            show_failure_log
            rm -f "$PID_FILE"
            die "Keycloak (pid $pid) exited during startup"
        fi
        if ((SECONDS >= deadline)); then
            show_failure_log
            stop_server
            die "Keycloak not ready within ${READY_TIMEOUT}s on $URL (stopped it; log above)"
        fi
        # Past its build the server reads the distribution only: let the next start in.
        if ((building)) && grep -q "Running the server" "$OUT_FILE" 2>/dev/null; then
            exec 7>&-
            building=0
        fi
        sleep 0.5
    done
    exec 7>&-
    log "Keycloak ready in $((SECONDS - start))s (pid $pid)"
}

stop_server() {
    local pid
    if ! pid="$(server_pid)"; then
        rm -f "$PID_FILE"
        return 0
    fi
    # The session's process group: kc.sh and the java it started.
    terminate "$pid" Keycloak
    rm -f "$PID_FILE"
}

# --- subcommands ----------------------------------------------------------------
cmd_up() {
    lock_state
    local pid
    if pid="$(server_pid)"; then
        if answering; then
            echo "keycloak up at $URL (already running, pid $pid)"
            return 0
        fi
        log "Keycloak pid $pid is alive but not answering on $URL; starting it from scratch"
        stop_server
    fi
    [[ "$PORT" =~ ^[0-9]+$ ]] || die "KEYCLOAK_PORT must be a port number, got '$PORT'"
    [[ -r "$REALM_FILE" ]] || die "realm file $REALM_FILE is not readable (KEYCLOAK_REALM_FILE)"
    command -v java >/dev/null 2>&1 || [[ -n "${JAVA_HOME:-}" ]] || die "Keycloak needs Java 17 or later (no java on PATH, no JAVA_HOME)"
    command -v curl >/dev/null 2>&1 || die "the readiness check needs curl"
    if port_open "$PORT"; then
        die "port $PORT is already in use by another process (set KEYCLOAK_PORT)"
    fi
    resolve_dist
    if [[ -z "$ADMIN_PASSWORD" ]]; then
        ADMIN_PASSWORD="$(head -c 18 /dev/urandom | base64 | tr '+/' '-_')"
        (umask 077 && printf '%s\n' "$ADMIN_PASSWORD" >"$PASSWORD_FILE")
        log "admin password for user $ADMIN written to $PASSWORD_FILE"
    fi
    start_server
    echo "keycloak up at $URL"
}

cmd_down() {
    lock_state
    stop_server
    rm -rf "$HOME_DIR" "$OUT_FILE" "$PASSWORD_FILE"
    echo "keycloak down"
}

cmd_status() {
    local pid
    if pid="$(server_pid)" && answering; then
        echo "keycloak running at $URL (pid $pid)"
        return 0
    fi
    echo "keycloak not running"
    return 1
}

cmd_logs() {
    [[ -f "$OUT_FILE" ]] || die "no Keycloak log at $OUT_FILE"
    if [[ $# -eq 0 ]]; then set -- -n 100; fi
    exec tail "$@" "$OUT_FILE"
}

case "${1:-}" in
    up) cmd_up ;;
    down) cmd_down ;;
    status) cmd_status ;;
    logs) shift; cmd_logs "$@" ;;
    -h | --help | help) usage ;;
    *) usage >&2; exit 2 ;;
esac
