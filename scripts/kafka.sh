#!/usr/bin/env bash
# Local single-node Apache Kafka (KRaft, broker+controller) for tests and demos,
# run from the jars that kafka/pom.xml resolves from Maven Central.
#
#   scripts/kafka.sh up              format a fresh broker and start it (no-op if running);
#                                    fails at once, in one line, when it cannot start
#   scripts/kafka.sh down            stop it and delete its data
#   scripts/kafka.sh restart-broker  stop + start keeping data and config
#   scripts/kafka.sh kill-broker     SIGKILL the broker (a crash), keeping data and config
#   scripts/kafka.sh start-broker    start the broker `up` formatted (after kill-broker)
#   scripts/kafka.sh status          exit 0 if running and answering, else 1
#   scripts/kafka.sh logs [tail args] tail the broker log (default: -n 100)
#
# A three-node cluster beside it (own ports and state dir; combined broker+controller
# nodes 1-3, the three controller voters; RF 3 and min.insync.replicas=2 everywhere):
#   scripts/kafka.sh cluster-up      format a fresh cluster and start it (no-op if running)
#   scripts/kafka.sh cluster-down    SIGKILL every node and delete the cluster's data
#   scripts/kafka.sh cluster-status  one line per node; exit 0 if all three answer
#   scripts/kafka.sh kill-node N     SIGKILL node N (a crash), keeping its data
#   scripts/kafka.sh stop-node N     SIGTERM node N (controlled shutdown)
#   scripts/kafka.sh start-node N    start node N again; returns once it is registered
#   KAFKA_CLUSTER_DIR              its state dir (default .kafka-cluster)
#   KAFKA_CLUSTER_PORTS            the nodes' PLAINTEXT ports, "P1 P2 P3" (default
#                                  19192 19193 19194); the bootstrap is all three
#   KAFKA_CLUSTER_CONTROLLER_PORTS their CONTROLLER ports (default 19195 19196 19197)
#   KAFKA_CLUSTER_HEAP_OPTS        per node (default "-Xms128m -Xmx384m")
#   KAFKA_CLUSTER_ADVERTISED_PORTS the PLAINTEXT ports the nodes advertise, "A1 A2 A3"
#                                  (default their own): fault proxies' (read by cluster-up)
#   The ports are fixed by cluster-up (written into each node's config).
#
# Each port has a broker of its own: every command acts only on the broker this script
# started for KAFKA_PORT (state dir .kafka/<KAFKA_PORT>), never on one on another port.
#
# Environment:
#   KAFKA_STATE_DIR        state dir, relative to the repo root (default .kafka/<KAFKA_PORT>);
#                          holds one broker: a command for another port refuses it
#   KAFKA_PORT             PLAINTEXT port (default 19092)
#   KAFKA_CONTROLLER_PORT  CONTROLLER port (default KAFKA_PORT + 1: 19093)
#   KAFKA_ADVERTISED_PORT  the PLAINTEXT port clients are told to connect to (default
#                          KAFKA_PORT): a fault proxy's, in front of the listener
#   KAFKA_SASL_PORT        also open a SASL_SSL listener on this port (SCRAM-SHA-512,
#                          OAUTHBEARER or both); the PLAINTEXT listener stays
#                          (readiness check, other clients). Needs:
#   KAFKA_SSL_KEYSTORE_PEM   PEM file with the broker's unencrypted PKCS#8 private key
#                            and its certificate chain (ssl.keystore.type=PEM)
#   and one or both of:
#   KAFKA_SCRAM_CREDENTIALS  file of `name=password` lines: the SCRAM-SHA-512 users
#                            `up` formats into the new cluster (names [A-Za-z0-9._-],
#                            passwords without , ] " = or whitespace)
#   KAFKA_OAUTH_JWKS_URL     OAUTHBEARER: tokens are checked by Kafka's own
#                            OAuthBearerValidatorCallbackHandler against the signing
#                            keys at this URL (the provider's JWKS), with:
#     KAFKA_OAUTH_ISSUER       the `iss` a token must carry (required)
#     KAFKA_OAUTH_AUDIENCE     an `aud` a token must carry (required)
#     KAFKA_OAUTH_PRINCIPAL_CLAIM  the claim that names the principal (default sub)
#     KAFKA_OAUTH_MAX_REAUTH_MS    connections.max.reauth.ms of OAUTHBEARER: a connection
#                              ends with its token (KIP-368; clients that cannot
#                              re-authenticate are disconnected then). Default unset:
#                              a connection outlives its token
#   KAFKA_SUPER_USERS      with KAFKA_SASL_PORT: space-separated principals (SCRAM user
#                          or OAuth principal) allowed everything; ACLs on, nobody
#                          else allowed anything
#   KAFKA_READY_TIMEOUT    seconds to wait for readiness (default 90)
#   KAFKA_READY_WARM       1 (default): readiness also waits for the group and
#                          transaction coordinators (creates their internal topics)
#   KAFKA_HEAP_OPTS        default "-Xms1g -Xmx1g" (Kafka's own kafka-server-start.sh default)
#   KAFKA_JVM_OPTS         JVM options (default Kafka's own KAFKA_JVM_PERFORMANCE_OPTS
#                          G1 settings: 20 ms pause target, concurrent cycles from 35 %)
#   PYTHON                 interpreter with aiokafka (default .venv/bin/python, else python3)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

