"""The `bridge` command: run the service, manage topics, write commands, read events.

Its help texts are shown as they are written here, so they are plain text.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import sys
import textwrap
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, NoReturn

import orjson

import bridge
from bridge import pipe
from bridge.config import model as config_mod
from bridge.config.model import Config, ConfigError
from bridge.config.rules import Problem
from bridge.errors import BridgeError, StartupError
from bridge.kafka.auth import client_options
from bridge.kafka.preflight import PREFLIGHT_TIMEOUT_SECONDS, KafkaUnreachable, check_kafka
from bridge.observe import logs
from bridge.ops import NothingFound

log = logging.getLogger("bridge")

DESCRIPTION = "Run the A2A Kafka bridge, manage its topics, write commands, read events and dead letters."

EXIT_CODES = """\
exit codes:
  0    ok
  1    nothing found, or gave up waiting (tail, inspect, dlq); the service
       stopped on an unexpected error (run)
  2    bad configuration or usage, a command that fails validation, Kafka
       unreachable or refusing (wrong password, certificate, ACL) for a one-shot
       command, or the service cannot start
  3    fenced: a bridge outside the consumer group took its partitions (run)
  130  interrupted (Ctrl-C)
  141  stdout closed by its reader (bridge tail | head): the command stopped
       writing, quietly, as a process that SIGPIPE ends
