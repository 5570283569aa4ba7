# Shell functions scripts/kafka.sh and scripts/keycloak.sh share (sourced, not run).
# The sourcing script sets STATE_DIR first.

# Serialise commands on one state dir (e.g. parallel test sessions calling `up`).
lock_state() {
    mkdir -p "$STATE_DIR"
    if command -v flock >/dev/null 2>&1; then
        exec 8>"$STATE_DIR/.lock"
        flock 8
    fi
}

# Alive and not a zombie (an exited server reparented to pid 1 can linger as one).
pid_alive() {
    kill -0 "$1" 2>/dev/null || return 1
    local st
    st="$(ps -o stat= -p "$1" 2>/dev/null)" || return 1
    [[ "$st" != Z* ]]
}

# Something accepts connections on 127.0.0.1:$1.
port_open() {
    timeout 2 bash -c "exec 3<>/dev/tcp/127.0.0.1/$1" 2>/dev/null
}

# The comment block at the top of the running script, as its usage text.
usage() {
    awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$ROOT/scripts/$(basename "$0")"
}

# terminate PID NAME: SIGTERM to the process group PID leads (started with
# setsid), SIGKILL after 20 s; returns once PID is gone (or 5 s after SIGKILL).
terminate() {
    local pid="$1" name="$2" i
    kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
    for i in $(seq 200); do
        pid_alive "$pid" || return 0
        sleep 0.1
    done
    log "$name $pid did not stop within 20s after SIGTERM; sending SIGKILL"
    kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true
    for i in $(seq 50); do pid_alive "$pid" || return 0; sleep 0.1; done
}
