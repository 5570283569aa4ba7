"""The SSE parser (bridge.wire.sse): the WHATWG rules, any chunking, a size cap.

httpx-sse's own decoder is the oracle: the same stream, cut into chunks at
random places, gives the same events (data and the carried-over last id).
"""

from __future__ import annotations

import tracemalloc

import pytest
from httpx_sse._decoders import SSEDecoder, SSELineDecoder
from hypothesis import given
from hypothesis import strategies as st

from bridge.wire.sse import EventTooLarge, Frame, Parser
from tests.support.strategies import FAST, cuts


def parse(chunks: list[bytes], cap: int = 1 << 20) -> list[Frame]:
    p = Parser(cap)
    out: list[Frame] = []
    for c in chunks:
        out += p.feed(c)
    return out + p.close()


def oracle(stream: bytes) -> list[tuple[str, str]]:
    """httpx-sse's events for ``stream``, ended there (a character cut short at the
    end is in a line not ended: no event)."""
    lines, dec = SSELineDecoder(), SSEDecoder()
    out = []
    for line in [*lines.decode(stream.decode("utf-8", "replace")), *lines.flush()]:
        sse = dec.decode(line)
        if sse is not None and sse.data:
            out.append((sse.data, sse.id))
    return out


fields = st.sampled_from(["data", "id", "event", "retry", ":comment", "other", "data:", "id:"])
values = st.text(alphabet='ab {}"1:é\x00', max_size=6)
endings = st.sampled_from(["\n", "\r\n", "\r"])
lines = st.tuples(fields, values, endings).map(
    lambda t: f"{t[0]}: {t[1]}{t[2]}" if ":" not in t[0] else f"{t[0]}{t[1]}{t[2]}"
)
blank = endings
streams = st.lists(st.one_of(lines, blank), max_size=30).map(lambda ls: "".join(ls).encode())


@FAST
@given(streams, st.lists(st.integers(0, 10_000), max_size=8))
def test_same_events_as_httpx_sse_whatever_the_chunking(stream: bytes, points: list[int]) -> None:
    # The oracle dispatches a trailing event without its blank line at end of stream
    # only if the last line ended; both agree when the stream ends in a blank line.
    stream += b"\n\n"
    # Events with empty data are dispatched per WHATWG; the oracle (and the bridge) skip them.
    got = [(f.data.decode(), f.last_id) for f in parse(cuts(stream, points)) if f.data]
    assert got == oracle(stream)


# Streams with long lines, every line ending in LF: reads over 4 KiB of them are
# parsed in place (Parser._lf_lines), the others joined and split.
long_values = st.text(alphabet='ab {}"1:é\x00', max_size=3000)
lf_lines = st.tuples(fields, long_values).map(lambda t: f"{t[0]}: {t[1]}\n" if ":" not in t[0] else f"{t[0]}{t[1]}\n")
lf_streams = st.lists(st.one_of(lf_lines, st.just("\n")), max_size=20).map(lambda ls: "".join(ls).encode())


def frames(chunks: list[bytes], cap: int = 1 << 20) -> list[tuple[bytes, str | None, str, str]]:
    """After a first read (a comment line): a stream's first read is always split (a
    BOM may begin it)."""
    return [(f.data, f.id, f.last_id, f.event) for f in parse([b":\n", *chunks], cap)]


def started(cap: int) -> Parser:
    p = Parser(cap)
    assert p.feed(b":\n") == []
    return p


@FAST
@given(lf_streams, st.lists(st.integers(0, 100_000), max_size=8))
def test_long_lf_lines_give_the_same_frames_however_read(stream: bytes, points: list[int]) -> None:
    """Read in place or joined and split (the same stream with CRLF endings takes only
    the latter): the same frames, ids and event names; and httpx-sse's events."""
    stream += b"\n\n"
    expected = frames([stream.replace(b"\n", b"\r\n")])
    assert frames(cuts(stream, points)) == expected
    assert frames([stream]) == expected
    assert [(d.decode(), last) for d, _, last, _ in expected if d] == oracle(stream)