PORT="${KAFKA_PORT:-19092}"
[[ "$PORT" =~ ^[0-9]+$ ]] || { echo "kafka.sh: ERROR: KAFKA_PORT must be a port number, got '$PORT'" >&2; exit 1; }
# Per port: a broker on another port (another `make demo`, the tests) keeps its own state.
STATE_DIR="${KAFKA_STATE_DIR:-.kafka/$PORT}"
case "$STATE_DIR" in /*) ;; *) STATE_DIR="$ROOT/$STATE_DIR" ;; esac
# Beside its own PLAINTEXT port, so KAFKA_PORT alone moves a whole second broker.
CONTROLLER_PORT="${KAFKA_CONTROLLER_PORT:-$((PORT + 1))}"
SASL_PORT="${KAFKA_SASL_PORT:-}"
KEYSTORE_PEM="${KAFKA_SSL_KEYSTORE_PEM:-}"
SCRAM_CREDENTIALS="${KAFKA_SCRAM_CREDENTIALS:-}"
SUPER_USERS="${KAFKA_SUPER_USERS:-}"
OAUTH_JWKS_URL="${KAFKA_OAUTH_JWKS_URL:-}"
OAUTH_ISSUER="${KAFKA_OAUTH_ISSUER:-}"
OAUTH_AUDIENCE="${KAFKA_OAUTH_AUDIENCE:-}"
OAUTH_PRINCIPAL_CLAIM="${KAFKA_OAUTH_PRINCIPAL_CLAIM:-sub}"
OAUTH_MAX_REAUTH_MS="${KAFKA_OAUTH_MAX_REAUTH_MS:-}"
READY_TIMEOUT="${KAFKA_READY_TIMEOUT:-90}"
READY_WARM="${KAFKA_READY_WARM:-1}"
HEAP_OPTS="${KAFKA_HEAP_OPTS:--Xms1g -Xmx1g}"
# As kafka-run-class.sh starts a broker. A short G1 pause target keeps the young
# generation small, so a collection pause stays well inside one commit tick
# (measured: bench/results/tuned-runner-client-metrics.json).
JVM_OPTS="${KAFKA_JVM_OPTS:--XX:+UseG1GC -XX:MaxGCPauseMillis=20 -XX:InitiatingHeapOccupancyPercent=35 -XX:+ExplicitGCInvokesConcurrent}"
if [[ -z "${PYTHON:-}" ]]; then
    if [[ -x "$ROOT/.venv/bin/python" ]]; then PYTHON="$ROOT/.venv/bin/python"; else PYTHON=python3; fi
fi

KAFKA_DIR="$ROOT/kafka"
LIBS="$KAFKA_DIR/libs"
MARKER="$KAFKA_DIR/.resolved"          # sha256 of pom.xml after a successful copy
RESOLVE_LOCK="$KAFKA_DIR/.resolve.lock"
DATA_DIR="$STATE_DIR/data"
LOG_DIR="$STATE_DIR/logs"
CONFIG="$STATE_DIR/server.properties"
PID_FILE="$STATE_DIR/kafka.pid"
# JVM system properties `up` decided (the OAuth URLs Kafka may fetch), for every later start.
SYSPROPS_FILE="$STATE_DIR/jvm.sysprops"
OUT_FILE="$STATE_DIR/kafka.out"        # JVM stdout/stderr
SERVER_LOG="$LOG_DIR/server.log"
LOG4J_CONFIG="$KAFKA_DIR/log4j2.properties"
BOOTSTRAP="127.0.0.1:$PORT"
# shellcheck source=scripts/service-common.sh
source "$ROOT/scripts/service-common.sh"

log() { echo "kafka.sh: $*" >&2; }
die() { log "ERROR: $*"; exit 1; }

jvm_log_opts() {
    printf '%s\n' "-Dlog4j2.configurationFile=$LOG4J_CONFIG" "-Dkafka.logs.dir=$LOG_DIR"
}

# --- jars ----------------------------------------------------------------------
pom_hash() { sha256sum "$KAFKA_DIR/pom.xml" | cut -d' ' -f1; }

jars_ok() {
    [[ -f "$MARKER" && "$(cat "$MARKER")" == "$(pom_hash)" ]] &&
        compgen -G "$LIBS/kafka_2.13-*.jar" >/dev/null
}

resolve_jars() {
    jars_ok && return 0
    command -v mvn >/dev/null 2>&1 || die "kafka/libs is missing or stale and mvn is not installed"
    (
        if command -v flock >/dev/null 2>&1; then exec 9>"$RESOLVE_LOCK"; flock 9; fi
        jars_ok && exit 0
        log "resolving Kafka jars with Maven into kafka/libs ..."
        local start=$SECONDS
        # pom.xml changed since the last copy: drop the old jar versions. A merely
        # missing marker (first run, interrupted copy) keeps what is there and
        # lets Maven add the missing jars.
        if [[ -f "$MARKER" ]]; then rm -rf "$LIBS"; fi
        rm -f "$MARKER"
        (cd "$KAFKA_DIR" && mvn -q -B dependency:copy-dependencies) >&2 ||
            die "mvn dependency:copy-dependencies failed (see output above)"
        compgen -G "$LIBS/kafka_2.13-*.jar" >/dev/null || die "kafka jar missing after mvn run"
        pom_hash >"$MARKER"
        log "jars resolved in $((SECONDS - start))s"
    )
}

# --- process / readiness helpers ------------------------------------------------
# Print the pid of the broker started by this script for this state dir, if alive.
broker_pid() {
    [[ -f "$PID_FILE" ]] || return 1
    local pid args
    pid="$(cat "$PID_FILE" 2>/dev/null)" || return 1
    [[ "$pid" =~ ^[0-9]+$ ]] || return 1
    pid_alive "$pid" || return 1
    # Guard against pid reuse: must be our java running kafka.Kafka with our config.
    args="$(ps -ww -o args= -p "$pid" 2>/dev/null)" || return 1
    [[ "$args" == *kafka.Kafka*"$CONFIG"* ]] || return 1
    echo "$pid"
}

# The PLAINTEXT port the broker of this state dir was configured with (by `up`).
state_port() {
    sed -n 's|^listeners=PLAINTEXT://[^:]*:\([0-9]*\).*|\1|p' "$CONFIG" 2>/dev/null
}

# Refuse to act on a broker of this state dir that listens on another port than
# KAFKA_PORT (a KAFKA_STATE_DIR shared by two ports): it is not the one asked for.
guard_port() {
    local pid other
    pid="$(broker_pid)" || return 0
    other="$(state_port)"
    [[ -z "$other" || "$other" == "$PORT" ]] && return 0
    die "$STATE_DIR holds the broker on port $other (pid $pid), not one on port $PORT: left it alone (KAFKA_PORT=$other to address it, or another KAFKA_STATE_DIR)"
}

# ready.py BOOTSTRAP TIMEOUT_S PIDS WARM NODE_IDS
#   Polls until a Metadata request lists every node of NODE_IDS (comma-separated) and (if WARM=1) the group and
#   transaction coordinators answer FindCoordinator, which also creates
#   __consumer_offsets / __transaction_state, so clients need no retries later.
#   exit 0 ready, 1 timeout, 2 a broker process died (PIDS: comma-separated, may be empty).
READY_PY='
import asyncio, logging, os, sys, time
logging.disable(logging.CRITICAL)
try:
    from aiokafka.admin import AIOKafkaAdminClient
except ImportError as e:
    print(f"readiness check needs aiokafka in {sys.executable}: {e}", file=sys.stderr)
    sys.exit(3)

bootstrap, timeout, warm = sys.argv[1], float(sys.argv[2]), sys.argv[4] == "1"
pids = [int(p) for p in sys.argv[3].split(",") if p.strip() not in ("", "0")]
node_ids = {int(n) for n in sys.argv[5].split(",")}

def alive():
    return all(alive_one(pid) for pid in pids)

def alive_one(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    try:  # a zombie counts as dead
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return True

async def attempt():
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=5000,
                                client_id="kafka-sh-ready")
    try:
        await admin.start()
        md = await admin.describe_cluster()
        if not node_ids <= {b["node_id"] for b in md["brokers"]}:
            raise RuntimeError(f"broker not in metadata: {md}")
        if warm:
            await admin.find_coordinator("kafka-sh-ready", 0)  # group coordinator
            await admin.find_coordinator("kafka-sh-ready", 1)  # transaction coordinator
    finally:
        await admin.close()

async def main():
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        if not alive():
            return 2
        try:
            await asyncio.wait_for(attempt(), max(1.0, deadline - time.monotonic()))
            return 0
        except Exception as e:  # not up yet / coordinator loading
            last = e
        await asyncio.sleep(0.25)
    print(f"not ready after {timeout:.0f}s: {type(last).__name__}: {last}", file=sys.stderr)
    return 1

sys.exit(asyncio.run(main()))
'

ready() { # ready TIMEOUT PIDS WARM  (the nodes READY_NODES names, default 1)
    "$PYTHON" -c "$READY_PY" "$BOOTSTRAP" "$1" "$2" "$3" "${READY_NODES:-1}"
}

show_failure_logs() {
    if [[ -s "$OUT_FILE" ]]; then
        log "---- last 50 lines of $OUT_FILE ----"
        tail -n 50 "$OUT_FILE" >&2
    fi
    if [[ -s "$SERVER_LOG" ]]; then
        log "---- last 50 lines of $SERVER_LOG ----"
        tail -n 50 "$SERVER_LOG" >&2
    fi
}

# One line: why the broker process ended, from its output and its log (the JVM's
# own complaint, else the root exception, else the last error, else the last line).
failure_reason() {
    local text line
    text="$(cat "$OUT_FILE" "$SERVER_LOG" 2>/dev/null | grep -v '^[[:space:]]*at ' | sed 's/[[:space:]]*$//' | grep -v '^$')" || true
    line="$(grep -vE '^Error: (Could not create the Java Virtual Machine|A fatal exception has occurred)' <<<"$text" |
        grep -m1 -E '^(Unrecognized|Invalid|Error occurred|Too small|Improperly specified|Terminating due to|bash: )' || true)"
    [[ -n "$line" ]] || line="$(grep -E '^Caused by: ' <<<"$text" | tail -n 1 | sed 's/^Caused by: //' || true)"
    [[ -n "$line" ]] || line="$(grep -m1 -E '^[A-Za-z0-9_.$]+(Exception|Error): ' <<<"$text" || true)"
    [[ -n "$line" ]] || line="$(grep -E ' ERROR ' <<<"$text" | tail -n 1 || true)"
    [[ -n "$line" ]] || line="$(grep -v '^[[:space:]]' "$OUT_FILE" 2>/dev/null | tail -n 1 || true)"
    [[ -n "$line" ]] || line="no error in the log (signal?)"
    line="$(sed -E 's/^\[[^]]*\] *//' <<<"$line")"
    echo "${line:0:300}"
}

