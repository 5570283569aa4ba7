"""The ``bridge`` command: run the service, manage topics, write commands, read events."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import sys
import uuid
from collections.abc import Iterator, Sequence
from typing import Any, NoReturn

import orjson

import bridge
from bridge.config import model as config_mod
from bridge.config.model import Config, ConfigError
from bridge.errors import BridgeError
from bridge.kafka.auth import client_options
from bridge.kafka.preflight import PREFLIGHT_TIMEOUT_SECONDS, KafkaUnreachable, check_kafka
from bridge.observe import logs

log = logging.getLogger("bridge")

EXIT_CODES = """\
exit codes:
  0    ok
  1    nothing found, or gave up waiting (tail, inspect, dlq)
  2    bad configuration or usage, a command that fails validation, Kafka
       unreachable or refusing (wrong password, certificate, ACL) for a one-shot
       command, or the service cannot start
  3    fenced: another bridge took over a partition (run)
  130  interrupted (Ctrl-C)
"""

# Commands that talk to Kafka once and exit: Kafka problems are one line and exit 2.
ONE_SHOT = ("topics", "start", "reply", "cancel", "tail", "inspect", "dlq")


class UsageError(BridgeError):
    """A flag or argument the command cannot use (exit 2)."""


class Parser(argparse.ArgumentParser):
    """argparse with a one-line error (what is wrong, and where to read more) and exit 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message} (see `{self.prog} --help`)\n")


def _json_arg(text: str, flag: str, *, obj: bool = True) -> Any:
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise UsageError(f"{flag}: not JSON ({exc})") from None
    if obj and not isinstance(value, dict):
        raise UsageError(f"{flag}: must be a JSON object, not {type(value).__name__}")
    return value


def _message(text: str | None, data: str | None) -> dict[str, Any]:
    parts: list[dict[str, Any]] = []
    if text is not None:
        parts.append({"kind": "text", "text": text})
    if data is not None:
        parts.append({"kind": "data", "data": _json_arg(data, "--data")})
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
            cmd["metadata"] = _json_arg(args.metadata, "--metadata")
    if args.cmd in ("start", "reply"):
        cmd["message"] = _message(args.text, args.data)
    return cmd


def validate_command(config: Config, cmd: dict[str, Any]) -> bytes:
    """The record value of ``cmd``, refused (:class:`UsageError`) unless the bridge
    would act on it: the command schema, as :func:`bridge.wire.commands.decode` applies
    it, and an agent this config's registry has."""
    from bridge.wire.commands import Invalid, decode

    value = orjson.dumps(cmd)
    decoded = decode(value, cmd["taskKey"].encode(), max_bytes=config.kafka.max_command_bytes)
    if isinstance(decoded, Invalid):
        raise UsageError(f"the {cmd['type']} command is not valid ({decoded.reason}): {decoded.detail}")
    agent = cmd.get("agent")
    if agent is not None and config.agents and agent not in config.agents:
        known = ", ".join(sorted(config.agents))
        raise UsageError(f"no agent {agent!r} in the config's registry (known: {known}); the bridge would refuse it")
    return value


def _whole(least: int) -> Any:
    def parse(text: str) -> int:
        try:
            n = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
        if n < least:
            raise argparse.ArgumentTypeError(f"must be {least} or more: {n}")
        return n

    return parse