def test_a_large_lf_read_completes_the_line_earlier_reads_began() -> None:
    text = b"x" * 10_000
    stream = b"event: e\nid: 4\ndata: " + text + b"\ndata: " + text + b"\n\n: c\ndata: z\n\n"
    for first in (1, 9, 20, 10_030, 10_040):
        assert frames([stream[:first], stream[first:]]) == [(text + b"\n" + text, "4", "4", "e"), (b"z", None, "4", "")]
    odd = b"data:" + text + b"\ndata:\n\n:comment\nid\ndata\n\ndata: a\n\n"
    expected = [(text + b"\n", None, "", ""), (b"", "", "", ""), (b"a", None, "", "")]
    assert frames([odd]) == frames([odd.replace(b"\n", b"\r\n")]) == expected


def test_a_large_lf_read_holds_the_cap() -> None:
    with pytest.raises(EventTooLarge):  # an event's data
        started(8_000).feed(b"data: " + b"x" * 5_000 + b"\ndata: " + b"x" * 5_000 + b"\n\n")
    with pytest.raises(EventTooLarge):  # an unended line
        started(8_000).feed(b"data: a\n\ndata: " + b"x" * 9_000)
    assert len(started(8_000).feed(b"data: " + b"x" * 7_000 + b"\n\n")) == 1
    assert len(started(8_000).feed((b"data: " + b"x" * 3_000 + b"\n\n") * 5)) == 5  # per event


def test_a_frame_without_its_own_id_is_not_a_replay_of_the_last() -> None:
    frames = parse([b"id: 1\ndata: a\n\ndata: b\n\nid: 3\ndata: c\n\n"])
    assert [(f.data, f.id, f.last_id) for f in frames] == [(b"a", "1", "1"), (b"b", None, "1"), (b"c", "3", "3")]


def test_multi_line_data_joins_with_newlines_and_a_bom_is_dropped() -> None:
    (f,) = parse([b"\xef\xbb", b'\xbfdata: {\ndata:  "x": 1}\n\n'])
    assert f.data == b'{\n "x": 1}'


def test_crlf_split_across_chunks_is_one_line_end() -> None:
    assert [f.data for f in parse([b"data: a\r", b"\n\r", b"\ndata: b\r\n\r\n"])] == [b"a", b"b"]


def test_an_unterminated_event_at_the_end_is_not_dispatched() -> None:
    assert parse([b"data: a\n\ndata: half"]) == [Frame(b"a", None, "", "")]


def test_an_event_over_the_cap_raises_before_it_is_buffered() -> None:
    p = Parser(100)
    p.feed(b"data: " + b"x" * 60 + b"\n")
    with pytest.raises(EventTooLarge):
        p.feed(b"data: " + b"x" * 60 + b"\n")


def test_a_line_over_the_cap_raises_even_without_a_newline() -> None:
    p = Parser(100)
    for _ in range(3):
        p.feed(b"x" * 30)
    with pytest.raises(EventTooLarge):
        p.feed(b"x" * 30)


def test_a_long_line_read_in_small_pieces_is_one_event() -> None:
    """Reads that end no line are kept aside and joined once the line ends."""
    text = bytes(range(32, 127)) * 200
    stream = b"id: 7\r\ndata: " + text + b"\r\ndata: " + text + b"\r\n\r\ndata: end\r"
    for size in (1, 7, 4096):
        frames = parse([stream[i : i + size] for i in range(0, len(stream), size)])
        assert [(f.data, f.id) for f in frames] == [(text + b"\n" + text, "7")]
        p = Parser(len(text))
        with pytest.raises(EventTooLarge):  # and the cap holds, read by read
            for i in range(0, len(stream), size):
                p.feed(stream[i : i + size])


