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
  the bridge's memory without bound. The memory held is bounded too, not only
  the bytes counted: each data line kept apart costs an object and a list slot
  besides its bytes (2.8 million one-byte lines held 117 MiB for 8 MiB counted),
  so past the cap by that reckoning an event's lines are joined into one buffer.

A CR ends its line when it arrives, even at the end of a read (the event it
completes is dispatched then, not a read later); an LF that begins the next read
is then the second half of that CRLF, and skipped.
"""

from __future__ import annotations

from dataclasses import dataclass

_BOM = b"\xef\xbb\xbf"
# Reads larger than this whose lines end in LF are parsed in place (see Parser._lf_lines).
_FIND_BYTES = 4096
# What one data line kept apart costs beyond its bytes, reckoned against the cap: the
# LF that joins it, a bytes object's header (allocated in 16-byte steps), its list slot.
_LINE_COST = 1 + 55
# Pieces of an unended line kept apart before they are joined (a line may come a
# byte per read).
_MAX_OPEN_PIECES = 64


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


class Parser:
    __slots__ = ("_cr", "_data", "_event", "_id", "_last_id", "_max", "_open", "_open_size", "_size", "_started")

    def __init__(self, max_event_bytes: int) -> None:
        self._max = max_event_bytes
        # The line not yet ended, in the pieces it came in: joined once, when it ends.
        self._open: list[bytes | bytearray] = []
        self._open_size = 0
        # The event's data lines, and what they cost (their bytes and _LINE_COST each).
        self._data: list[bytes | bytearray] = []
        self._size = 0
        # The last read ended in CR: an LF first in the next one completes that CRLF.
        self._cr = False
        self._id: str | None = None
        self._last_id = ""
        self._event = ""
        self._started = False

    def feed(self, chunk: bytes) -> list[Frame]:
        """The events completed by ``chunk``, in order."""
        if not self._started:
            return self._start(chunk)
        if self._cr:
            self._cr = False
            if chunk[:1] == b"\n":  # the LF of a CRLF whose CR ended the last read
                chunk = chunk[1:]
                if not chunk:
                    return []
        if len(chunk) > _FIND_BYTES and b"\r" not in chunk and (end := chunk.find(b"\n")) >= 0:
            return self._lf_lines(chunk, end)
        if b"\n" not in chunk and b"\r" not in chunk:
            # Still inside a line: keep the read aside, not joined and split again
            # on every read, which made a long line quadratic in its reads.
            self._hold(chunk)
            return []
        return self._split(chunk)

    def _split(self, chunk: bytes) -> list[Frame]:
        """:meth:`feed` of any other read: joined to the open line, its line ends made LF, split."""
        pieces = self._open
        buf = b"".join([*pieces, chunk]) if pieces else chunk
        pieces.clear()
        self._open_size = 0
        if b"\r" in buf:
            self._cr = buf[-1:] == b"\r"
            buf = buf.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        lines = buf.split(b"\n")
        rest = lines.pop()
        if len(rest) > self._max:
            raise EventTooLarge(f"an SSE line exceeds {self._max} bytes")
        if rest:
            pieces.append(rest)
            self._open_size = len(rest)
        out: list[Frame] = []
        # The per-event hot path: the common fields inline, the rest in _line.
        data, size, cap = self._data, self._size, self._max
        for line in lines:
            if not line:
                data, size = self._dispatch(data, out), 0
            elif line.startswith(b"data:"):
                value = line[6:] if line[5:6] == b" " else line[5:]
                size += len(value) + _LINE_COST
                if size > cap:
                    size = self._join(data, size, value)
                else:
                    data.append(value)
            else:
                self._data, self._size = data, size
                self._line(line, out)
                data, size = self._data, self._size  # a "data" line without a colon counts too
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
        pieces = self._open
        pieces.append(piece)
        self._open_size += len(piece)
        if self._open_size > self._max:
            raise EventTooLarge(f"an SSE line exceeds {self._max} bytes")
        if len(pieces) > _MAX_OPEN_PIECES:
            # A line trickling in: one growing buffer, not an object per read.
            head = pieces[0] if isinstance(pieces[0], bytearray) else bytearray(pieces[0])
            head += b"".join(pieces[1:])
            pieces[:] = [head]

    def _join(self, data: list[bytes | bytearray], size: int, value: bytes) -> int:
        """A data line that takes the event past the cap by what its lines cost kept
        apart (``size``, with ``value``'s): :class:`EventTooLarge` if its bytes alone
        do, else the lines joined in one buffer (``data[0]``, growing in place, so
        the lines of an event are copied once however many there are); returns what
        the event costs now."""
        payload = size - (_LINE_COST - 1) * (len(data) + 1)
        if payload > self._max:
            raise EventTooLarge(f"an SSE event exceeds {self._max} bytes")
        if not data:
            data.append(value)
            return size
        head = data[0] if isinstance(data[0], bytearray) else bytearray(data[0])
        for line in data[1:]:
            head += b"\n"
            head += line
        head += b"\n"
        head += value
        data[:] = [head]
        return payload + _LINE_COST - 1

    def _lf_lines(self, chunk: bytes, end: int) -> list[Frame]:
        """:meth:`feed` of a large chunk whose lines all end in LF (no CR in it, none
        held; ``end``: where its first line ends). Each line is found in place and only
        a data line's value is copied out, where :meth:`feed` copies a read three times
        (joined to the open line, split, each data value sliced). A small read is split:
        finding its few lines one by one costs more than copying them
        (bench/results/tuned-sse-parsing.json)."""
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
                size += end - start + _LINE_COST
                if size > cap:
                    size = self._join(data, size, chunk[start:end])
                else:
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
        line = b"".join(self._open)
        if line:
            self._line(line, out)
        self._open.clear()
        self._open_size = 0
        return out

    def _dispatch(self, data: list[bytes | bytearray], out: list[Frame]) -> list[bytes | bytearray]:
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
            self._size += len(value) + _LINE_COST
            if self._size > self._max:
                self._size = self._join(self._data, self._size, value)
            else:
                self._data.append(value)
        elif name == b"id":
            if b"\x00" not in value:
                self._id = self._last_id = value.decode("utf-8", "replace")
        elif name == b"event":
            self._event = value.decode("utf-8", "replace")
        # retry and unknown fields are ignored