# The pid of a broker an earlier scripts/kafka.sh started in the one state dir all
# ports shared (.kafka/), if it still runs.
legacy_broker_pid() {
    [[ -z "${KAFKA_STATE_DIR:-}" && -f "$ROOT/.kafka/kafka.pid" ]] || return 1
    local pid
    pid="$(cat "$ROOT/.kafka/kafka.pid" 2>/dev/null)" || return 1
    [[ "$pid" =~ ^[0-9]+$ ]] && pid_alive "$pid" || return 1
    [[ "$(ps -ww -o args= -p "$pid" 2>/dev/null)" == *kafka.Kafka*"$ROOT/.kafka/server.properties"* ]] || return 1
    echo "$pid"
}

check_ports_free() {
    local p legacy
    for p in "$PORT" "$CONTROLLER_PORT" $SASL_PORT; do
        if port_open "$p"; then
            if legacy="$(legacy_broker_pid)"; then
                die "port $p is in use by the broker an earlier scripts/kafka.sh started (pid $legacy, state in .kafka/): stop it with 'kill $legacy', or choose other ports with KAFKA_PORT / KAFKA_CONTROLLER_PORT"
            fi
            die "port $p is already in use by a process that is not the broker this script started for port $PORT (choose others with KAFKA_PORT / KAFKA_CONTROLLER_PORT)"
        fi
    done
}

