"""Scripted agent behaviours shared by the demo gateway and the a2a-sdk server.

A script is a pure generator of steps; the servers turn steps into A2A events
and sleep where told. Parameters come from ``key=value`` words in the user's
message text (``chunks=20 interval=0.01``), so a test chooses the shape of a
Task by what it writes in the command.

Agents:
- ``writer``: ``working`` (its status message padded to ``status_size``
  characters if given), then ``chunks`` artifact chunks (append/lastChunk)
  of one artifact ``result`` (each padded to ``size`` characters if given),
  then ``completed``.
- ``failer``: ``working``, then ``failed`` with a status message.
- ``asker``: ``working``, then ``input-required`` with a question; the next
  user message (turn 1) gets an artifact echoing the answer, then ``completed``.
  With ``auth=N`` it pauses in ``auth-required`` instead and goes on by itself
  after N seconds, as if the user had signed in out of band.
- ``sleeper``: ``working`` with a status message every ``interval`` seconds for
  ``ticks`` ticks, then ``completed``; the one to cancel or time out.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

AGENTS = ("writer", "failer", "asker", "sleeper")


@dataclass(frozen=True, slots=True)
class Status:
    state: str
    text: str | None = None


@dataclass(frozen=True, slots=True)
class Chunk:
    artifact_id: str
    name: str
    text: str
    append: bool
    last_chunk: bool


@dataclass(frozen=True, slots=True)
class Pause:
    seconds: float


Step = Status | Chunk | Pause


def params(text: str) -> dict[str, str]:
    """The ``key=value`` words of a message text."""
    out: dict[str, str] = {}
    for word in text.split():
        key, sep, value = word.partition("=")
        if sep and key:
            out[key] = value
    return out


def _num(p: dict[str, str], key: str, default: float) -> float:
    try:
        return float(p[key])
    except (KeyError, ValueError):
        return default


def chunk_text(i: int, n: int, size: int = 0) -> str:
    """Text of chunk ``i`` (0-based) of ``n``: distinct, ordered, easy to check."""
    text = f"[{i + 1}/{n}] lorem ipsum dolor sit amet {i * 7919 % 10007:05d}\n"
    return text + "é" * max(0, size - len(text))


def run(agent: str, text: str, turn: int = 0) -> Iterator[Step]:
    """Steps of ``agent`` for a user message; ``turn`` counts earlier messages."""
    p = params(text)
    interval = _num(p, "interval", 0.05)
    if agent == "writer":
        n = max(1, int(_num(p, "chunks", 5)))
        size = int(_num(p, "size", 0))
        status_size = int(_num(p, "status_size", 0))
        yield Status("working", "writing" + "s" * max(0, status_size - len("writing")))
        for i in range(n):
            yield Pause(interval)
            yield Chunk("result", "result", chunk_text(i, n, size), append=i > 0, last_chunk=i == n - 1)
        yield Status("completed")
    elif agent == "failer":
        yield Status("working")
        yield Pause(interval)
        yield Status("failed", "simulated failure: the tool crashed")
    elif agent == "asker" and "auth" in p:
        yield Status("working", "thinking")
        yield Pause(interval)
        yield Status("auth-required", "Sign in to the report store to continue")
        yield Pause(_num(p, "auth", 1.0))
        yield Status("working", "signed in")
        yield Pause(interval)
        yield Chunk("answer", "answer", "stored after sign-in", append=False, last_chunk=True)
        yield Status("completed")
    elif agent == "asker":
        if turn == 0:
            yield Status("working", "thinking")
            yield Pause(interval)
            yield Status("input-required", "Which format do you want? Options: json, csv")
        else:
            yield Status("working", "formatting")
            yield Pause(interval)
            yield Chunk("answer", "answer", f"you chose: {text}", append=False, last_chunk=True)
            yield Status("completed")
    elif agent == "sleeper":
        ticks = int(_num(p, "ticks", 20))
        interval = _num(p, "interval", 0.5)
        yield Status("working", "starting")
        for i in range(ticks):
            yield Pause(interval)
            yield Status("working", f"tick {i + 1}/{ticks}")
        yield Status("completed")
    else:
        raise KeyError(agent)
