"""The `bridge` command line (bridge.cli) without Kafka: usage errors in one line,
exit codes, commands validated before anything is produced, and the partition
`inspect` reads."""

from __future__ import annotations

import argparse

import pytest

import bridge
from bridge.cli import UsageError, build_command, main, parser, validate_command
from bridge.config.model import AgentConfig, Config, KafkaConfig
from bridge.ops.inspect import key_partition

CONFIG = Config(agents={"writer": AgentConfig(name="writer", url="http://w/a2a")})


def args(*argv: str) -> argparse.Namespace:
    return parser().parse_args(list(argv))


def test_help_lists_the_exit_codes(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main(["--help"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    for code in ("0    ok", "1    nothing found", "2    bad configuration or usage", "3    fenced", "130  interrupted"):
        assert code in out
    for command in ("run", "topics", "start", "reply", "cancel", "tail", "inspect", "dlq", "config", "demo"):
        assert command in out


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0
    assert capsys.readouterr().out == f"bridge {bridge.__version__}\n"


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["tail", "--bogus"], "unrecognized arguments: --bogus"),
        (["start", "--task-key", "k"], "the following arguments are required: --agent"),
        (["dlq", "list", "--limit", "0"], "argument --limit: must be 1 or more: 0"),
        (["dlq", "replay", "--offset", "x"], "argument --offset: not a whole number: 'x'"),
        (["dlq", "replay", "--offset", "1", "--reason", "r"], "not allowed with argument"),
        (["dlq", "replay"], "one of the arguments --offset --reason is required"),
        (["nope"], "invalid choice: 'nope'"),
    ],
)
def test_a_bad_flag_is_one_line_and_exit_2(argv: list[str], says: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main(argv)
    assert done.value.code == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and says in err, err
    assert err.startswith("bridge") and "--help" in err


def test_a_start_can_continue_a_conversation() -> None:
    cmd = build_command(args("start", "--task-key", "k", "--agent", "writer", "--text", "hi", "--context-id", "ctx-1"))
    assert cmd["contextId"] == "ctx-1"
    assert b'"contextId":"ctx-1"' in validate_command(CONFIG, cmd)
    assert "contextId" not in build_command(args("start", "--task-key", "k", "--agent", "writer", "--text", "hi"))
    empty = build_command(args("start", "--task-key", "k", "--agent", "writer", "--text", "x", "--context-id", ""))
    with pytest.raises(UsageError, match=r"\(schema-violation\): contextId"):
        validate_command(CONFIG, empty)


def test_a_value_given_is_never_dropped_unsaid() -> None:
    # 0 and "" are values an operator typed: refused with a reason, not sent as if absent.
    start = ("start", "--task-key", "k", "--agent", "writer", "--text", "x")
    zero = build_command(args(*start, "--deadline-seconds", "0"))
    with pytest.raises(UsageError, match=r"\(schema-violation\): deadlineSeconds"):
        validate_command(CONFIG, zero)
    with pytest.raises(UsageError, match=r"^--metadata: not JSON \("):
        build_command(args(*start, "--metadata", ""))


def test_bad_json_arguments_are_usage_errors() -> None:
    with pytest.raises(UsageError, match=r"^--data: not JSON \("):
        build_command(args("start", "--task-key", "k", "--agent", "writer", "--data", "{bad"))
    with pytest.raises(UsageError, match=r"^--metadata: must be a JSON object, not list$"):
        build_command(args("start", "--task-key", "k", "--agent", "writer", "--text", "x", "--metadata", "[1]"))


def test_a_command_is_validated_against_the_command_schema() -> None:
    ok = build_command(args("start", "--task-key", "k", "--agent", "writer", "--text", "hi", "--command-id", "c1"))
    assert validate_command(CONFIG, ok).startswith(b'{"type":"start","commandId":"c1","taskKey":"k"')
    with pytest.raises(UsageError, match=r"^no message to send: give --text, --data \(a JSON object\) or both$"):
        build_command(args("start", "--task-key", "k", "--agent", "writer"))
    with pytest.raises(UsageError, match=r"^no message to send"):
        build_command(args("reply", "--task-key", "k"))
    empty = {**ok, "message": {"role": "user", "parts": []}}
    with pytest.raises(UsageError, match=r"^the start command is not valid \(schema-violation\): message/parts"):
        validate_command(CONFIG, empty)
    long_key = build_command(args("cancel", "--task-key", "k" * 300))
    with pytest.raises(UsageError, match=r"schema-violation"):
        validate_command(CONFIG, long_key)
    with pytest.raises(UsageError, match=r"^no agent 'nobody' in the config's registry \(known: writer\)"):
        validate_command(CONFIG, build_command(args("start", "--task-key", "k", "--agent", "nobody", "--text", "x")))
    # Without a registry in the config (a producer's own config) the agent is the bridge's to judge.
    assert validate_command(Config(), build_command(args("start", "--task-key", "k", "--agent", "x", "--text", "y")))
    big = Config(kafka=KafkaConfig(max_command_bytes=100), agents=CONFIG.agents)
    with pytest.raises(UsageError, match=r"\(oversize\)"):
        validate_command(big, build_command(args("start", "--task-key", "k", "--agent", "writer", "--text", "x" * 200)))


def test_an_invalid_start_is_refused_before_kafka_is_asked(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Nothing listens there: had the command gone as far as Kafka, the error would say so.
    monkeypatch.setenv("BRIDGE_KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:1")
    monkeypatch.delenv("BRIDGE_CONFIG", raising=False)
    assert main(["start", "--task-key", "k", "--agent", "a", "--data", "{bad"]) == 2
    assert capsys.readouterr().err.startswith("bridge: --data: not JSON")
    assert main(["start", "--task-key", "k", "--agent", "a"]) == 2
    err = capsys.readouterr().err
    assert err == "bridge: no message to send: give --text, --data (a JSON object) or both\n"
    assert main(["start", "--task-key", "k", "--agent", "a", "--text", "x", "--deadline-seconds", "-1"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("bridge: the start command is not valid") and len(err.splitlines()) == 1


# Kafka's own test vectors for its murmur2 (Utils.murmur2 in the Java client), so
# the partition inspect reads is the one the Java producer (and the bridge) picks.
JAVA_MURMUR2 = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
}


@pytest.mark.parametrize("partitions", [1, 3, 6, 12, 100])
def test_inspect_reads_the_partition_a_task_key_hashes_to(partitions: int) -> None:
    for key, h in JAVA_MURMUR2.items():
        # Kafka: Utils.toPositive(murmur2(key)) % numPartitions
        assert key_partition(key.decode(), partitions) == (h & 0x7FFFFFFF) % partitions