need_java() {
    command -v java >/dev/null 2>&1 || die "java is not installed (the broker needs Java 17 or newer on PATH)"
    # Kafka 4 runs on Java 17 or newer; an older java on PATH fails later with a
    # class-version error in the broker's log, far from the cause.
    local spec
    spec=$(java -XshowSettings:properties -version 2>&1 | sed -n 's/^ *java\.specification\.version = //p')
    spec=${spec#1.}  # Java 8 and older say 1.8
    [[ "$spec" =~ ^[0-9]+$ ]] || die "cannot tell java's version (java -XshowSettings:properties -version gave no java.specification.version)"
    ((spec >= 17)) || die "java on PATH is Java $spec; the broker needs Java 17 or newer (set PATH or JAVA_HOME's bin first)"
}

# --- start / stop ---------------------------------------------------------------
start_broker() {
    [[ -f "$CONFIG" && -d "$DATA_DIR" ]] || die "no formatted broker in $STATE_DIR (run: scripts/kafka.sh up)"
    check_ports_free
    need_java
    mkdir -p "$LOG_DIR"
    : >"$OUT_FILE"
    local start=$SECONDS
    # A stale pid file from a broker that died would race with the new one.
    rm -f "$PID_FILE"
    # New session (setsid) so the broker survives the calling shell/terminal;
    # the inner shell records its own pid and then execs java (same pid).
    # shellcheck disable=SC2086
    setsid bash -c 'echo $$ >"$0"; exec "$@"' "$PID_FILE" \
        java $HEAP_OPTS -XX:+ExitOnOutOfMemoryError -Djava.awt.headless=true $JVM_OPTS \
        $(cat "$SYSPROPS_FILE" 2>/dev/null) \
        $(jvm_log_opts) -cp "$LIBS/*" kafka.Kafka "$CONFIG" \
        </dev/null >>"$OUT_FILE" 2>&1 8>&- 9>&- &
    local i
    for i in $(seq 50); do [[ -s "$PID_FILE" ]] && break; sleep 0.1; done
    local pid
    pid="$(cat "$PID_FILE" 2>/dev/null || true)"
    [[ -n "$pid" ]] || die "broker did not start (no pid file)"
    # cluster-up starts all three nodes before any can answer (quorum of controllers).
    [[ "${START_NO_WAIT:-0}" == 1 ]] && return 0

    local rc=0
    ready "$READY_TIMEOUT" "$pid" "$READY_WARM" || rc=$?
    case $rc in
        0) log "broker ready in $((SECONDS - start))s (pid $pid)" ;;
        2) rm -f "$PID_FILE"
           die "the broker for port $PORT (pid $pid) exited during startup: $(failure_reason) (log: $OUT_FILE, $SERVER_LOG)" ;;
        3) stop_broker; die "the readiness check needs aiokafka: install it into $PYTHON or set PYTHON" ;;
        *) show_failure_logs; stop_broker
           die "broker not ready within ${READY_TIMEOUT}s on $BOOTSTRAP (stopped it; logs above)" ;;
    esac
}

stop_broker() {
    local pid
    if ! pid="$(broker_pid)"; then
        rm -f "$PID_FILE"
        return 0
    fi
    terminate "$pid" broker
    rm -f "$PID_FILE"
}

new_cluster_id() {
    # Same format as `kafka-storage random-uuid` (url-safe base64, no padding,
    # never starting with "-").
    "$PYTHON" -c '
import base64, uuid
while True:
    s = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
    if not s.startswith("-"):
        print(s); break
' 2>/dev/null || java -cp "$LIBS/*" kafka.tools.StorageTool random-uuid
}

