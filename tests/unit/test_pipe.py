"""A closed stdout (bridge/pipe.py): EPIPE at a write is StdoutClosed, which no handler of
Kafka's errors takes for a broker that cannot be reached."""

from __future__ import annotations

import io

import pytest

from bridge import pipe
from bridge.kafka.errors import kafka_errors


class ClosedPipe(io.StringIO):
    """A pipe whose reader has gone: every write and flush is EPIPE."""

    def write(self, text: str) -> int:
        raise BrokenPipeError(32, "Broken pipe")

    def flush(self) -> None:
        raise BrokenPipeError(32, "Broken pipe")


def test_a_write_or_flush_to_a_closed_pipe_is_stdout_closed() -> None:
    out = pipe.guarded(ClosedPipe())
    with pytest.raises(pipe.StdoutClosed):
        print("a line", file=out)
    with pytest.raises(pipe.StdoutClosed):
        out.flush()


def test_it_passes_through_the_mapping_of_kafkas_errors() -> None:
    # Was: "Kafka at b:9092 is unreachable: BrokenPipeError(32, 'Broken pipe')", exit 2.
    out = pipe.guarded(ClosedPipe())
    with pytest.raises(pipe.StdoutClosed), kafka_errors("b:9092"):
        print("a line", file=out, flush=True)
    assert not issubclass(pipe.StdoutClosed, Exception)


def test_an_open_stream_is_written_as_it_is() -> None:
    stream = io.StringIO()
    out = pipe.guarded(stream)
    print("a line", file=out)
    out.flush()
    assert stream.getvalue() == "a line\n"
    assert out.getvalue() == "a line\n"  # type: ignore[attr-defined]  # everything else is the stream's
