"""How the webhook reads requests off one connection: h11's HTTP/1.1 framing, and the
webhook's stricter rules on top of it. No IO: the webhook feeds it the bytes it reads
and writes the bytes it gives (tests/unit/push/test_framing.py drives it with random
framings against h11 alone).

Beyond h11, a request is refused (:class:`Refused`), and its connection closed after
the answer, when:

- it has both Content-Length and Transfer-Encoding (400): h11 reads the body as
  chunked, as RFC 9112 §6.1 says a server may, but then the server "MUST close the
  connection after responding": a proxy in front may have framed the body by its
  length, so what h11 reads after the chunks could be a second request smuggled in
  the first one's body;
- its head is larger than ``max_head`` (431), however it arrived (h11 bounds only
  a head that arrives in pieces, by ``max_incomplete_event_size``);
- its body grows past ``max_body`` (413), chunked or not, as it arrives.

Anything h11 itself refuses is :class:`Refused` too (400, or h11's 431).
"""

from __future__ import annotations

from collections.abc import Sequence
from http import HTTPStatus

import h11

from bridge.core.task.push import Refusal


class Refused(Exception):
    """The request cannot be read: answer ``status`` (a ``refusal``) and close."""

    def __init__(self, refusal: Refusal, status: int) -> None:
        super().__init__(f"{status} {refusal}")
        self.refusal = refusal
        self.status = status


class Reader:
    """One connection's requests, one at a time: :meth:`head`, :meth:`body`, :meth:`answer`."""

    def __init__(self, max_head: int, max_body: int) -> None:
        self._h11 = h11.Connection(h11.SERVER, max_incomplete_event_size=max_head)
        self._max_head = max_head
        self._max_body = max_body
        self._body: list[bytes] = []
        self._size = 0

    def feed(self, data: bytes) -> None:
        """Bytes read from the connection (``b""``: the peer closed its side)."""
        self._h11.receive_data(data)

    def head(self) -> h11.Request | h11.ConnectionClosed | None:
        """The next request's head; :class:`h11.ConnectionClosed` when the peer closed
        between requests; None when more bytes are needed. :class:`Refused`."""
        event = self._next()
        if event is h11.NEED_DATA:
            return None
        if isinstance(event, h11.ConnectionClosed):
            return event
        assert isinstance(event, h11.Request), event  # a server's first event of a cycle
        if head_size(event) > self._max_head:
            raise Refused("too-large", 431)
        if both_lengths(event.headers):
            raise Refused("malformed", 400)
        self._body, self._size = [], 0
        return event

    @property
    def expects_continue(self) -> bool:
        """Whether the client waits for a 100 (Continue) before it sends the body."""
        return self._h11.they_are_waiting_for_100_continue

    def body(self) -> bytes | None:
        """The whole body of the request :meth:`head` gave; None while more bytes are
        needed. :class:`Refused` past ``max_body``; :class:`ConnectionError` when the
        peer closed before its end."""
        while True:
            event = self._next()
            if event is h11.NEED_DATA:
                return None
            if isinstance(event, h11.Data):
                self._size += len(event.data)
                if self._size > self._max_body:
                    raise Refused("too-large", 413)
                self._body.append(bytes(event.data))
            elif isinstance(event, h11.EndOfMessage):
                return b"".join(self._body)
            else:
                raise ConnectionError("the request ended before its body")

    def informational(self, status: int) -> bytes:
        return self._h11.send(h11.InformationalResponse(status_code=status, headers=[])) or b""

    def answer(self, status: int, headers: Sequence[tuple[str, str]], text: bytes) -> tuple[bytes, bool]:
        """The bytes of a response with ``text`` as its body, and whether the connection
        carries another request after it (then the next cycle has begun)."""
        out = self._h11.send(h11.Response(status_code=status, headers=list(headers), reason=HTTPStatus(status).phrase))
        out = (out or b"") + (self._h11.send(h11.Data(data=text)) or b"")
        out += self._h11.send(h11.EndOfMessage()) or b""
        again = self._h11.our_state is h11.DONE and self._h11.their_state is h11.DONE
        if again:
            self._h11.start_next_cycle()
        return out, again

    @property
    def can_answer(self) -> bool:
        """Whether a response can still be sent (none was begun for this request)."""
        return self._h11.our_state in (h11.IDLE, h11.SEND_RESPONSE)

    def _next(self) -> object:
        try:
            return self._h11.next_event()
        except h11.RemoteProtocolError as exc:
            # Not HTTP/1.1, or a head past max_incomplete_event_size (h11's hint: 431).
            raise Refused("too-large" if exc.error_status_hint == 431 else "malformed", exc.error_status_hint) from None


def head_size(request: h11.Request) -> int:
    """What a request head takes, as the webhook bounds it: its target and headers."""
    return len(request.target) + sum(len(name) + len(value) + 4 for name, value in request.headers)


def both_lengths(headers: Sequence[tuple[bytes, bytes]]) -> bool:
    """Whether a head frames its body twice: Content-Length and Transfer-Encoding
    (h11 gives header names in lower case)."""
    names = {name for name, _ in headers}
    return b"content-length" in names and b"transfer-encoding" in names