# --- optional SASL_SSL listener -------------------------------------------------
# Adds the listener to the rendered server.properties and prints the StorageTool
# --add-scram arguments for the users in $SCRAM_CREDENTIALS, one per line.
# (The passwords are on the format command's line for the second it runs: this
# is a throwaway test broker.)
configure_sasl_ssl() {
    [[ "$SASL_PORT" =~ ^[0-9]+$ ]] || die "KAFKA_SASL_PORT must be a port number, got '$SASL_PORT'"
    [[ -r "$KEYSTORE_PEM" ]] || die "KAFKA_SASL_PORT needs KAFKA_SSL_KEYSTORE_PEM: a readable PEM file with key and certificate chain"
    [[ -n "$SCRAM_CREDENTIALS$OAUTH_JWKS_URL" ]] ||
        die "KAFKA_SASL_PORT needs KAFKA_SCRAM_CREDENTIALS (SCRAM users), KAFKA_OAUTH_JWKS_URL (OAUTHBEARER) or both"
    [[ -z "$SCRAM_CREDENTIALS" || -r "$SCRAM_CREDENTIALS" ]] ||
        die "KAFKA_SCRAM_CREDENTIALS must be a readable file of name=password lines"
    case "$KEYSTORE_PEM" in /*) ;; *) KEYSTORE_PEM="$ROOT/$KEYSTORE_PEM" ;; esac
    local mechanisms
    mechanisms="$(printf '%s\n' ${SCRAM_CREDENTIALS:+SCRAM-SHA-512} ${OAUTH_JWKS_URL:+OAUTHBEARER} | paste -sd,)"
    sed -i -e "s|^listeners=.*|&,SASL_SSL://127.0.0.1:$SASL_PORT|" \
        -e "s|^advertised.listeners=.*|&,SASL_SSL://127.0.0.1:$SASL_PORT|" \
        -e "s|^listener.security.protocol.map=.*|&,SASL_SSL:SASL_SSL|" "$CONFIG"
    cat >>"$CONFIG" <<EOF_SASL

# --- SASL_SSL listener (KAFKA_SASL_PORT) -----------------------------------
sasl.enabled.mechanisms=$mechanisms
listener.name.sasl_ssl.sasl.enabled.mechanisms=$mechanisms
listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
listener.name.sasl_ssl.ssl.keystore.type=PEM
listener.name.sasl_ssl.ssl.keystore.location=$KEYSTORE_PEM
listener.name.sasl_ssl.ssl.client.auth=none
EOF_SASL
    if [[ -n "$OAUTH_JWKS_URL" ]]; then configure_oauthbearer; fi
    if [[ -n "$SUPER_USERS" ]]; then
        local supers="User:ANONYMOUS" u   # PLAINTEXT and CONTROLLER connections
        for u in $SUPER_USERS; do supers="$supers;User:$u"; done
        printf '%s\n' "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer" \
            "super.users=$supers" "allow.everyone.if.no.acl.found=false" >>"$CONFIG"
    fi
    [[ -n "$SCRAM_CREDENTIALS" ]] || return 0
    local line name password n=0
    while IFS= read -r line || [[ -n "$line" ]]; do
        [[ -z "$line" || "$line" == \#* ]] && continue
        name="${line%%=*}"
        password="${line#*=}"
        [[ "$name" =~ ^[A-Za-z0-9._-]+$ && "$line" == *=* ]] || die "$SCRAM_CREDENTIALS: a line is not name=password"
        [[ -n "$password" && "$password" != *[,\]\"=[:space:]]* ]] || die "$SCRAM_CREDENTIALS: bad password for $name"
        printf '%s\n' --add-scram "SCRAM-SHA-512=[name=$name,password=$password]"
        n=$((n + 1))
    done <"$SCRAM_CREDENTIALS"
    ((n > 0)) || die "$SCRAM_CREDENTIALS names no user"
}

# OAUTHBEARER on the SASL_SSL listener: Kafka's own validator checks each token's
# signature against the provider's JWKS, its issuer, audience and expiry; the
# principal is the claim KAFKA_OAUTH_PRINCIPAL_CLAIM names.
configure_oauthbearer() {
    [[ "$OAUTH_JWKS_URL" =~ ^https?://[^[:space:]]+$ ]] || die "KAFKA_OAUTH_JWKS_URL must be an http(s) URL, got '$OAUTH_JWKS_URL'"
    [[ -n "$OAUTH_ISSUER" ]] || die "KAFKA_OAUTH_JWKS_URL needs KAFKA_OAUTH_ISSUER (the iss tokens must carry)"
    [[ -n "$OAUTH_AUDIENCE" ]] || die "KAFKA_OAUTH_JWKS_URL needs KAFKA_OAUTH_AUDIENCE (an aud tokens must carry)"
    [[ -z "$OAUTH_MAX_REAUTH_MS" || "$OAUTH_MAX_REAUTH_MS" =~ ^[0-9]+$ ]] ||
        die "KAFKA_OAUTH_MAX_REAUTH_MS must be a number of milliseconds, got '$OAUTH_MAX_REAUTH_MS'"
    cat >>"$CONFIG" <<EOF_OAUTH
listener.name.sasl_ssl.oauthbearer.sasl.jaas.config=org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;
listener.name.sasl_ssl.oauthbearer.sasl.server.callback.handler.class=org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler
sasl.oauthbearer.jwks.endpoint.url=$OAUTH_JWKS_URL
sasl.oauthbearer.expected.issuer=$OAUTH_ISSUER
sasl.oauthbearer.expected.audience=$OAUTH_AUDIENCE
sasl.oauthbearer.sub.claim.name=$OAUTH_PRINCIPAL_CLAIM
EOF_OAUTH
    if [[ -n "$OAUTH_MAX_REAUTH_MS" ]]; then
        echo "listener.name.sasl_ssl.oauthbearer.connections.max.reauth.ms=$OAUTH_MAX_REAUTH_MS" >>"$CONFIG"
    fi
    # Kafka 4 fetches only the OAuth URLs this system property allows.
    echo "-Dorg.apache.kafka.sasl.oauthbearer.allowed.urls=$OAUTH_JWKS_URL" >"$SYSPROPS_FILE"
}

# --- subcommands ----------------------------------------------------------------
cmd_up() {
    lock_state
    guard_port
    local pid
    if pid="$(broker_pid)"; then
        if port_open "$PORT" && ready 10 "$pid" 0; then
            echo "kafka up at $BOOTSTRAP (already running, pid $pid)"
            return 0
        fi
        log "the broker this script started for port $PORT (pid $pid) is alive but not answering on $BOOTSTRAP; restarting it from scratch"
        stop_broker
    fi
    "$PYTHON" -c 'import aiokafka' 2>/dev/null ||
        die "the readiness check needs aiokafka: install it into $PYTHON or set PYTHON"
    check_ports_free
    need_java
    resolve_jars

    local t0=$SECONDS
    rm -rf "$DATA_DIR" "$LOG_DIR"
    mkdir -p "$DATA_DIR" "$LOG_DIR"
    # The advertised PLAINTEXT port first: KAFKA_ADVERTISED_PORT, else the listener's.
    sed -e "/^advertised.listeners=/s|PLAINTEXT://127.0.0.1:@PORT@|PLAINTEXT://127.0.0.1:${KAFKA_ADVERTISED_PORT:-$PORT}|" \
        -e "s|@PORT@|$PORT|g" \
        -e "s|@CONTROLLER_PORT@|$CONTROLLER_PORT|g" \
        -e "s|@DATA_DIR@|$DATA_DIR|g" \
        "$KAFKA_DIR/server.properties.in" >"$CONFIG"

    local scram=()
    rm -f "$SYSPROPS_FILE"
    if [[ -n "$SASL_PORT" ]]; then
        local sasl_args
        sasl_args="$(configure_sasl_ssl)" || exit 1
        if [[ -n "$sasl_args" ]]; then mapfile -t scram <<<"$sasl_args"; fi
    fi

    local cluster_id out
    cluster_id="$(new_cluster_id)"
    # shellcheck disable=SC2046
    if ! out="$(java $(jvm_log_opts) -cp "$LIBS/*" kafka.tools.StorageTool format \
        --standalone --cluster-id "$cluster_id" --config "$CONFIG" "${scram[@]}" 2>&1)"; then
        # The tool may echo its arguments: never print a SCRAM password.
        if [[ ${#scram[@]} -gt 0 ]]; then out="$(sed -E 's/password=[^],]*/password=***/g' <<<"$out")"; fi
        echo "$out" >&2
        die "kafka-storage format failed"
    fi
    log "formatted $DATA_DIR (cluster id $cluster_id) in $((SECONDS - t0))s"

    start_broker
    echo "kafka up at $BOOTSTRAP${SASL_PORT:+ (SASL_SSL on 127.0.0.1:$SASL_PORT)}"
}

