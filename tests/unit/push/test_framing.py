"""bridge.push.framing: the webhook's reading of requests, by h11's rules and its own.

The differential test feeds the same bytes, in the same pieces, to h11 alone and to
the webhook's reader (as bridge/push/webhook.py drives it): both must read the same
requests, heads and bodies, and come to the same verdict (an error h11 answers,
more bytes needed, the peer's close, or the end of what the connection may carry), except
where the webhook is stricter by rule: a request framed by both Content-Length and
Transfer-Encoding (400), a head over the bound however it arrives (431), a body over
the cap as it arrives (413). Those it refuses at the exact point h11 reached them,
having read the same requests before.
"""

from __future__ import annotations

from typing import Literal

import h11
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bridge.push.framing import Reader, Refused, both_lengths, head_size
from tests.support.strategies import FAST, cuts

MAX_HEAD = 300
MAX_BODY = 40

Read = tuple[bytes, bytes, tuple[tuple[bytes, bytes], ...], bytes]  # method, target, headers, body
# More bytes needed, the peer closed, the connection carries no more, or an answer and a close.
Verdict = Literal["waiting", "closed", "done"] | tuple[Literal["refused"], int]
Outcome = tuple[list[Read], Verdict]


def _respond(conn: h11.Connection) -> bool:
    """What the webhook does after a request: a 200, then another cycle if both may."""
    conn.send(h11.Response(status_code=200, headers=[("content-length", "0")]))
    conn.send(h11.EndOfMessage())
    if conn.our_state is h11.DONE and conn.their_state is h11.DONE:
        conn.start_next_cycle()
        return True
    return False


def h11_reads(pieces: list[bytes], eof: bool) -> Outcome:
    """h11 alone, with the webhook's rules applied to what it read, in order."""
    conn = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD)
    reads: list[Read] = []
    head: h11.Request | None = None
    body = b""
    try:
        for piece in [*pieces, *([b""] if eof else [])]:
            conn.receive_data(piece)
            while True:
                event = conn.next_event()
                if event is h11.NEED_DATA:
                    break
                if isinstance(event, h11.ConnectionClosed):
                    return reads, "closed"
                if isinstance(event, h11.Request):
                    if head_size(event) > MAX_HEAD:
                        return reads, ("refused", 431)
                    if both_lengths(event.headers):
                        return reads, ("refused", 400)
                    head, body = event, b""
                elif isinstance(event, h11.Data):
                    body += bytes(event.data)
                    if len(body) > MAX_BODY:
                        return reads, ("refused", 413)
                else:
                    assert isinstance(event, h11.EndOfMessage) and head is not None
                    reads.append((head.method, head.target, tuple(head.headers), body))
                    if not _respond(conn):
                        return reads, "done"
    except h11.RemoteProtocolError as exc:
        return reads, ("refused", exc.error_status_hint)  # what the webhook answers then
    return reads, "waiting"


def reader_reads(pieces: list[bytes], eof: bool) -> Outcome:
    """The webhook's reader, driven as bridge/push/webhook.py drives it."""
    reader = Reader(MAX_HEAD, MAX_BODY)
    reads: list[Read] = []
    feed = iter([*pieces, *([b""] if eof else [])])
    try:
        while True:
            while (head := reader.head()) is None:
                reader.feed(next(feed))
            if isinstance(head, h11.ConnectionClosed):
                return reads, "closed"
            while (body := reader.body()) is None:
                reader.feed(next(feed))
            reads.append((head.method, head.target, tuple(head.headers), body))
            if not reader.answer(200, [("content-length", "0")], b"")[1]:
                return reads, "done"
    except StopIteration:
        return reads, "waiting"
    except ConnectionError:
        return reads, "closed"
    except Refused as exc:
        return reads, ("refused", exc.status)


# ------------------------------------------------------------------- framings --

targets = st.sampled_from([b"/push/v1/a/0/aw/Yw", b"/x", b"*", b"/" + b"p" * 200])
# Mostly well framed, so that bodies are read; the rest are what h11 must refuse.
lengths = st.sampled_from(
    [None, "ok", "ok", "ok", b"abc", b"-1", b" 5", b"5, 5", b"05", b"+5", b"99999999999999999999"]
)
encodings = st.sampled_from([None, b"chunked", b"Chunked", b"gzip, chunked", b"identity", b"chunked, chunked", b""])
bodies = st.binary(max_size=60) | st.binary(min_size=MAX_BODY - 1, max_size=MAX_BODY + 1)  # and at the cap
extras = st.lists(
    st.sampled_from(
        [
            b"Expect: 100-continue",
            b"Connection: close",
            b"X-Junk: " + b"j" * 250,
            b"Bad Header: x",
            b"X-A2A-Notification-Token: t",
            b"Content-Length: 3",
            b"Transfer-Encoding: chunked",
        ]
    ),
    max_size=2,
)


