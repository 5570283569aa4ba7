"""DLQ records: how the bridge writes a command it cannot take, and how it reads one back. Pure.

A DLQ record (:func:`encode`) is the original command record, bytes and key
unchanged, with the original record's headers first and then the bridge's own
``dlq_*`` headers: why (``dlq_reason``, ``dlq_detail``), where it came from
(``dlq_topic``, ``dlq_partition``, ``dlq_offset``), when and by which bridge
(``dlq_time``, ``dlq_bridge_version``), what it was (``dlq_command_id``,
``dlq_command_type``), and whether the copy is whole (``dlq_truncated``,
``dlq_original_bytes``, ``dlq_sha256``; ``dlq_key_bytes`` for a key cut short;
``dlq_headers_dropped``).

:func:`decode` reads one back as a :class:`DeadLetter`. The original headers
are those that are neither ``dlq_*`` nor an earlier replay's
``bridge_replay_of`` (:func:`original_headers`); a replay carries them, marked
with its own ``bridge_replay_of`` (:func:`replay_headers`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

from bridge import __version__
from bridge.core.partition.budgets import Headers, record_size
from bridge.core.task.commands import Command
from bridge.wire.events import rfc3339

PREFIX = "dlq_"
REASON = "dlq_reason"
DETAIL = "dlq_detail"
TOPIC = "dlq_topic"
PARTITION = "dlq_partition"
OFFSET = "dlq_offset"
TIME = "dlq_time"
BRIDGE_VERSION = "dlq_bridge_version"
COMMAND_ID = "dlq_command_id"
COMMAND_TYPE = "dlq_command_type"
HEADERS_DROPPED = "dlq_headers_dropped"
KEY_BYTES = "dlq_key_bytes"
TRUNCATED = "dlq_truncated"
ORIGINAL_BYTES = "dlq_original_bytes"
SHA256 = "dlq_sha256"
# Not a dlq_* header: a replayed command carries it back to the commands topic.
REPLAY_HEADER = "bridge_replay_of"

# A DLQ copy keeps the original key up to this many bytes (the rest of the
# record budget goes to the value).
MAX_KEY_BYTES = 1024
# Original headers copied onto a DLQ record, at most this many bytes in all.
MAX_HEADER_BYTES = 4096
# The detail is a sentence for an operator, not a payload.
MAX_DETAIL_BYTES = 1000


class Original(Protocol):
    """The command record a DLQ copy is made of (an aiokafka ``ConsumerRecord``)."""

    @property
    def topic(self) -> str: ...
    @property
    def partition(self) -> int: ...
    @property
    def offset(self) -> int: ...
    @property
    def key(self) -> bytes | None: ...
    @property
    def value(self) -> bytes | None: ...
    @property
    def headers(self) -> Sequence[tuple[str, bytes | None]] | None: ...


class Stored(Original, Protocol):
    """A DLQ record as read from its topic."""

    @property
    def timestamp(self) -> int: ...


def encode(
    raw: Original,
    reason: str,
    detail: str,
    command: Command | None,
    *,
    budget: int,
    now: float,
    refused: bool = False,
) -> tuple[bytes | None, bytes, Headers]:
    """A DLQ copy of ``raw`` within ``budget``: its headers, then why it is here;
    ``now`` (Unix seconds) is when.

    A copy too large keeps the first bytes of the value that fit, and says so:
    ``dlq_truncated``, ``dlq_original_bytes`` and ``dlq_sha256`` of the whole
    original value. A copy the broker ``refused`` keeps no value at all.
    """
    value = raw.value or b""
    own: Headers = [
        (REASON, reason.encode()),
        (DETAIL, detail.encode()[:MAX_DETAIL_BYTES]),
        (TOPIC, raw.topic.encode()),
        (PARTITION, str(raw.partition).encode()),
        (OFFSET, str(raw.offset).encode()),
        (TIME, rfc3339(now).encode()),
        (BRIDGE_VERSION, __version__.encode()),
    ]
    if command is not None:
        own.append((COMMAND_ID, command.command_id.encode()))
        own.append((COMMAND_TYPE, command.type.encode()))
    original: Headers = [(k, v or b"") for k, v in raw.headers or ()]
    if sum(len(k) + len(v) for k, v in original) > MAX_HEADER_BYTES:
        original = []
        own.append((HEADERS_DROPPED, b"true"))
    key = raw.key
    if key is not None and len(key) > MAX_KEY_BYTES:
        own.append((KEY_BYTES, str(len(key)).encode()))
        key = key[:MAX_KEY_BYTES]
    headers = original + own
    if not refused and record_size(key, value, headers) <= budget:
        return key, value, headers
    headers += [
        (TRUNCATED, b"true"),
        (ORIGINAL_BYTES, str(len(value)).encode()),
        (SHA256, hashlib.sha256(value).hexdigest().encode()),
    ]
    room = 0 if refused else max(0, budget - record_size(key, b"", headers))
    return key, value[:room], headers


def _text(value: bytes | None) -> str:
    return (value or b"").decode("utf-8", "replace")


def _number(value: bytes | None) -> int | None:
    text = _text(value)
    return int(text) if text.isdigit() else None


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """One DLQ record, as read: where it is, its bytes, and what its headers say."""

    topic: str
    partition: int
    offset: int
    timestamp_ms: int
    key: bytes | None
    value: bytes
    headers: tuple[tuple[str, bytes], ...]

    def header(self, name: str) -> bytes | None:
        """The last header of that name: the bridge's own come after the original
        record's, which a producer could have named the same."""
        found = None
        for k, v in self.headers:
            if k == name:
                found = v
        return found

    @property
    def origin(self) -> str:
        """This DLQ record's address, the value of ``bridge_replay_of``."""
        return f"{self.topic}/{self.partition}/{self.offset}"

    @property
    def reason(self) -> str:
        return _text(self.header(REASON)) or "?"

    @property
    def detail(self) -> str:
        return _text(self.header(DETAIL))

    @property
    def command_type(self) -> str | None:
        return _text(self.header(COMMAND_TYPE)) or None

    @property
    def command_id(self) -> str | None:
        return _text(self.header(COMMAND_ID)) or None

    @property
    def bridge_version(self) -> str | None:
        return _text(self.header(BRIDGE_VERSION)) or None

    @property
    def original_topic(self) -> str | None:
        t = self.header(TOPIC)
        return None if t is None else _text(t)

    @property
    def original_partition(self) -> int | None:
        return _number(self.header(PARTITION))

    @property
    def original_offset(self) -> int | None:
        return _number(self.header(OFFSET))

    @property
    def original(self) -> str:
        """Where the command was read: ``topic/partition/offset`` (``?`` for a part not said)."""
        parts = [self.header(h) for h in (TOPIC, PARTITION, OFFSET)]
        return "/".join(_text(p) or "?" for p in parts)

    @property
    def time(self) -> str:
        """When the bridge sent it to the DLQ: ``dlq_time``, else the record's timestamp."""
        stamped = self.header(TIME)
        return _text(stamped) if stamped else rfc3339(self.timestamp_ms / 1000)

    @property
    def truncated(self) -> bool:
        return self.header(TRUNCATED) == b"true"

    def original_bytes(self) -> int:
        """The size of the original value (more than this copy holds when truncated)."""
        n = _number(self.header(ORIGINAL_BYTES))
        return len(self.value) if n is None else n

    @property
    def sha256(self) -> str | None:
        """The SHA-256 of the whole original value, hex, on a truncated copy."""
        return _text(self.header(SHA256)) or None

    @property
    def key_cut(self) -> bool:
        """The key was cut to :data:`MAX_KEY_BYTES` (its length: ``dlq_key_bytes``)."""
        return self.header(KEY_BYTES) is not None

    @property
    def headers_dropped(self) -> bool:
        """The original headers were too large to keep."""
        return bool(self.header(HEADERS_DROPPED))

    @property
    def replay_of(self) -> str | None:
        """The DLQ record this command was itself a replay of (an original header)."""
        return _text(self.header(REPLAY_HEADER)) or None

    def original_headers(self) -> Headers:
        return original_headers(self.headers)


def decode(record: Stored) -> DeadLetter:
    headers = tuple((k, v or b"") for k, v in record.headers or ())
    return DeadLetter(
        record.topic, record.partition, record.offset, record.timestamp, record.key, record.value or b"", headers
    )


def original_headers(headers: Iterable[tuple[str, bytes]]) -> Headers:
    """The headers a replay carries over: every one but the ``dlq_*`` ones and an
    earlier replay's mark."""
    return [(k, v) for k, v in headers if not k.startswith(PREFIX) and k != REPLAY_HEADER]


def replay_headers(e: DeadLetter) -> Headers:
    """The headers of ``e``'s replay: the original ones, marked with where it was in the DLQ."""
    return [*original_headers(e.headers), (REPLAY_HEADER, e.origin.encode())]
