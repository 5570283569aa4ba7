"""Server-Sent Events, parsed incrementally from bytes with a size cap. Pure.

Follows the WHATWG event-stream interpretation
(https://html.spec.whatwg.org/multipage/server-sent-events.html#event-stream-interpretation):
lines end in CRLF, LF or CR; ``data`` lines join with LF; a blank line
dispatches; an event with no data is not dispatched; ``id`` sets the last
event id, which carries over to later events. Two things differ on purpose:

- :attr:`Frame.id` is the id the frame *itself* carried (``None`` when it had
  no ``id:`` line), beside the carried-over :attr:`Frame.last_id`: a frame
  without an id is not a replay of the previous one;
- one event (and one unterminated line) may hold at most ``max_event_bytes``:
  a server that sends more raises :class:`EventTooLarge` instead of growing
  the bridge's memory without bound.
"""

from __future__ import annotations

from dataclasses import dataclass

_BOM = b"\xef\xbb\xbf"
# Reads larger than this whose lines end in LF are parsed in place (see Parser._lf_lines).
_FIND_BYTES = 4096


class EventTooLarge(ValueError):
    """One SSE event (or line) exceeded the cap."""


# Slotted, not frozen: one is made per SSE event, and a frozen dataclass's __init__
# (object.__setattr__ per field) costs several times as much. Nothing mutates a Frame.
@dataclass(slots=True)
class Frame:
    data: bytes
    id: str | None
    last_id: str
    event: str = ""


def _lf_ended(buf: bytes) -> tuple[bytes, bytes]:
    """``buf`` with its CRLF and CR line ends made LF, and a final CR held back
    (maybe the first half of a CRLF: the next read decides)."""
    held = b""
    if buf.endswith(b"\r"):
        buf, held = buf[:-1], b"\r"
    return buf.replace(b"\r\n", b"\n").replace(b"\r", b"\n"), held