def parser() -> argparse.ArgumentParser:
    # --config and --log-level work before or after the subcommand.
    common = Parser(add_help=False)
    common.add_argument("--config", default=argparse.SUPPRESS, help="TOML config file (default: $BRIDGE_CONFIG)")
    common.add_argument("--log-level", default=argparse.SUPPRESS, help="debug, info, warning (default: info)")
    common.add_argument(
        "--log-format",
        choices=("text", "json"),
        default=argparse.SUPPRESS,
        help="text, or one JSON object per line (default: $BRIDGE_LOG_FORMAT, else text)",
    )
    p = Parser(
        prog="bridge",
        description=__doc__,
        parents=[common],
        epilog=EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--version", action="version", version=f"bridge {bridge.__version__}")
    sub = p.add_subparsers(dest="cmd", required=True, metavar="COMMAND")

    def command(name: str, text: str) -> argparse.ArgumentParser:
        return sub.add_parser(
            name, help=text, parents=[common], epilog=EXIT_CODES, formatter_class=argparse.RawDescriptionHelpFormatter
        )

    command("run", "run the bridge service")
    t = command("topics", "create (or --check) the bridge's topics, co-partitioned")
    t.add_argument("--check", action="store_true", help="only verify; create nothing")
    for name in ("start", "reply", "cancel"):
        c = command(name, f"write a {name} command (validated first: an invalid one is not written)")
        c.add_argument("--task-key", required=True)
        c.add_argument("--command-id")
        if name == "start":
            c.add_argument("--agent", required=True)
            c.add_argument("--deadline-seconds", type=float)
            c.add_argument("--metadata", help="JSON object: the business record")
        if name in ("start", "reply"):
            c.add_argument("--text")
            c.add_argument("--data", help="a JSON object sent as a data part")
    tl = command("tail", "print events (read_committed)")
    tl.add_argument("--timeline", action="store_true", help="readable lines instead of JSON")
    tl.add_argument("--from-beginning", action="store_true")
    tl.add_argument(
        "--until-closed", metavar="TASK_KEYS", help="comma-separated taskKeys: exit once each has a terminal event"
    )
    tl.add_argument("--task-key", action="append", metavar="K", help="only this taskKey's events (repeatable)")
    tl.add_argument(
        "--agent", action="append", metavar="A", help="only this agent's events, from its events topic (repeatable)"
    )
    tl.add_argument("--timeout", type=float, default=0, help="give up after this many seconds (exit 1)")
    i = command("inspect", "checkpoint, event history and diagnosis of a Task")
    i.add_argument("key", help="a taskKey or a taskId")
    i.add_argument("--live", action="store_true", help="also ask the agent (tasks/get) and compare")
    d = command("dlq", "read the dead-letter topics, replay what can be acted on now")
    dsub = d.add_subparsers(dest="dlq_cmd", required=True, metavar="ACTION")
    dl = dsub.add_parser("list", help="one line per DLQ record (bounded: never waits)", parents=[common])
    dl.add_argument("--reason", help="only this dlq_reason, e.g. unknown-agent")
    dl.add_argument("--topic", action="append", help="a DLQ topic (repeatable; default: every DLQ topic of the config)")
    dl.add_argument("--limit", type=_whole(1), help="at most N records")
    dl.add_argument("--json", action="store_true", help="JSON lines (value as UTF-8 text, else base64)")
    dr = dsub.add_parser(
        "replay", help="re-produce DLQ records' original bytes to the commands topic (idempotent)", parents=[common]
    )
    which = dr.add_mutually_exclusive_group(required=True)
    which.add_argument("--offset", type=_whole(0), help="the DLQ record at this offset")
    which.add_argument("--reason", help="every DLQ record with this dlq_reason")
    dr.add_argument("--partition", type=_whole(0), help="with --offset: the DLQ partition")
    dr.add_argument("--topic", action="append", help="a DLQ topic (repeatable; default: every DLQ topic of the config)")
    dr.add_argument("--dry-run", action="store_true", help="say what would be replayed; produce nothing")
    csub = command("config", "check the configuration").add_subparsers(
        dest="config_cmd", required=True, metavar="ACTION"
    )
    cc = csub.add_parser(
        "check", help="every problem at once, then the effective configuration (secrets redacted)", parents=[common]
    )
    for flag, meaning in (
        ("--static", "do not check that the secret, certificate and CA files or variables it names exist here"),
        ("--live", "also get each agent's token and card: one line per agent whose credentials would not do"),
    ):
        cc.add_argument(flag, action="store_true", help=meaning)
    dm = command("demo", "everything local: agents, topics, the bridge, a few Tasks")
    dm.add_argument("--timeout", type=float, default=120)
    return p


async def _produce(config: Config, key: bytes, value: bytes) -> None:
    from aiokafka import AIOKafkaProducer

    producer = AIOKafkaProducer(enable_idempotence=True, acks="all", **client_options(config.kafka))
    try:
        await producer.start()
        await producer.send_and_wait(config.kafka.commands_topic, value, key=key)
    finally:
        await producer.stop()


def _config_check(args: argparse.Namespace) -> int:
    from bridge.config import check

    report = check.check(getattr(args, "config", None), static=args.static)
    for w in report.warnings:
        print(f"bridge config: warning: {w}", file=sys.stderr)
    if not report.ok:
        n = len(report.errors)
        print(f"bridge config: {report.source}: {n} problem{'s' if n > 1 else ''}", file=sys.stderr)
        for e in report.errors:
            print(f"  {e}", file=sys.stderr)
        return 2
    if args.live and report.config is not None:
        if args.static:
            raise UsageError("--live uses the secrets and certificates here; it cannot go with --static")
        from bridge.agents.live import check_live

        # What the check finds is its output, one line per agent; the log lines of the
        # token sources and clients on the way would only repeat it.
        logging.getLogger("bridge").setLevel(logging.CRITICAL)
        live = asyncio.run(check_live(report.config))
        for problem in live:
            print(f"bridge config: {'warning: ' if problem.warning else ''}{problem}", file=sys.stderr)
        if any(not p.warning for p in live):
            return 2
    print(check.render(report), end="")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    level = getattr(args, "log_level", "info")
    logs.setup(level, getattr(args, "log_format", None))
    # aiokafka logs every failed connection attempt, the token source every failed
    # token request; a one-shot command (and `run`'s first check of Kafka) says what
    # went wrong in one line of its own instead.
    quiet = ("aiokafka", "bridge.identity") if level.upper() != "DEBUG" else ()
    try:
        if args.cmd == "config":
            return _config_check(args)
        # `run` also needs the secret and certificate files it names here, as
        # `bridge config check` does; a one-shot command reads only what it uses.
        config = config_mod.load(getattr(args, "config", None), here=args.cmd == "run")
        if args.cmd == "run":
            # A wrong password, CA or ACL: one line and exit 2, where aiokafka would
            # report a broker that is down. `run` waits for a broker that is down
            # (not ready meanwhile), and checks again in that loop.
            with contextlib.suppress(KafkaUnreachable), _quiet(quiet):
                asyncio.run(check_kafka(config, PREFLIGHT_TIMEOUT_SECONDS))
        with _quiet(quiet if args.cmd in ONE_SHOT else ()):
            return asyncio.run(_dispatch(args, config))
    except (ConfigError, BridgeError) as exc:
        # One line, never a traceback: what is wrong and where (never a secret).
        # BridgeError covers preflight's StartupError and KafkaUnreachable.
        print(f"bridge: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


@contextlib.contextmanager
def _quiet(names: Sequence[str]) -> Iterator[None]:
    """The loggers ``names`` silent for a while."""
    loggers = [logging.getLogger(n) for n in names]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        for lg, old in zip(loggers, levels, strict=True):
            lg.setLevel(old)


async def _dispatch(args: argparse.Namespace, config: Config) -> int:
    if args.cmd == "run":
        from bridge.engine.service import serve

        return await serve(config)
    if args.cmd == "demo":
        from bridge.demo.run import demo

        return await demo(config, timeout=args.timeout)
    # One-shot commands: what can be checked without Kafka first, then whether
    # Kafka answers (a refused password or certificate told apart from a broker
    # that is down), then the work, with aiokafka's errors mapped to ours.
    from bridge.kafka import topics

    if args.cmd in ("start", "reply", "cancel"):
        cmd = build_command(args)
        value = validate_command(config, cmd)
        await check_kafka(config, PREFLIGHT_TIMEOUT_SECONDS)
        async with topics.kafka_errors(config):
            await _produce(config, cmd["taskKey"].encode(), value)
        print(value.decode())
        return 0
    if args.cmd == "dlq" and args.dlq_cmd == "replay" and args.partition is not None and args.offset is None:
        raise UsageError("--partition goes with --offset")
    await check_kafka(config, PREFLIGHT_TIMEOUT_SECONDS)
    async with topics.kafka_errors(config):
        return await _one_shot(args, config)


async def _one_shot(args: argparse.Namespace, config: Config) -> int:
    if args.cmd == "topics":
        from bridge.kafka import topics

        counts = await topics.ensure(config, create=not args.check)
        for name, n in sorted(counts.items()):
            print(f"{name}\t{n} partitions")
        return 0
    if args.cmd == "tail":
        from bridge.ops.tail import tail

        keys = set(args.until_closed.split(",")) if args.until_closed else None
        return await tail(
            config,
            timeline=args.timeline,
            from_beginning=args.from_beginning or bool(keys),
            until_closed=keys,
            timeout=args.timeout,
            task_keys=set(args.task_key) if args.task_key else None,
            agents=set(args.agent) if args.agent else None,
        )
    if args.cmd == "inspect":
        from bridge.ops.inspect import inspect

        return await inspect(config, args.key, live_check=args.live)
    if args.cmd == "dlq":
        from bridge.ops import dlq

        if args.dlq_cmd == "list":
            return await dlq.dlq_list(config, args.topic, reason=args.reason, limit=args.limit, as_json_lines=args.json)
        return await dlq.dlq_replay(
            config,
            args.topic,
            offset=args.offset,
            partition=args.partition,
            reason=args.reason,
            dry_run=args.dry_run,
        )
    raise AssertionError(args.cmd)
