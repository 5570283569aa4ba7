"""bridge.wire.chunked: the chunked coding decoded as bytes arrive, by h11's rules.

The differential test feeds the same bytes, in the same pieces, to h11 alone and
to the decoder followed by h11 (as bridge.agents.transport does): both must read the
same body, and end, stop or refuse alike. The property tests are seeded and
bounded (``FAST``): every run, in CI too, tries the same examples.
"""

from __future__ import annotations

from typing import Literal

import h11
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bridge.wire.chunked import ChunkedError, Decoder
from tests.support.strategies import FAST, cuts

MAX_LINE = 64


def feed_all(pieces: list[bytes], max_line: int = MAX_LINE) -> tuple[bytes, Decoder]:
    decoder = Decoder(max_line)
    out = b""
    for piece in pieces:
        if decoder.done:
            decoder.rest += piece
        else:
            out += decoder.feed(piece)
    return out, decoder


def encode(payloads: list[bytes], size_line: str = "%x\r\n") -> bytes:
    return b"".join((size_line % len(p)).encode() + p + b"\r\n" for p in payloads)


def test_one_read_of_many_chunks_is_one_piece_of_body() -> None:
    payloads = [b"data: %d\n\n" % i for i in range(50)]
    decoder = Decoder(MAX_LINE)
    assert decoder.feed(encode(payloads) + b"0\r\n\r\n") == b"".join(payloads)
    assert decoder.done
    assert decoder.rest == b"0\r\n\r\n"


def test_the_last_chunk_and_what_follows_are_left_as_they_came() -> None:
    decoder = Decoder(MAX_LINE)
    assert decoder.feed(b"3\r\nabc\r\n0;end=1 \r\nx-checksum: 1\r\n\r\nmore") == b"abc"
    assert decoder.rest == b"0;end=1 \r\nx-checksum: 1\r\n\r\nmore"
    with pytest.raises(RuntimeError):
        decoder.feed(b"")


def test_extensions_uppercase_hex_and_trailing_whitespace_are_read_as_h11_reads_them() -> None:
    body, decoder = feed_all([b'A;name="v;x"\r\n0123456789\r\n', b"00001 \t\r\nz\r\n000\r\n\r\n"])
    assert body == b"0123456789z"
    assert decoder.rest == b"000\r\n\r\n"


@pytest.mark.parametrize(
    "data",
    [
        b"zz\r\n",  # not hex
        b"0x5\r\nhello\r\n",  # a prefix int() would take
        b"+5\r\nhello\r\n",
        b" 5\r\nhello\r\n",  # leading whitespace
        b"5_0\r\n",  # an underscore int() would take
        b"5 x\r\nhello\r\n",  # junk after the whitespace
        b"\r\n",  # an empty size line
        b"1" * 21 + b"\r\n",  # over 20 digits
        b"5\r\nhelloXY",  # no CRLF after the data
        b"5\r\nhello\nX",  # a bare LF after the data
        b"5;a\nb\r\nhello\r\n",  # a bare LF inside the size line
        b"5\r\r\nhello\r\n",  # a CR before the CRLF
        b"5\x00\r\nhello\r\n",  # a NUL after the digits
        b"-5\r\nhello\r\n",  # a sign
        b"5\r\nhello\r\r\n",  # a CR too many after the data
        b"5\r\nhello\n\r\n",  # an LF before the CRLF
    ],
)
def test_what_h11_refuses_is_refused(data: bytes) -> None:
    with pytest.raises(ChunkedError):
        Decoder(MAX_LINE).feed(data)
    assert h11_reads([data])[0] == "error"


def test_a_fault_comes_with_the_body_before_it() -> None:
    with pytest.raises(ChunkedError, match="footer") as caught:
        Decoder(MAX_LINE).feed(b"2\r\nok\r\n5\r\nhelloXY")
    assert caught.value.body == b"okhello"


def test_a_chunk_footer_broken_across_reads_is_refused() -> None:
    decoder = Decoder(MAX_LINE)
    assert decoder.feed(b"5\r\nhello\r") == b"hello"
    with pytest.raises(ChunkedError, match="footer"):
        decoder.feed(b"X")


def test_a_size_line_without_its_end_is_refused_past_the_limit() -> None:
    decoder = Decoder(MAX_LINE)
    assert decoder.feed(b"1;" + b"x" * (MAX_LINE - 2)) == b""  # exactly the limit: still waiting
    with pytest.raises(ChunkedError, match="over"):
        decoder.feed(b"x")
    with pytest.raises(ChunkedError, match="over"):
        Decoder(MAX_LINE).feed(b"1;" + b"x" * MAX_LINE)