"""

# What each subcommand does: its line in `bridge --help`, then the description
# atop its own --help.
COMMANDS: dict[str, tuple[str, str]] = {
    "run": (
        "run the bridge service",
        "Run the bridge service: consume commands, follow each agent Task, publish its events exactly once. "
        "SIGTERM finishes the open transactions and exits 0; Ctrl-C (SIGINT) does the same and exits 130.",
    ),
    "topics": (
        "create (or --check) the bridge's topics, co-partitioned",
        "Create the topics the config names (commands, events, checkpoints, DLQ), the checkpoints topic "
        "with as many partitions as the commands topic; with --check, only verify them.",
    ),
    "start": (
        "write a start command (validated first: an invalid one is not written)",
        "Write a start command for --agent with the message --text and/or --data, validated against "
        "schemas/command.schema.json (and the config's agent registry) before anything is produced.",
    ),
    "reply": (
        "write a reply command (validated first: an invalid one is not written)",
        "Write a reply to a Task waiting for input: the message --text and/or --data, validated before "
        "anything is produced.",
    ),
    "cancel": (
        "write a cancel command (validated first: an invalid one is not written)",
        "Write a cancel command for the Task of --task-key, validated before anything is produced.",
    ),
    "tail": (
        "print events (read_committed)",
        "Print events as downstream sees them (read_committed): JSON lines in each partition's order, "
        "or with --timeline readable lines ordered by time across partitions (each Task's events stay in "
        "seq order; a line waits up to a few seconds for an earlier event of another partition).",
    ),
    "inspect": (
        "checkpoint, event history and diagnosis of a Task",
        "Show one Task: its checkpoint, its events and the diagnosis order of docs/gateway-protocol.md; "
        "reads only the partitions its keys hash to. With --live, also ask the agent (tasks/get).",
    ),
    "tasks": (
        "the Task table: which Tasks there are, and each one's state",
        "Read the Task table (kafka.tasks_topic): one row per taskKey, its Task's latest state, "
        "written with the events that moved it. Never reads the events.",
    ),
    "tasks list": (
        "one line per Task (bounded: never waits), filtered by agent, state and age",
        "One line per row of the Task table, oldest change first, read up to the end offsets found at "
        "the start. --state matches the agent's state (input-required, working, ...), the bridge's "
        "outcome (timeout, cancel-requested, ...), live or terminal.",
    ),
    "tasks show": (
        "one Task's row, as JSON",
        "One taskKey's row of the Task table as JSON, read from the one partition its key hashes to.",
    ),
    "dlq": (
        "read the dead-letter topics, replay what can be acted on now",
        "Read the dead-letter topics (list), or send dead letters back to the commands topic (replay).",
    ),
    "dlq list": (
        "one line per DLQ record (bounded: never waits)",
        "One line per DLQ record, oldest first per partition, read up to the end offsets found at the "
        "start: when, where, why, the command, its key, where it came from, size, detail.",
    ),
    "dlq replay": (
        "re-produce DLQ records' original bytes to the commands topic (idempotent)",
        "Re-produce DLQ records' original bytes and key to the commands topic they came from. A record "
        "replayed already, and a DLQ copy of a replay that came back, are skipped and named; --again "
        "replays a command's newest copy once more after its cause is fixed.",
    ),
    "config": ("check the configuration", "Check the configuration file and the BRIDGE_* variables."),
    "config check": (
        "every problem at once, then the effective configuration (secrets redacted)",
        "Every problem of the configuration at once (with the nearest known name for a misspelt one), "
        "then the effective configuration as TOML, secrets only as the file or variable they come from.",
    ),
    "demo": (
        "everything local: agents, topics, the bridge, a few Tasks",
        "Everything local: the demo gateway and a2a-sdk agents, fresh topics, the bridge, a few Tasks, "
        "and their timeline ordered by time until every Task has ended.",
    ),
}

# --log-level's words: a misspelt one is a usage error that names them (exit 2), not
# the logging module's ValueError.
LOG_LEVELS = ("debug", "info", "warning", "error")

# Commands that talk to Kafka once and exit: Kafka problems are one line and exit 2.
ONE_SHOT = ("topics", "start", "reply", "cancel", "tail", "inspect", "tasks", "dlq")


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
    if text is None and data is None:
        raise UsageError("no message to send: give --text, --data (a JSON object) or both")
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
        # A value given is sent as given, 0 and "" too: the schema (or the JSON
        # reader) refuses a bad one rather than the CLI dropping it unsaid.
        if args.deadline_seconds is not None:
            cmd["deadlineSeconds"] = args.deadline_seconds
        if args.metadata is not None:
            cmd["metadata"] = _json_arg(args.metadata, "--metadata")
        if args.context_id is not None:
            cmd["contextId"] = args.context_id
    if args.cmd in ("start", "reply"):
        cmd["message"] = _message(args.text, args.data)
    return cmd


def validate_command(config: Config, cmd: dict[str, Any]) -> bytes:
    """The record value of ``cmd``, refused (:class:`UsageError`) unless the bridge
    would act on it: the command schema, as :func:`bridge.wire.commands.decode` applies
    it, and an agent this config's registry has."""
    from bridge.config import schemas
    from bridge.wire.commands import Invalid, decode

    value = orjson.dumps(cmd)
    decoded = decode(
        value, cmd["taskKey"].encode(), max_bytes=config.kafka.max_command_bytes, schema=schemas.schema("command")
    )
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


Command = Callable[..., argparse.ArgumentParser]


