#!/usr/bin/env bash
# The local playground (make dev / make dev-down): a broker, the demo's agents running
# in the background, and .dev/bridge.toml pointing at them, to try the operator
# commands on.
#
#   scripts/dev.sh up     start what is not running yet, write .dev/bridge.toml, create
#                         its topics, print the commands to try
#   scripts/dev.sh down   stop exactly what `up` started (the broker only if `up`
#                         started it), remove .dev/bridge.toml
#
# Environment:
#   KAFKA_PORT, KAFKA_CONTROLLER_PORT  the broker's ports (default 19092, KAFKA_PORT + 1), as for
#                          scripts/kafka.sh; a broker kafka.sh already runs there is used
#                          and left running by `down`
#   DEV_DIR                the playground's folder (default .dev): pid files, logs,
#                          bridge.toml
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

DEV_DIR="${DEV_DIR:-.dev}"
PORT="${KAFKA_PORT:-19092}"
PY="$ROOT/.venv/bin/python"
BRIDGE=".venv/bin/bridge"
KAFKA_FILE="$DEV_DIR/kafka"   # "PORT CONTROLLER_PORT started|reused"

log() { echo "dev.sh: $*" >&2; }
die() { log "ERROR: $*"; exit 1; }

cmd_up() {
    [[ -x "$PY" ]] || die "no .venv here (run: make venv)"
    mkdir -p "$DEV_DIR"
    local how=reused
    if [[ -f "$KAFKA_FILE" ]]; then
        local recorded
        read -r recorded _ _ <"$KAFKA_FILE"
        [[ "$recorded" == "$PORT" ]] ||
            die "a playground on port $recorded runs already in $DEV_DIR (make dev-down, or KAFKA_PORT=$recorded)"
        read -r _ _ how <"$KAFKA_FILE"
    fi
    # up says whether it started the broker or found it running: a status check first
    # could time out on a busy host, and dev-down would then stop a broker it never started.
    local said
    said="$(scripts/kafka.sh up)" || exit 1
    [[ "$said" == *"(already running"* ]] || how=started
    echo "$PORT ${KAFKA_CONTROLLER_PORT:-$((PORT + 1))} $how" >"$KAFKA_FILE"
    if ! "$PY" -m bridge.demo.playground up --dir "$DEV_DIR" --bootstrap "127.0.0.1:$PORT"; then
        cmd_down >/dev/null 2>&1 || true
        exit 1
    fi
    local config="$DEV_DIR/bridge.toml"
    "$BRIDGE" --config "$config" topics >/dev/null || die "could not create the topics of $config"
    cat <<EOF
playground up: broker 127.0.0.1:$PORT ($how), config $config (agents writer, asker,
failer, sdk-writer, sdk-sleeper; topics playground.*). Try, from $ROOT:
  $BRIDGE --config $config config check --live
  $BRIDGE --config $config run
  $BRIDGE --config $config start --task-key hello-1 --agent writer --text "chunks=5 interval=0.5"
  $BRIDGE --config $config tail --timeline --until-closed hello-1
  $BRIDGE --config $config tasks list
  $BRIDGE --config $config dlq list
(\`run\` stays in the foreground: give it a terminal of its own; its /metrics, /healthz
and /readyz are on http://127.0.0.1:$(sed -n 's/^http_port = \([0-9]*\).*/\1/p' "$config"). The asker asks a question:
answer with \`reply --task-key KEY --text json\`.)
Stop it all: Ctrl-C the \`run\`, then make dev-down
EOF
}

cmd_down() {
    if [[ -x "$PY" ]]; then "$PY" -m bridge.demo.playground down --dir "$DEV_DIR"; fi
    if [[ -f "$KAFKA_FILE" ]]; then
        local port controller how
        read -r port controller how <"$KAFKA_FILE"
        if [[ "$how" == started ]]; then
            KAFKA_PORT="$port" KAFKA_CONTROLLER_PORT="$controller" scripts/kafka.sh down
        else
            echo "left the broker on port $port running (the playground did not start it)"
        fi
        rm -f "$KAFKA_FILE"
    fi
    echo "playground down"
}

case "${1:-}" in
    up) cmd_up ;;
    down) cmd_down ;;
    *) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0" >&2; exit 2 ;;
esac
