"""The local playground of ``make dev`` (scripts/dev.sh): the demo's agents left
running in the background, and a ``bridge.toml`` that points at them and the broker.

    python -m bridge.demo.playground up --dir .dev --bootstrap 127.0.0.1:19092
    python -m bridge.demo.playground down --dir .dev

``up`` starts the demo gateway and the a2a-sdk agents (the registry of ``bridge demo``),
each in a session of its own with its pid in ``DIR/<name>.pid`` and its output in
``DIR/<name>.log``, and writes ``DIR/bridge.toml``; when they run already it leaves
them. ``down`` stops exactly the processes those pid files name and removes the files.
A failure is one line on stderr and exit 1.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from pathlib import Path

from bridge.config.model import AgentConfig
from bridge.demo.procs import ServerDidNotStart, free_port, start_detached
from bridge.demo.run import demo_agents

# name: the module that serves it (and marks its processes as ours).
SERVERS = {"gateway": "bridge.demo.gateway", "sdk-agents": "bridge.demo.sdk_agents"}
PREFIX = "playground"


def _ours(pid: int, module: str) -> bool:
    """``pid`` is alive and runs ``module`` (not a reused pid)."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return module.encode() in argv and state != "Z"


def _running(d: Path, name: str) -> int | None:
    try:
        pid = int((d / f"{name}.pid").read_text())
    except (OSError, ValueError):
        return None
    return pid if _ours(pid, SERVERS[name]) else None


def config_toml(bootstrap: str, http_port: int, agents: dict[str, AgentConfig]) -> str:
    """The playground's configuration: its own topics (3 partitions), the demo's agents."""
    lines = [
        "# The local playground (make dev). make dev-down stops it; this file goes with it.",
        "[kafka]",
        f'bootstrap_servers = "{bootstrap}"',
        f'group_id = "{PREFIX}"',
        f'transactional_id_prefix = "{PREFIX}"',
        *(f'{t}_topic = "{PREFIX}.{t}"' for t in ("commands", "events", "checkpoints", "dlq", "tasks")),
        "partitions = 3",
        "",
        "[bridge]",
        f"http_port = {http_port}                 # /metrics /healthz /readyz",
    ]
    for a in agents.values():
        lines += ["", f"[agents.{a.name}]", f'url = "{a.url}"', f'dialect = "{a.dialect}"']
        if a.agent_code:
            lines.append(f'agent_code = "{a.agent_code}"')
    return "\n".join(lines) + "\n"


def up(d: Path, bootstrap: str) -> None:
    d.mkdir(parents=True, exist_ok=True)
    running = {name: _running(d, name) for name in SERVERS}
    config = d / "bridge.toml"
    if all(running.values()) and config.exists():
        print(f"playground: agents already running (pids {', '.join(str(p) for p in running.values())})")
        return
    down(d, quiet=True)
    py = sys.executable
    sdk_port = free_port()
    urls: dict[str, str] = {}
    argvs = {
        "gateway": [py, "-m", SERVERS["gateway"], "--port", "0"],
        "sdk-agents": [py, "-m", SERVERS["sdk-agents"], "--port", str(sdk_port)],
    }
    for name, argv in argvs.items():
        pid, urls[name] = start_detached(argv, d / f"{name}.log")
        (d / f"{name}.pid").write_text(f"{pid}\n")
    config.write_text(config_toml(bootstrap, free_port(), demo_agents(urls["gateway"], urls["sdk-agents"])))
    print(f"playground: demo gateway {urls['gateway']}, a2a-sdk agents {urls['sdk-agents']}; wrote {config}")


def down(d: Path, *, quiet: bool = False) -> None:
    for name, module in SERVERS.items():
        pid_file = d / f"{name}.pid"
        pid = _running(d, name)
        if pid is not None:
            os.killpg(pid, signal.SIGTERM)
            deadline = time.monotonic() + 10
            while _ours(pid, module) and time.monotonic() < deadline:
                time.sleep(0.1)
            if _ours(pid, module):
                os.killpg(pid, signal.SIGKILL)
            if not quiet:
                print(f"playground: stopped {name} (pid {pid})")
        pid_file.unlink(missing_ok=True)
    (d / "bridge.toml").unlink(missing_ok=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bridge.demo.playground", description=__doc__.splitlines()[0])
    ap.add_argument("action", choices=("up", "down"))
    ap.add_argument("--dir", type=Path, default=Path(".dev"), help="pid files, logs and bridge.toml")
    ap.add_argument("--bootstrap", default="127.0.0.1:19092", help="the broker bridge.toml names (up)")
    args = ap.parse_args(argv)
    try:
        if args.action == "up":
            up(args.dir, args.bootstrap)
        else:
            down(args.dir)
    except (ServerDidNotStart, OSError) as exc:
        print(f"playground: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