def parser() -> argparse.ArgumentParser:
    # --config and --log-level work before or after the subcommand.
    common = Parser(add_help=False)
    common.add_argument("--config", default=argparse.SUPPRESS, help="TOML config file (default: $BRIDGE_CONFIG)")
    common.add_argument(
        "--log-level",
        type=str.lower,
        choices=LOG_LEVELS,
        default=argparse.SUPPRESS,
        help=f"{', '.join(LOG_LEVELS)} (default: info)",
    )
    common.add_argument(
        "--log-format",
        choices=("text", "json"),
        default=argparse.SUPPRESS,
        help="text, or one JSON object per line (default: $BRIDGE_LOG_FORMAT, else text)",
    )
    p = Parser(
        prog="bridge",
        description=textwrap.fill(DESCRIPTION, 79),
        parents=[common],
        epilog=EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--version", action="version", version=f"bridge {bridge.__version__}")
    sub = p.add_subparsers(dest="cmd", required=True, metavar="COMMAND")

    def command(name: str, under: Any = sub) -> argparse.ArgumentParser:
        line, description = COMMANDS[name]
        return under.add_parser(  # type: ignore[no-any-return]
            name.rsplit(maxsplit=1)[-1],
            help=line,
            description=textwrap.fill(description, 79),
            parents=[common],
            epilog=EXIT_CODES,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )

    command("run")
    command("topics").add_argument("--check", action="store_true", help="only verify; create nothing")
    _writers(command)
    _readers(command)
    _tasks(command)
    _dlq(command)
    csub = command("config").add_subparsers(dest="config_cmd", required=True, metavar="ACTION")
    cc = command("config check", csub)
    for flag, meaning in (
        ("--static", "do not check that the secret, certificate and CA files or variables it names exist here"),
        (
            "--live",
            "also get each agent's token and card, and describe every topic the config names: one line per "
            "agent whose credentials would not do, per topic missing, not co-partitioned or not compacted",
        ),
    ):
        cc.add_argument(flag, action="store_true", help=meaning)
    dm = command("demo")
    dm.add_argument("--timeout", type=float, default=120, help="give up after this many seconds (exit 1)")
    return p


def _writers(command: Command) -> None:
    """start, reply, cancel."""
    for name in ("start", "reply", "cancel"):
        c = command(name)
        c.add_argument("--task-key", required=True, help="the Task's key (the record key)")
        c.add_argument("--command-id", help="default: a new UUID; the same commandId again has no second effect")
        if name == "start":
            c.add_argument("--agent", required=True, help="the agent's name in the bridge's registry")
            c.add_argument(
                "--deadline-seconds", type=float, help="default: the bridge's bridge.default_deadline_seconds"
            )
            c.add_argument("--metadata", help="JSON object: the business record")
            c.add_argument(
                "--context-id", help="an earlier Task's contextId: the agent continues that conversation (its choice)"
            )
        if name in ("start", "reply"):
            c.add_argument("--text", help="the message's text part")
            c.add_argument("--data", help="a JSON object sent as a data part (with or without --text)")


def _readers(command: Command) -> None:
    """tail, inspect."""
    tl = command("tail")
    tl.add_argument(
        "--timeline", action="store_true", help="readable lines instead of JSON, ordered by time across partitions"
    )
    tl.add_argument("--from-beginning", action="store_true", help="from the oldest event kept, not from now")
    tl.add_argument(
        "--until-closed", metavar="TASK_KEYS", help="comma-separated taskKeys: exit once each has a terminal event"
    )
    tl.add_argument("--task-key", action="append", metavar="K", help="only this taskKey's events (repeatable)")
    tl.add_argument(
        "--agent", action="append", metavar="A", help="only this agent's events, from its events topic (repeatable)"
    )
    tl.add_argument("--timeout", type=float, default=0, help="give up after this many seconds (exit 1)")
    i = command("inspect")
    i.add_argument("key", help="a taskKey or a taskId")
    i.add_argument("--live", action="store_true", help="also ask the agent (tasks/get) and compare")


def _tasks(command: Command) -> None:
    tsub = command("tasks").add_subparsers(dest="tasks_cmd", required=True, metavar="ACTION")
    tl = command("tasks list", tsub)
    tl.add_argument("--agent", action="append", metavar="A", help="only this agent's Tasks (repeatable)")
    tl.add_argument(
        "--state", action="append", metavar="S", help="e.g. input-required, working, timeout, live (repeatable)"
    )
    tl.add_argument("--older-than", type=float, metavar="SECONDS", help="only rows that have not moved for this long")
    tl.add_argument("--newer-than", type=float, metavar="SECONDS", help="only rows that moved this recently")
    tl.add_argument("--limit", type=_whole(1), help="at most the N most recently moved")
    tl.add_argument("--json", action="store_true", help="JSON lines: the rows as they are")
    command("tasks show", tsub).add_argument("key", help="a taskKey")


def _dlq(command: Command) -> None:
    dsub = command("dlq").add_subparsers(dest="dlq_cmd", required=True, metavar="ACTION")
    dl = command("dlq list", dsub)
    dl.add_argument("--reason", help="only this dlq_reason, e.g. unknown-agent")
    dl.add_argument("--topic", action="append", help="a DLQ topic (repeatable; default: every DLQ topic of the config)")
    dl.add_argument("--limit", type=_whole(1), help="at most N records")
    dl.add_argument("--json", action="store_true", help="JSON lines (value as UTF-8 text, else base64)")
    dr = command("dlq replay", dsub)
    which = dr.add_mutually_exclusive_group(required=True)
    which.add_argument("--offset", type=_whole(0), help="the DLQ record at this offset")
    which.add_argument("--reason", help="every DLQ record with this dlq_reason")
    dr.add_argument("--partition", type=_whole(0), help="with --offset: the DLQ partition")
    dr.add_argument("--topic", action="append", help="a DLQ topic (repeatable; default: every DLQ topic of the config)")
    dr.add_argument("--dry-run", action="store_true", help="say what would be replayed; produce nothing")
    dr.add_argument(
        "--again",
        action="store_true",
        help="the cause is fixed: replay the newest copy of each chosen command, even one replayed before",
    )


async def _commands_topic_exists(config: Config) -> None:
    """Refuses, in one line, to produce to a commands topic that is not there (the
    producer would wait for it, then report the broker as not ready)."""
    from bridge.kafka import reading

    topic, where = config.kafka.commands_topic, config.kafka.bootstrap_servers
    if not (await reading.partition_counts(config, [topic])).get(topic):
        raise StartupError(f"the commands topic {topic!r} does not exist on {where} (`bridge topics` creates it)")


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
        # What the check finds is its output, one line per problem; the log lines of the
        # token sources and clients on the way would only repeat it.
        logging.getLogger("bridge").setLevel(logging.CRITICAL)
        with _quiet(("aiokafka", "bridge.identity")):
            live, lines = asyncio.run(_live(report.config))
        for problem in live:
            print(f"bridge config: {'warning: ' if problem.warning else ''}{problem}", file=sys.stderr)
        if any(not p.warning for p in live):
            return 2
        print("".join(f"# {line}\n" for line in lines), end="")
    print(check.render(report), end="")
    return 0


async def _live(config: Config) -> tuple[list[Problem], list[str]]:
    """``config check --live``: each agent's token and card (and the interface each is
    spoken to at), then every topic the config names as the cluster has it."""
    from bridge.agents.live import check_live
    from bridge.kafka import layout, topics

    found, lines = await check_live(config)
    try:
        await check_kafka(config, PREFLIGHT_TIMEOUT_SECONDS, read=True)
        async with topics.kafka_errors(config):
            found += layout.problems(config, await topics.survey(config))
    except BridgeError as exc:
        found.append(Problem("kafka.bootstrap_servers", f"the topics cannot be checked: {exc}"))
    return found, lines


def no_config_note(args: argparse.Namespace, config: Config, env: Mapping[str, str] = os.environ) -> str:
    """When no config file was given (no --config, no BRIDGE_CONFIG): that, and the
    defaults used, to go with a failure; else nothing. ``BRIDGE_*`` variables still
    apply (``make demo`` sets the bootstrap servers that way), and are named. Not for
    ``demo``: it makes topics and agents of its own, and takes only Kafka's address."""
    if getattr(args, "config", None) or env.get("BRIDGE_CONFIG") or args.cmd == "demo":
        return ""
    k = config.kafka
    agents = f"agents {', '.join(sorted(config.agents))}" if config.agents else "no agent registry"
    variables = sorted(v for v in env if v.startswith(("BRIDGE_KAFKA_", "BRIDGE_BRIDGE_", "BRIDGE_AGENTS_")))
    set_by = f"; set by the environment: {', '.join(variables)}" if variables else ""
    return (
        f"; no config file was given (--config or BRIDGE_CONFIG), so these are the defaults: Kafka "
        f"{k.bootstrap_servers}, commands topic {k.commands_topic!r}, events topic {k.events_topic!r}, "
        f"DLQ topic {k.dlq_topic!r}, {agents}{set_by}"
    )


def main(argv: Sequence[str] | None = None) -> int:
    # Once stdout's reader has gone (`bridge tail | head`), the command ends quietly
    # (bridge/pipe.py); everything still buffered is written before that can be told.
    stdout = sys.stdout
    sys.stdout = pipe.guarded(stdout)
    try:
        try:
            return _main(argv)
        finally:
            sys.stdout.flush()  # --help and --version end with SystemExit: theirs too
    except pipe.StdoutClosed:
        pipe.silence()
        return pipe.STDOUT_CLOSED
    finally:
        sys.stdout = stdout


def _main(argv: Sequence[str] | None) -> int:
    args = parser().parse_args(argv)
    level = getattr(args, "log_level", "info")
    logs.setup(level, getattr(args, "log_format", None))
    # aiokafka logs every failed connection attempt, the token source every failed
    # token request; a one-shot command (and `run`'s first check of Kafka) says what
    # went wrong in one line of its own instead.
    quiet = ("aiokafka", "bridge.identity") if level.upper() != "DEBUG" else ()
    config: Config | None = None
    try:
        if args.cmd == "config":
            return _config_check(args)
        # `run` also needs the secret and certificate files it names here, as
        # `bridge config check` does; a one-shot command reads only what it uses.
        config = config_mod.load(getattr(args, "config", None), here=args.cmd == "run")
        if args.cmd == "run" and (defaults := no_config_note(args, config)):
            # The service's first line: a bridge on the defaults, where a file was
            # meant, should be noticed before it says anything else.
            log.warning("running on the built-in defaults%s", defaults)
        if args.cmd == "demo":
            with _quiet(quiet):
                asyncio.run(_demo_broker(config))
        if args.cmd == "run":
            # A wrong password, CA or ACL: one line and exit 2, where aiokafka would
            # report a broker that is down. `run` waits for a broker that is down
            # (not ready meanwhile), and checks again in that loop.
            with contextlib.suppress(KafkaUnreachable), _quiet(quiet):
                asyncio.run(check_kafka(config, PREFLIGHT_TIMEOUT_SECONDS, read=True))
        with _quiet(quiet if args.cmd in ONE_SHOT else ()):
            return asyncio.run(_dispatch(args, config))
    except UsageError as exc:
        print(f"bridge: {exc}", file=sys.stderr)
        return 2
    except (ConfigError, BridgeError) as exc:
        # One line, never a traceback: what is wrong and where (never a secret).
        # BridgeError covers preflight's StartupError and KafkaUnreachable.
        note = no_config_note(args, config) if config is not None else ""
        print(f"bridge: {exc}{note}", file=sys.stderr)
        return 1 if isinstance(exc, NothingFound) else 2
    except KeyboardInterrupt:
        return 130


async def _demo_broker(config: Config) -> None:
    """The check every one-shot command makes, before the demo starts its agents: a
    broker that is not there is one line that says how to start one (exit 2)."""
    try:
        await check_kafka(config, PREFLIGHT_TIMEOUT_SECONDS)
    except KafkaUnreachable as exc:
        default = config_mod.KafkaConfig().bootstrap_servers
        raise KafkaUnreachable(
            f"the demo's broker is unreachable: {exc}; start one with `make kafka-up` (it listens on "
            f"{default}, the default), or run `make demo`, which starts one for the demo and stops it after"
        ) from None


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

        return await serve(config, note=no_config_note(args, config))
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
            await _commands_topic_exists(config)
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
    if args.cmd in ("tail", "inspect", "tasks"):
        return await _read(args, config)
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
            again=args.again,
        )
    raise AssertionError(args.cmd)


async def _read(args: argparse.Namespace, config: Config) -> int:
    """tail, inspect, tasks: the commands that only read."""
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
    if args.cmd == "tasks":
        from bridge.ops.tasks import Filters, tasks_list, tasks_show

        if args.tasks_cmd == "show":
            return await tasks_show(config, args.key)
        filters = Filters(frozenset(args.agent or ()), frozenset(args.state or ()), args.older_than, args.newer_than)
        return await tasks_list(config, filters, limit=args.limit, as_json_lines=args.json)
    raise AssertionError(args.cmd)