@st.composite
def requests(draw: st.DrawFn) -> bytes:
    method = draw(st.sampled_from([b"POST", b"POST", b"GET", b"P OST"]))
    version = draw(st.sampled_from([b"HTTP/1.1", b"HTTP/1.1", b"HTTP/1.1", b"HTTP/1.0", b"HTTP/2"]))
    body = draw(bodies)
    lines = [method + b" " + draw(targets) + b" " + version]
    if draw(st.booleans()):
        lines.append(b"Host: bridge")
    length, encoding = draw(lengths), draw(encodings)
    if length is not None:
        lines.append(b"Content-Length: " + (str(len(body)).encode() if length == "ok" else bytes(length)))  # type: ignore[arg-type]
    if encoding is not None:
        lines.append(b"Transfer-Encoding: " + encoding)
    lines += draw(extras)
    framed = body
    if encoding is not None and b"chunked" in encoding.lower() and draw(st.booleans()):
        size = draw(st.integers(1, 20))
        framed = b"".join(
            b"%x\r\n%s\r\n" % (len(c), c) for c in (body[i : i + size] for i in range(0, len(body), size))
        )
        framed += draw(st.sampled_from([b"0\r\n\r\n", b"0\r\nx: 1\r\n\r\n", b"", b"zz\r\n"]))
    return b"\r\n".join(lines) + b"\r\n\r\n" + framed


edits = st.lists(st.tuples(st.integers(min_value=0), st.sampled_from([b"\r", b"\n", b" ", b"0", b":"])), max_size=2)


def _mutate(data: bytes, changes: list[tuple[int, bytes]]) -> bytes:
    for at, byte in changes:
        i = at % (len(data) + 1)
        data = data[:i] + byte + data[i + 1 :]
    return data


@settings(FAST, max_examples=1500)
@given(
    st.lists(requests(), min_size=1, max_size=3), edits, st.lists(st.integers(min_value=0), max_size=6), st.booleans()
)
def test_the_webhook_reads_what_h11_reads_and_refuses_by_its_own_rules_at_the_same_point(
    sent: list[bytes], changes: list[tuple[int, bytes]], points: list[int], eof: bool
) -> None:
    pieces = cuts(_mutate(b"".join(sent), changes), points)
    assert reader_reads(pieces, eof) == h11_reads(pieces, eof)


@FAST
@given(st.binary(max_size=200), st.lists(st.integers(min_value=0), max_size=6), st.booleans())
def test_the_webhook_and_h11_agree_on_noise(data: bytes, points: list[int], eof: bool) -> None:
    pieces = cuts(data, points)
    assert reader_reads(pieces, eof) == h11_reads(pieces, eof)


# ------------------------------------------------------------------ examples --

SMUGGLED = (
    b"POST /p HTTP/1.1\r\nHost: b\r\nContent-Length: 40\r\nTransfer-Encoding: chunked\r\n\r\n"
    b"0\r\n\r\nPOST /p HTTP/1.1\r\nHost: b\r\nContent-Length: 2\r\n\r\n{}"
)


def test_a_request_framed_twice_is_refused_before_its_body_and_the_one_hidden_in_it_never_read() -> None:
    assert h11_reads([SMUGGLED], eof=False) == ([], ("refused", 400))
    assert reader_reads([SMUGGLED], eof=False) == ([], ("refused", 400))


@pytest.mark.parametrize("pieces", [[b"GET / HTTP/1.1\r\nHost: b\r\nX: " + b"x" * 400 + b"\r\n\r\n"], [b"GET / HT"]])
def test_a_head_over_the_bound_whole_or_in_pieces(pieces: list[bytes]) -> None:
    whole = len(pieces[0]) > MAX_HEAD
    assert reader_reads(pieces, eof=False) == ([], ("refused", 431) if whole else "waiting")


def post(body: bytes, *head: bytes, chunked: bool = False) -> bytes:
    framing = b"Transfer-Encoding: chunked" if chunked else b"Content-Length: %d" % len(body)
    framed = b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body) if chunked and body else b"0\r\n\r\n" if chunked else body
    return b"\r\n".join([b"POST /p HTTP/1.1", b"Host: b", framing, *head]) + b"\r\n\r\n" + framed


@pytest.mark.parametrize("chunked", [False, True])
def test_a_body_at_the_cap_is_read_and_one_byte_more_refused(chunked: bool) -> None:
    at_cap = b"x" * MAX_BODY
    assert reader_reads([post(at_cap, chunked=chunked)], eof=False)[0][0][3] == at_cap
    assert reader_reads([post(at_cap + b"x", chunked=chunked)], eof=False) == ([], ("refused", 413))


def test_a_head_at_the_bound_is_read_and_one_byte_more_refused() -> None:
    base = head_size(h11.Request(method="POST", target="/p", headers=[("host", "b"), ("content-length", "0")]))
    filler = MAX_HEAD - base - len(b"x-f") - 4
    at_bound = post(b"", b"X-F: " + b"f" * filler)
    assert reader_reads([at_bound], eof=False) == (
        [(b"POST", b"/p", ((b"host", b"b"), (b"content-length", b"0"), (b"x-f", b"f" * filler)), b"")],
        "waiting",
    )
    assert reader_reads([post(b"", b"X-F: " + b"f" * (filler + 1))], eof=False) == ([], ("refused", 431))


def test_pipelined_requests_are_read_in_order() -> None:
    one = b"POST /a HTTP/1.1\r\nHost: b\r\nContent-Length: 2\r\n\r\n{}"
    two = b"POST /b HTTP/1.1\r\nHost: b\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nx\r\n0\r\n\r\n"
    reads, verdict = reader_reads([one + two], eof=True)
    assert [(r[1], r[3]) for r in reads] == [(b"/a", b"{}"), (b"/b", b"x")] and verdict == "closed"
