"""Reading an answer from a peer the bridge does not control, bounded in bytes and in time.

Every document the bridge fetches (an agent card, a JWKS, a token endpoint's answer,
a JSON-RPC response) is small, and read whole before it is parsed. A peer may
send it slowly, or send a few KiB that inflate to GiB; so:

- :func:`read` takes the body piece by piece and stops as soon as the bytes read,
  or the bytes they inflate to, pass the cap: nothing past it is kept or inflated
  (httpx's own decoders inflate a whole read at once, which is why the body is
  read raw and inflated here, :class:`Inflater`);
- :func:`within` bounds the whole exchange, from the connection to the last byte:
  httpx's timeouts bound each read, so a peer trickling a byte a second would
  hold the call for ever;
- :func:`decoded` gives a body that is not read whole (an SSE stream) in inflated
  pieces of at most :data:`PIECE_BYTES`, for a cap on their sum to hold.

A client of these should also ask for no compression (``Accept-Encoding:
identity``): the bridge's peers' JSON is not worth the CPU.
"""

from __future__ import annotations

import asyncio
import contextlib
import zlib
from collections.abc import AsyncIterator, Iterator, Sequence

import httpx

# The most one piece of a body inflates to at a time.
PIECE_BYTES = 64 * 1024
# What a client sends so that peers do not compress (one that does anyway is inflated here).
IDENTITY = {"Accept-Encoding": "identity"}
# The content codings inflated here (those httpx decodes without optional packages),
# and zlib's window bits for each.
_WBITS = {b"gzip": zlib.MAX_WBITS | 16, b"deflate": zlib.MAX_WBITS}


class Oversize(Exception):
    """A body past its cap (the message says which cap, never the body)."""


class Inflater:
    """A body's content codings undone, each piece out at most :data:`PIECE_BYTES`
    whatever one piece in inflates to."""

    def __init__(self, codings: list[bytes]) -> None:
        self._codings = codings[::-1]  # the last applied is undone first
        self._stages = [zlib.decompressobj(_WBITS[c]) for c in self._codings]
        self._fresh = [True] * len(self._stages)

    def pieces(self, data: bytes, stage: int = 0) -> Iterator[bytes]:
        if stage == len(self._stages):
            if data:
                yield data
            return
        while True:
            out = self._inflate(stage, data)
            data = self._stages[stage].unconsumed_tail
            yield from self.pieces(out, stage + 1)
            if not data and len(out) < PIECE_BYTES:
                return

    def _inflate(self, stage: int, data: bytes) -> bytes:
        fresh, self._fresh[stage] = self._fresh[stage], False
        try:
            return self._stages[stage].decompress(data, PIECE_BYTES)
        except zlib.error:
            if fresh and self._codings[stage] == b"deflate":
                # Some servers send raw deflate, without its zlib wrapper (httpx reads both).
                self._stages[stage] = zlib.decompressobj(-zlib.MAX_WBITS)
                return self._inflate(stage, data)
            coding = self._codings[stage].decode()
            raise httpx.RemoteProtocolError(f"the body is not valid {coding}") from None


def inflater(headers: httpx.Headers | Sequence[tuple[bytes, bytes]]) -> Inflater | None:
    """An :class:`Inflater` for a body with these headers, if it is in codings
    inflated here (and only those); None for any other body."""
    raw = headers.raw if isinstance(headers, httpx.Headers) else headers
    codings = [
        coding
        for name, value in raw
        if name.lower() == b"content-encoding"
        for part in value.split(b",")
        if (coding := part.strip().lower()) not in (b"", b"identity")
    ]
    if not codings or any(c not in _WBITS for c in codings):
        return None
    return Inflater(codings)


def decoded(response: httpx.Response) -> AsyncIterator[bytes]:
    """``response``'s body in pieces of at most :data:`PIECE_BYTES` once inflated: a
    cap on their sum holds however much the body inflates. The bridge's own
    transport (bridge/agents/transport.py) has inflated its bodies already; httpx's
    own transport has not. Read raw: httpx's decoders would inflate a gzip beside a
    coding they do not know ("gzip, br") whole; such a body is given as it came.

    Raw is the transport's own stream, not httpx's ``aiter_raw``: that adds a
    generator (a frame and an entry in the loop's set of them, for as long as a
    stream is open), a context manager and a chunker's list on every read, for a
    byte count nothing here reads."""
    if response.is_stream_consumed:  # made with its content (httpx.MockTransport): read and decoded already
        return _given(response.content)
    if response.is_closed:
        raise httpx.StreamClosed()
    response.is_stream_consumed = True
    raw = aiter(response.stream)  # type: ignore[arg-type]  # an AsyncByteStream: the client is async
    inflate = inflater(response.headers)
    return raw if inflate is None else _inflated(raw, inflate)


async def _given(content: bytes) -> AsyncIterator[bytes]:
    yield content


async def _inflated(raw: AsyncIterator[bytes], inflate: Inflater) -> AsyncIterator[bytes]:
    async for data in raw:
        for piece in inflate.pieces(data):
            yield piece


async def read(response: httpx.Response, cap: int) -> bytes:
    """The whole body, or :class:`Oversize` as soon as the bytes read or the bytes they
    inflate to pass ``cap`` (a declared Content-Length past it: before any is read)."""
    declared = response.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > cap:
        raise Oversize(f"response of {declared} bytes is over the {cap}-byte cap")
    if response.is_stream_consumed:  # made with its content, as in decoded()
        if len(response.content) > cap:
            raise Oversize(f"response is over the {cap}-byte cap")
        return response.content
    inflate = inflater(response.headers)
    chunks: list[bytes] = []
    size = 0
    # Raw (as decoded() reads), counted as it comes: a body that inflates to nothing
    # still ends at the cap.
    async for data in response.aiter_raw():
        if response.num_bytes_downloaded > cap:
            raise Oversize(f"response is over the {cap}-byte cap")
        for piece in inflate.pieces(data) if inflate is not None else (data,):
            size += len(piece)
            if size > cap:
                raise Oversize(f"response is over the {cap}-byte cap once inflated")
            chunks.append(piece)
    return b"".join(chunks)


@contextlib.asynccontextmanager
async def within(seconds: float) -> AsyncIterator[None]:
    """An exchange done within ``seconds`` in all, else :class:`httpx.ReadTimeout`
    (a :class:`httpx.TransportError`, as a timeout of one read is)."""
    deadline = asyncio.timeout(seconds)
    try:
        async with deadline:
            yield
    except TimeoutError:
        if deadline.expired():
            raise httpx.ReadTimeout(f"no whole answer within {seconds:g} s") from None
        raise