def test_the_cap_is_per_event() -> None:
    p = Parser(100)
    for _ in range(50):
        assert len(p.feed(b"data: " + b"x" * 80 + b"\n\n")) == 1


# ------------------------------------------------------- line ends in CR --


@FAST
@given(streams, st.lists(st.integers(0, 10_000), max_size=8))
def test_each_event_comes_with_the_read_that_completes_it(stream: bytes, points: list[int]) -> None:
    """After every read, the events so far are httpx-sse's for the stream so far had
    it ended there: an event whose blank line ends in CR is not held for the next
    read, and the last one is not lost at the end of the stream."""
    p = Parser(1 << 20)
    got: list[tuple[str, str]] = []
    seen = b""
    for piece in cuts(stream, points):
        seen += piece
        got += [(f.data.decode(), f.last_id) for f in p.feed(piece) if f.data]
        assert got == oracle(seen)
    got += [(f.data.decode(), f.last_id) for f in p.close() if f.data]
    assert got == oracle(stream)


def test_a_blank_line_ended_by_cr_dispatches_at_once() -> None:
    p = started(1 << 10)
    assert [f.data for f in p.feed(b"data: a\r\r")] == [b"a"]
    assert [f.data for f in p.feed(b"\ndata: b\r")] == []  # that LF ended nothing: the CR did
    assert [f.data for f in p.feed(b"\n\r\n")] == [b"b"]
    assert [f.data for f in p.feed(b"data: c\r\r")] == [b"c"]
    assert p.close() == []


# ------------------------------------------------------ memory under the cap --

CAP = 1 << 17


@pytest.mark.parametrize(
    ("line", "read"),
    [
        (b"data: xy\n", 64 * 1024),  # large LF-only reads: parsed in place
        (b"data:\n", 64 * 1024),
        (b"data\n", 64 * 1024),  # a field without a colon: the general path per line
        (b"data:xy\r\n", 64 * 1024),  # CRLF: joined and split
        (b"data: xy\n", 100),  # small reads: joined and split
        (b"data\n", 100),
    ],
)
def test_what_an_event_holds_is_bounded_by_the_cap_not_only_what_it_counts(line: bytes, read: int) -> None:
    """Short data lines cost more than their bytes (an object and a list slot each):
    an event of them is refused, or joined, before it holds much more than the cap."""
    p = started(CAP)
    piece = line * (read // len(line))
    tracemalloc.start()
    try:
        with pytest.raises(EventTooLarge):
            for _ in range((CAP + 1) * len(line) // len(piece) + 2):  # past the cap at a byte a line
                p.feed(piece)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    # Besides the event: what parsing one read costs while it runs (its lines split), bounded by the read.
    assert peak < 2 * CAP + 8 * read, f"peak {peak / CAP:.1f} x the cap"


def test_an_event_of_many_short_lines_under_the_cap_is_still_read_whole() -> None:
    """Joining short lines is not refusing them: the cap counts their bytes."""
    lines = [b"%d" % (i % 10) for i in range(30_000)]  # 60,000 bytes with their LFs
    stream = b"".join(b"data: " + x + b"\n" for x in lines) + b"\n"
    for read in (7, 4096, 65536, len(stream)):
        p = started(60_000)
        got = [f for i in range(0, len(stream), read) for f in p.feed(stream[i : i + read])]
        assert [f.data for f in got] == [b"\n".join(lines)]
    with pytest.raises(EventTooLarge):
        started(59_999).feed(stream)


def test_a_line_trickling_in_a_byte_a_read_is_kept_in_one_buffer() -> None:
    p = started(CAP)
    tracemalloc.start()
    try:
        for _ in range(100_000):
            p.feed(b"x")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 400_000  # 100,000 one-byte pieces in a list alone would take 800 kB
    assert [f.data for f in p.feed(b"\n\ndata: y\n\n")] == [b"y"]
