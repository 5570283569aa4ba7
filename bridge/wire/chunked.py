"""HTTP/1.1 chunked transfer coding (RFC 9112 §7.1), decoded as bytes arrive.

An agent that streams tokens sends one chunk per SSE frame. h11 turns each
chunk into a ``Data`` event and a step of its state machine, several times
the cost of decoding it here (bench/results/tuned-chunked-bodies.json).
:class:`Decoder` returns all the body bytes in what has arrived at once,
however many chunks that is.

It reads the chunks that carry data, and nothing else. From the last chunk's
size line (size 0) on, the bytes are h11's again (:mod:`bridge.agents.transport` hands
them over), so h11 still reads the trailer section, decides where the message
ends and keeps the connection's state. The rules are h11's (0.16), so both
accept and refuse the same bodies: a size line is 1 to 20 hex digits, then
optional extensions after ``;`` (ignored), optional spaces or tabs, then CRLF;
a chunk's data is followed by exactly CRLF; a size line still incomplete past
``max_line`` bytes is refused, as h11 refuses an incomplete event that long.
"""

from __future__ import annotations

import re

_SIZE_LINE = re.compile(rb"([0-9A-Fa-f]{1,20})(?:;[^\n]*)?[ \t]*")


class ChunkedError(ValueError):
    """The bytes break the chunked coding; ``body``: what the piece held before the fault."""

    def __init__(self, message: str, body: bytes = b"") -> None:
        super().__init__(message)
        self.body = body


class Decoder:
    """One chunked body, fed the bytes of a connection in the pieces they arrive in."""

    __slots__ = ("_crlf", "_left", "_line", "_max_line", "done", "rest")

    def __init__(self, max_line: int) -> None:
        self._max_line = max_line
        self._left = 0  # data bytes still to come in the current chunk
        self._crlf = b""  # what must still follow the current chunk's data
        self._line = bytearray()  # a size line begun in an earlier piece
        self.done = False
        # Once done: from the last chunk's size line on, what was fed (h11's to read).
        self.rest = b""

    def feed(self, data: bytes) -> bytes:
        """The body bytes in ``data`` (``b""`` if none). Raises :class:`ChunkedError`
        with the body bytes before the fault."""
        if self.done:
            raise RuntimeError("the chunks have ended; the rest is h11's")
        if self._line:
            # Complete the size line first; search only what is new (and a CR before
            # it), so a line that trickles in byte by byte costs linear time.
            start = len(self._line) - 1
            self._line += data
            if self._line.find(b"\r\n", start) < 0:
                self._check_incomplete(len(self._line))
                return b""
            data = bytes(self._line)
            self._line.clear()
        out: list[bytes] = []
        try:
            self._decode(data, out)
        except ChunkedError as exc:
            exc.body = b"".join(out)
            raise
        return out[0] if len(out) == 1 else b"".join(out)

    def _decode(self, data: bytes, out: list[bytes]) -> None:
        pos, end = 0, len(data)
        while pos < end:
            if self._left:
                take = min(self._left, end - pos)
                out.append(data[pos : pos + take])
                pos += take
                self._left -= take
                if not self._left:
                    self._crlf = b"\r\n"
            elif self._crlf:
                got = data[pos : pos + len(self._crlf)]
                if got != self._crlf[: len(got)]:
                    raise ChunkedError(f"malformed chunk footer: {got!r} (expected {self._crlf!r})")
                self._crlf = self._crlf[len(got) :]
                pos += len(got)
            else:
                eol = data.find(b"\r\n", pos)
                if eol < 0:
                    self._check_incomplete(end - pos)
                    self._line += data[pos:]
                    break
                match = _SIZE_LINE.fullmatch(data, pos, eol)
                if match is None:
                    raise ChunkedError(f"illegal chunk header: {data[pos : eol + 2][:64]!r}")
                size = int(match[1], 16)
                if size == 0:
                    self.done = True
                    self.rest = data[pos:]
                    break
                self._left = size
                pos = eol + 2

    def _check_incomplete(self, length: int) -> None:
        if length > self._max_line:
            raise ChunkedError(f"chunk size line over {self._max_line} bytes")
