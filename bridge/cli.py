"""The ``bridge`` command: run the service, manage topics, write commands, read events."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
import uuid
from collections.abc import Sequence
from typing import Any

import orjson

import bridge
from bridge import config as config_mod
from bridge import logs
from bridge.config import Config, ConfigError
from bridge.errors import BridgeError
from bridge.preflight import PREFLIGHT_TIMEOUT_SECONDS, KafkaUnreachable, check_kafka

log = logging.getLogger("bridge")


def _message(text: str | None, data: str | None) -> dict[str, Any]:
    parts: list[dict[str, Any]] = []
    if text is not None:
        parts.append({"kind": "text", "text": text})
    if data is not None:
        parts.append({"kind": "data", "data": orjson.loads(data)})
    return {"role": "user", "parts": parts}


def build_command(args: argparse.Namespace) -> dict[str, Any]:
    cmd: dict[str, Any] = {
        "type": args.cmd,
        "commandId": args.command_id or str(uuid.uuid4()),
        "taskKey": args.task_key,
    }
    if args.cmd == "start":
        cmd["agent"] = args.agent
        if args.deadline_seconds:
            cmd["deadlineSeconds"] = args.deadline_seconds
        if args.metadata:
            cmd["metadata"] = orjson.loads(args.metadata)
    if args.cmd in ("start", "reply"):
        cmd["message"] = _message(args.text, args.data)
    return cmd


def parser() -> argparse.ArgumentParser:
    # --config and --log-level work before or after the subcommand.
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--config", default=argparse.SUPPRESS, help="TOML config file (default: $BRIDGE_CONFIG)")
    common.add_argument("--log-level", default=argparse.SUPPRESS, help="debug, info, warning (default: info)")
    common.add_argument(
        "--log-format",
        choices=("text", "json"),
        default=argparse.SUPPRESS,
        help="text, or one JSON object per line (default: $BRIDGE_LOG_FORMAT, else text)",
    )
    p = argparse.ArgumentParser(prog="bridge", description=__doc__, parents=[common])
    p.add_argument("--version", action="version", version=f"bridge {bridge.__version__}")
    sub = p.add_subparsers(dest="cmd", required=True)
    sub.add_parser("run", help="run the bridge service", parents=[common])
    t = sub.add_parser("topics", help="create (or --check) the bridge's topics, co-partitioned", parents=[common])
    t.add_argument("--check", action="store_true", help="only verify; create nothing")
    for name in ("start", "reply", "cancel"):
        c = sub.add_parser(name, help=f"write a {name} command", parents=[common])
        c.add_argument("--task-key", required=True)
        c.add_argument("--command-id")
        if name == "start":
            c.add_argument("--agent", required=True)
            c.add_argument("--deadline-seconds", type=float)
            c.add_argument("--metadata", help="JSON object: the business record")
        if name in ("start", "reply"):
            c.add_argument("--text")
            c.add_argument("--data", help="a JSON object sent as a data part")
    tl = sub.add_parser("tail", help="print events (read_committed)", parents=[common])
    tl.add_argument("--timeline", action="store_true", help="readable lines instead of JSON")
    tl.add_argument("--from-beginning", action="store_true")
    tl.add_argument(
        "--until-closed", metavar="TASK_KEYS", help="comma-separated taskKeys: exit once each has a terminal event"
    )
    tl.add_argument("--timeout", type=float, default=0, help="give up after this many seconds (exit 1)")
    i = sub.add_parser("inspect", help="checkpoint, event history and diagnosis of a Task", parents=[common])
    i.add_argument("key", help="a taskKey or a taskId")
    d = sub.add_parser("demo", help="everything local: agents, topics, the bridge, a few Tasks", parents=[common])
    d.add_argument("--timeout", type=float, default=120)
    return p


async def _produce(config: Config, cmd: dict[str, Any]) -> None:
    from aiokafka import AIOKafkaProducer

    producer = AIOKafkaProducer(enable_idempotence=True, acks="all", **config.kafka.client_options())
    await producer.start()
    try:
        await producer.send_and_wait(config.kafka.commands_topic, orjson.dumps(cmd), key=cmd["taskKey"].encode())
    finally:
        await producer.stop()


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    logs.setup(getattr(args, "log_level", "info"), getattr(args, "log_format", None))
    try:
        config = config_mod.load(getattr(args, "config", None))
        if args.cmd in ("run", "topics"):
            # A wrong password, CA or ACL: one line and exit 2, where aiokafka would
            # report a broker that is down.
            try:
                asyncio.run(check_kafka(config, PREFLIGHT_TIMEOUT_SECONDS))
            except KafkaUnreachable:
                if args.cmd == "topics":
                    raise
                # `run` waits for Kafka (not ready meanwhile), and checks again in that loop.
        return asyncio.run(_dispatch(args, config))
    except (ConfigError, BridgeError) as exc:
        # One line, never a traceback: what is wrong and where (never a secret).
        # BridgeError covers preflight's StartupError and KafkaUnreachable.
        print(f"bridge: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


async def _dispatch(args: argparse.Namespace, config: Config) -> int:
    if args.cmd == "run":
        from bridge.service import serve

        return await serve(config)
    if args.cmd == "topics":
        from bridge import topics

        async with topics.kafka_errors(config):
            counts = await topics.ensure(config, create=not args.check)
        for name, n in sorted(counts.items()):
            print(f"{name}\t{n} partitions")
        return 0
    if args.cmd in ("start", "reply", "cancel"):
        cmd = build_command(args)
        await _produce(config, cmd)
        print(orjson.dumps(cmd).decode())
        return 0
    if args.cmd == "tail":
        from bridge.tail import tail

        keys = set(args.until_closed.split(",")) if args.until_closed else None
        return await tail(
            config,
            timeline=args.timeline,
            from_beginning=args.from_beginning or bool(keys),
            until_closed=keys,
            timeout=args.timeout,
        )
    if args.cmd == "inspect":
        from bridge.inspect import inspect

        return await inspect(config, args.key)
    if args.cmd == "demo":
        from bridge.demo.run import demo

        return await demo(config, timeout=args.timeout)
    raise AssertionError(args.cmd)