cmd_down() {
    lock_state
    guard_port
    stop_broker
    rm -rf "$DATA_DIR"
    echo "kafka down (port $PORT)"
}

cmd_restart_broker() {
    lock_state
    guard_port
    local t0=$SECONDS
    stop_broker
    log "broker stopped in $((SECONDS - t0))s; starting again"
    start_broker
    echo "kafka up at $BOOTSTRAP"
}

cmd_kill_broker() {
    lock_state
    guard_port
    local pid
    if pid="$(broker_pid)"; then
        kill -KILL "$pid" 2>/dev/null || true
        local i
        for i in $(seq 50); do pid_alive "$pid" || break; sleep 0.1; done
    fi
    rm -f "$PID_FILE"
    echo "kafka killed (port $PORT)"
}

cmd_start_broker() {
    lock_state
    guard_port
    local pid
    if pid="$(broker_pid)"; then
        echo "kafka up at $BOOTSTRAP (already running, pid $pid)"
        return 0
    fi
    start_broker
    echo "kafka up at $BOOTSTRAP"
}

cmd_status() {
    local pid other
    if pid="$(broker_pid)"; then
        other="$(state_port)"
        if [[ -n "$other" && "$other" != "$PORT" ]]; then
            echo "kafka not running on port $PORT ($STATE_DIR holds the broker on port $other, pid $pid)"
            return 1
        fi
        if port_open "$PORT" && ready 5 "$pid" 0; then
            echo "kafka running at $BOOTSTRAP (pid $pid)"
            return 0
        fi
    fi
    echo "kafka not running at $BOOTSTRAP"
    return 1
}