class Parser:
    __slots__ = ("_data", "_event", "_id", "_last_id", "_max", "_open", "_open_size", "_size", "_started")

    def __init__(self, max_event_bytes: int) -> None:
        self._max = max_event_bytes
        # The line not yet ended, in the pieces it came in: joined once, when it ends.
        # Only the last piece may end in CR (maybe the first half of a CRLF).
        self._open: list[bytes] = []
        self._open_size = 0
        self._data: list[bytes] = []
        self._size = 0
        self._id: str | None = None
        self._last_id = ""
        self._event = ""
        self._started = False

    def feed(self, chunk: bytes) -> list[Frame]:
        """The events completed by ``chunk``, in order."""
        if not self._started:
            return self._start(chunk)
        pieces = self._open
        if not (pieces and pieces[-1][-1:] == b"\r"):
            if len(chunk) > _FIND_BYTES and b"\r" not in chunk and (end := chunk.find(b"\n")) >= 0:
                return self._lf_lines(chunk, end)
            if b"\n" not in chunk and b"\r" not in chunk:
                # Still inside a line: keep the read aside, not joined and split again
                # on every read, which made a long line quadratic in its reads.
                self._hold(chunk)
                return []
        # Any other read: joined to the open line, its line ends made LF, split.
        buf = b"".join([*pieces, chunk]) if pieces else chunk
        pieces.clear()
        self._open_size = 0
        held = b""
        if b"\r" in buf:
            buf, held = _lf_ended(buf)
        lines = buf.split(b"\n")
        rest = lines.pop()
        if len(rest) > self._max:
            raise EventTooLarge(f"an SSE line exceeds {self._max} bytes")
        if rest or held:
            pieces.append(rest + held)
            self._open_size = len(rest)
        out: list[Frame] = []
        # The per-event hot path: the common fields inline, the rest in _line.
        data, size = self._data, self._size
        for line in lines:
            if not line:
                data, size = self._dispatch(data, out), 0
            elif line.startswith(b"data:"):
                value = line[6:] if line[5:6] == b" " else line[5:]
                size += len(value) + 1
                if size > self._max:
                    raise EventTooLarge(f"an SSE event exceeds {self._max} bytes")
                data.append(value)
            else:
                self._data, self._size = data, size
                self._line(line, out)
        self._data, self._size = data, size
        return out

    def _start(self, chunk: bytes) -> list[Frame]:
        """:meth:`feed` of the stream's first bytes: a UTF-8 BOM, which may come
        split over reads, is dropped; the rest is fed as any read."""
        pieces = self._open
        buf = b"".join([*pieces, chunk]) if pieces else chunk
        pieces.clear()
        self._open_size = 0
        if len(buf) < len(_BOM) and _BOM.startswith(buf):
            self._hold(buf)
            return []
        self._started = True
        return self.feed(buf.removeprefix(_BOM))

    def _hold(self, piece: bytes) -> None:
        """Keep ``piece`` of a line not yet ended aside, within the cap."""
        self._open.append(piece)
        self._open_size += len(piece)
        if self._open_size > self._max:
            raise EventTooLarge(f"an SSE line exceeds {self._max} bytes")

    def _lf_lines(self, chunk: bytes, end: int) -> list[Frame]:
        """:meth:`feed` of a large chunk whose lines all end in LF (no CR in it, none
        held; ``end``: where its first line ends). Each line is found in place and only
        a data line's value is copied out, where :meth:`feed` copies a read three times
        (joined to the open line, split, each data value sliced). A small read is split:
        finding its few lines one by one costs more than copying them. Measured:
        bench/README.md, "SSE parsing"."""
        out: list[Frame] = []
        pieces = self._open
        pos = 0
        if pieces:  # the first line began in earlier reads
            line = b"".join([*pieces, chunk[:end]])
            pieces.clear()
            self._open_size = 0
            self._line(line, out)
            pos = end + 1
            end = chunk.find(b"\n", pos)
        data, size, cap = self._data, self._size, self._max
        while end >= 0:
            if end == pos:
                data, size = self._dispatch(data, out), 0
            elif chunk.startswith(b"data:", pos):
                start = pos + 6 if chunk[pos + 5 : pos + 6] == b" " else pos + 5
                size += end - start + 1
                if size > cap:
                    raise EventTooLarge(f"an SSE event exceeds {cap} bytes")
                data.append(chunk[start:end])
            else:
                self._data, self._size = data, size
                self._line(chunk[pos:end], out)
                data, size = self._data, self._size
            pos = end + 1
            end = chunk.find(b"\n", pos)
        self._data, self._size = data, size
        if pos < len(chunk):
            self._hold(chunk[pos:])
        return out

    def close(self) -> list[Frame]:
        """End of stream: a last line without its newline still counts; an
        event without its blank line is incomplete and is not dispatched."""
        out: list[Frame] = []
        line = b"".join(self._open).rstrip(b"\r")
        if line:
            self._line(line, out)
        self._open.clear()
        self._open_size = 0
        return out

    def _dispatch(self, data: list[bytes], out: list[Frame]) -> list[bytes]:
        """A blank line: the event so far, if it has data; the next one's (empty) data."""
        if data:
            out.append(Frame(b"\n".join(data), self._id, self._last_id, self._event))
            data = []
        self._id = None
        self._event = ""
        return data

    def _line(self, line: bytes, out: list[Frame]) -> None:
        if not line:
            self._data, self._size = self._dispatch(self._data, out), 0
            return
        if line[0] == 0x3A:  # ":" starts a comment
            return
        name, colon, value = line.partition(b":")
        if colon and value[:1] == b" ":
            value = value[1:]
        if name == b"data":
            self._size += len(value) + 1
            if self._size > self._max:
                raise EventTooLarge(f"an SSE event exceeds {self._max} bytes")
            self._data.append(value)
        elif name == b"id":
            if b"\x00" not in value:
                self._id = self._last_id = value.decode("utf-8", "replace")
        elif name == b"event":
            self._event = value.decode("utf-8", "replace")
        # retry and unknown fields are ignored