def test_a_size_line_trickling_in_byte_by_byte_is_read_whole() -> None:
    line = b"1f;ext=" + b"e" * 40 + b"\r\n"
    pieces = [line[i : i + 1] for i in range(len(line))] + [b"x" * 31 + b"\r\n0\r\n\r\n"]
    body, decoder = feed_all(pieces)
    assert body == b"x" * 31
    assert decoder.rest == b"0\r\n\r\n"


payload_lists = st.lists(st.binary(min_size=1, max_size=40), max_size=8)
cut_lists = st.lists(st.integers(min_value=0), max_size=12)


@FAST
@given(payload_lists, cut_lists, st.sampled_from(["%x\r\n", "%X\r\n", "%04x;e=1\r\n", "%x \r\n"]))
def test_any_body_in_any_pieces_is_decoded_whole(payloads: list[bytes], points: list[int], size_line: str) -> None:
    end = b"0\r\ntrailer: 1\r\n\r\n"
    body, decoder = feed_all(cuts(encode(payloads, size_line) + end, points))
    assert body == b"".join(payloads)
    assert decoder.done
    assert decoder.rest == end


# ---------------------------------------------------------------- against h11 --

HEAD = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n"
Outcome = tuple[Literal["ended", "waiting", "error"], bytes]


def _client() -> h11.Connection:
    conn = h11.Connection(h11.CLIENT, max_incomplete_event_size=MAX_LINE)
    conn.send(h11.Request(method="GET", target="/", headers=[("host", "x")]))
    conn.send(h11.EndOfMessage())
    conn.receive_data(HEAD)
    assert isinstance(conn.next_event(), h11.Response)
    return conn


def h11_reads(pieces: list[bytes]) -> Outcome:
    conn = _client()
    body = b""
    try:
        for piece in pieces:
            conn.receive_data(piece)
            while True:
                event = conn.next_event()
                if isinstance(event, h11.Data):
                    body += bytes(event.data)
                elif isinstance(event, h11.EndOfMessage):
                    return "ended", body
                else:
                    break
    except h11.ProtocolError:
        return "error", body
    return "waiting", body


def decoder_then_h11_reads(pieces: list[bytes]) -> Outcome:
    conn = _client()
    decoder = Decoder(MAX_LINE)
    body = b""
    try:
        for piece in pieces:
            if not decoder.done:
                body += decoder.feed(piece)
                if not decoder.done:
                    continue
                piece = decoder.rest  # the handover, as bridge.agents.transport does it
            conn.receive_data(piece)
            event = conn.next_event()
            assert not isinstance(event, h11.Data)  # h11 only ever sees the last chunk
            if isinstance(event, h11.EndOfMessage):
                return "ended", body
    except ChunkedError as exc:
        return "error", body + exc.body
    except h11.ProtocolError:
        return "error", body
    return "waiting", body


def _mutate(data: bytes, edits: list[tuple[int, int, bytes]]) -> bytes:
    for at, kind, byte in edits:
        i = at % (len(data) + 1)
        if kind == 0:
            data = data[:i] + byte + data[i:]
        elif kind == 1:
            data = data[:i] + data[i + 1 :]
        else:
            data = data[:i] + byte + data[i + 1 :]
    return data


edit_bytes = st.sampled_from([b"\r", b"\n", b";", b" ", b"0", b"f", b"g"])
edit_lists = st.lists(st.tuples(st.integers(min_value=0), st.integers(0, 2), edit_bytes), max_size=3)
last_chunks = st.sampled_from([b"0\r\n\r\n", b"0\r\nx: 1\r\n\r\n", b"0\r\nbad\r\n\r\n", b""])


@settings(FAST, max_examples=1000)
@given(payload_lists, edit_lists, cut_lists, last_chunks)
def test_h11_and_the_decoder_agree_on_any_bytes(
    payloads: list[bytes], edits: list[tuple[int, int, bytes]], points: list[int], end: bytes
) -> None:
    pieces = cuts(_mutate(encode(payloads) + end, edits), points)
    assert decoder_then_h11_reads(pieces) == h11_reads(pieces)


@FAST
@given(st.binary(max_size=120), cut_lists)
def test_h11_and_the_decoder_agree_on_noise(data: bytes, points: list[int]) -> None:
    pieces = cuts(data, points)
    assert decoder_then_h11_reads(pieces) == h11_reads(pieces)