cmd_logs() {
    [[ -f "$SERVER_LOG" ]] || die "no broker log at $SERVER_LOG"
    if [[ $# -eq 0 ]]; then set -- -n 100; fi
    exec tail "$@" "$SERVER_LOG"
}

# --- three-node cluster ---------------------------------------------------------
CLUSTER_DIR="${KAFKA_CLUSTER_DIR:-.kafka-cluster}"
case "$CLUSTER_DIR" in /*) ;; *) CLUSTER_DIR="$ROOT/$CLUSTER_DIR" ;; esac
read -r -a CLUSTER_PORTS <<<"${KAFKA_CLUSTER_PORTS:-19192 19193 19194}"
read -r -a CLUSTER_CONTROLLER_PORTS <<<"${KAFKA_CLUSTER_CONTROLLER_PORTS:-19195 19196 19197}"
CLUSTER_HEAP_OPTS="${KAFKA_CLUSTER_HEAP_OPTS:--Xms128m -Xmx384m}"
CLUSTER_NODES=(1 2 3)
# Keys of server.properties.in a cluster node sets otherwise (see cluster_config).
CLUSTER_KEYS='node.id|controller.quorum.bootstrap.servers|default.replication.factor|min.insync.replicas|offsets.topic.replication.factor|transaction.state.log.replication.factor|transaction.state.log.min.isr|share.coordinator.state.topic.replication.factor|share.coordinator.state.topic.min.isr'

cluster_bootstrap() {
    local n out=()
    for n in "${CLUSTER_NODES[@]}"; do out+=("127.0.0.1:$(cluster_port "$n")"); done
    (IFS=,; echo "${out[*]}")
}

# The cluster's ports: what cluster-up wrote down, else the environment's.
CLUSTER_PORTS_FILE="$CLUSTER_DIR/ports"
cluster_load_ports() {
    if [[ -f "$CLUSTER_PORTS_FILE" ]]; then
        { read -r -a CLUSTER_PORTS; read -r -a CLUSTER_CONTROLLER_PORTS; } <"$CLUSTER_PORTS_FILE"
    fi
}
cluster_load_ports
cluster_port() { echo "${CLUSTER_PORTS[$(($1 - 1))]}"; }

# Point the single-broker functions (start_broker, stop_broker, broker_pid, ready)
# at node N of the cluster.
cluster_node() {
    [[ "$1" =~ ^[123]$ ]] || die "no node '$1' (the cluster's nodes are 1, 2 and 3)"
    STATE_DIR="$CLUSTER_DIR"
    local d="$CLUSTER_DIR/node$1"
    DATA_DIR="$d/data"
    LOG_DIR="$d/logs"
    CONFIG="$d/server.properties"
    PID_FILE="$d/kafka.pid"
    OUT_FILE="$d/kafka.out"
    SERVER_LOG="$LOG_DIR/server.log"
    SYSPROPS_FILE="$d/jvm.sysprops"
    PORT="$(cluster_port "$1")"
    CONTROLLER_PORT="${CLUSTER_CONTROLLER_PORTS[$(($1 - 1))]}"
    SASL_PORT=""
    HEAP_OPTS="$CLUSTER_HEAP_OPTS"
    BOOTSTRAP="127.0.0.1:$PORT"
    READY_NODES="$1"
}

# server.properties of node N: the single broker's template with the cluster's
# identity, static quorum of the three controllers, and production's durability
# settings (RF 3, min.insync.replicas=2, internal topics alike).
cluster_config() {
    local n="$1" voters="" i
    for i in "${CLUSTER_NODES[@]}"; do
        voters="${voters:+$voters,}$i@127.0.0.1:${CLUSTER_CONTROLLER_PORTS[$((i - 1))]}"
    done
    local advertised
    read -r -a advertised <<<"${KAFKA_CLUSTER_ADVERTISED_PORTS:-}"
    sed -E -e "/^advertised.listeners=/s|PLAINTEXT://127.0.0.1:@PORT@|PLAINTEXT://127.0.0.1:${advertised[$((n - 1))]:-$PORT}|" \
        -e "s|@PORT@|$PORT|g" -e "s|@CONTROLLER_PORT@|$CONTROLLER_PORT|g" -e "s|@DATA_DIR@|$DATA_DIR|g" \
        -e "/^($CLUSTER_KEYS)=/d" "$KAFKA_DIR/server.properties.in"
    cat <<EOF_CLUSTER

# --- three-node cluster (scripts/kafka.sh cluster-up) ----------------------
node.id=$n
controller.quorum.voters=$voters
default.replication.factor=3
min.insync.replicas=2
offsets.topic.replication.factor=3
transaction.state.log.replication.factor=3
transaction.state.log.min.isr=2
share.coordinator.state.topic.replication.factor=3
share.coordinator.state.topic.min.isr=2
# A killed node is fenced (its leaderships move) after 5 s instead of 9 s: the
# same path as production's, in less test time.
broker.heartbeat.interval.ms=1000
broker.session.timeout.ms=5000
EOF_CLUSTER
}

cluster_pids() {
    local n pids=()
    for n in "${CLUSTER_NODES[@]}"; do
        cluster_node "$n"
        pids+=("$(broker_pid || echo 0)")
    done
    (IFS=,; echo "${pids[*]}")
}

cmd_cluster_up() {
    cluster_node 1
    lock_state
    local n running=0
    for n in "${CLUSTER_NODES[@]}"; do
        cluster_node "$n"
        if broker_pid >/dev/null; then running=$((running + 1)); fi
    done
    if ((running == 3)); then
        BOOTSTRAP="$(cluster_bootstrap)" READY_NODES=1,2,3
        if ready 20 "$(cluster_pids)" 0; then
            echo "kafka cluster up at $BOOTSTRAP (already running)"
            return 0
        fi
    fi
    if ((running > 0)); then
        log "the cluster in $CLUSTER_DIR is partly running or not answering; starting it from scratch"
        cluster_kill_all
    fi
    "$PYTHON" -c 'import aiokafka' 2>/dev/null ||
        die "the readiness check needs aiokafka: install it into $PYTHON or set PYTHON"
    resolve_jars
    rm -rf "$CLUSTER_DIR"/node* "$CLUSTER_PORTS_FILE"
    read -r -a CLUSTER_PORTS <<<"${KAFKA_CLUSTER_PORTS:-19192 19193 19194}"
    read -r -a CLUSTER_CONTROLLER_PORTS <<<"${KAFKA_CLUSTER_CONTROLLER_PORTS:-19195 19196 19197}"
    [[ ${#CLUSTER_PORTS[@]} -eq 3 && ${#CLUSTER_CONTROLLER_PORTS[@]} -eq 3 ]] ||
        die "KAFKA_CLUSTER_PORTS and KAFKA_CLUSTER_CONTROLLER_PORTS name three ports each"
    printf '%s\n' "${CLUSTER_PORTS[*]}" "${CLUSTER_CONTROLLER_PORTS[*]}" >"$CLUSTER_PORTS_FILE"
    local t0=$SECONDS cluster_id formats=()
    cluster_id="$(new_cluster_id)"
    for n in "${CLUSTER_NODES[@]}"; do
        cluster_node "$n"
        check_ports_free
        mkdir -p "$DATA_DIR" "$LOG_DIR"
        cluster_config "$n" >"$CONFIG"
        # shellcheck disable=SC2046
        java $(jvm_log_opts) -cp "$LIBS/*" kafka.tools.StorageTool format \
            --cluster-id "$cluster_id" --config "$CONFIG" >"$CLUSTER_DIR/node$n/format.out" 2>&1 &
        formats+=($!)
    done
    for n in "${CLUSTER_NODES[@]}"; do
        if ! wait "${formats[$((n - 1))]}"; then
            cat "$CLUSTER_DIR/node$n/format.out" >&2
            die "kafka-storage format of node $n failed"
        fi
    done
    log "formatted three nodes in $CLUSTER_DIR (cluster id $cluster_id) in $((SECONDS - t0))s"
    for n in "${CLUSTER_NODES[@]}"; do
        cluster_node "$n"
        START_NO_WAIT=1 start_broker
    done
    BOOTSTRAP="$(cluster_bootstrap)" READY_NODES=1,2,3
    local rc=0
    ready "${KAFKA_READY_TIMEOUT:-180}" "$(cluster_pids)" "$READY_WARM" || rc=$?
    if ((rc != 0)); then
        for n in "${CLUSTER_NODES[@]}"; do
            cluster_node "$n"
            log "==== node $n ===="
            show_failure_logs
        done
        cluster_kill_all
        die "the cluster was not ready within ${KAFKA_READY_TIMEOUT:-180}s on $(cluster_bootstrap) (killed it; logs above)"
    fi
    log "cluster ready in $((SECONDS - t0))s"
    echo "kafka cluster up at $(cluster_bootstrap)"
}

cluster_kill_all() {
    local n
    for n in "${CLUSTER_NODES[@]}"; do
        cluster_node "$n"
        kill_node_process
    done
}

kill_node_process() {
    local pid i
    if pid="$(broker_pid)"; then
        kill -KILL "$pid" 2>/dev/null || true
        for i in $(seq 50); do pid_alive "$pid" || break; sleep 0.1; done
    fi
    rm -f "$PID_FILE"
}

cmd_cluster_down() {
    cluster_node 1
    lock_state
    # Its data goes too: nothing to shut down cleanly for.
    cluster_kill_all
    rm -rf "$CLUSTER_DIR"/node* "$CLUSTER_PORTS_FILE"
    echo "kafka cluster down"
}

cmd_cluster_status() {
    local n pid up=0
    for n in "${CLUSTER_NODES[@]}"; do
        cluster_node "$n"
        if pid="$(broker_pid)" && port_open "$PORT" && ready 5 "$pid" 0; then
            echo "node $n up at $BOOTSTRAP (pid $pid)"
            up=$((up + 1))
        elif pid="$(broker_pid)"; then
            echo "node $n not answering at $BOOTSTRAP (pid $pid)"
        else
            echo "node $n down"
        fi
    done
    ((up == 3))
}

cmd_kill_node() {
    cluster_node "${1:-}"
    lock_state
    kill_node_process
    echo "node $1 killed"
}

cmd_stop_node() {
    cluster_node "${1:-}"
    lock_state
    stop_broker
    echo "node $1 stopped"
}

cmd_start_node() {
    cluster_node "${1:-}"
    lock_state
    local pid
    if pid="$(broker_pid)"; then
        echo "node $1 up at $BOOTSTRAP (already running, pid $pid)"
        return 0
    fi
    READY_TIMEOUT="${KAFKA_READY_TIMEOUT:-120}"
    READY_WARM=0 start_broker
    echo "node $1 up at $BOOTSTRAP"
}

case "${1:-}" in
    up) cmd_up ;;
    down) cmd_down ;;
    restart-broker) cmd_restart_broker ;;
    kill-broker) cmd_kill_broker ;;
    start-broker) cmd_start_broker ;;
    status) cmd_status ;;
    logs) shift; cmd_logs "$@" ;;
    cluster-up) cmd_cluster_up ;;
    cluster-down) cmd_cluster_down ;;
    cluster-status) cmd_cluster_status ;;
    kill-node) cmd_kill_node "${2:-}" ;;
    stop-node) cmd_stop_node "${2:-}" ;;
    start-node) cmd_start_node "${2:-}" ;;
    -h | --help | help) usage ;;
    *) usage >&2; exit 2 ;;
esac
