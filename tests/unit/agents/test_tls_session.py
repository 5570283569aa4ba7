"""bridge.agents.tls_session: a session kept from one connection and offered to the
next, the quick way on this interpreter, CPython's way where the quick one is not
had; over TLS 1.2 (a session id or ticket offered as it was kept) and TLS 1.3 (each
connection swaps in a session of its own from the server's new tickets). Each
handshake runs in memory (two BIOs a side), no socket; each connection is dropped
without close_notify and collected, as the bridge drops a stream, which is what
spoils a session OpenSSL shares with it."""

from __future__ import annotations

import contextlib
import copy
import gc
import ssl
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from bridge.agents import tls_session
from tests.support import tls

Contexts = tuple[ssl.SSLContext, ssl.SSLContext, ssl.SSLContext]


@pytest.fixture(scope="module", params=[ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3], ids=["tls1.2", "tls1.3"])
def contexts(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Contexts:
    return made(request.param, tmp_path_factory.mktemp("tls") / "agent.pem")


def made(version: ssl.TLSVersion, keystore: Path) -> Contexts:
    """A server, a client and a second client context trusting the same CA."""
    ca = tls.make_ca("tls-session-test-ca")
    tls.write_private(keystore, tls.server_keystore_pem(ca, ["agent"]))
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server.load_cert_chain(keystore)
    clients = []
    for _ in range(2):
        client = ssl.create_default_context(cadata=ca.pem().decode())
        client.minimum_version = client.maximum_version = version
        clients.append(client)
    return server, clients[0], clients[1]


@dataclass
class Pair:
    """A client and a server connection in memory, past the handshake and the
    server's tickets (TLS 1.3 sends them after it), and how a kept session was offered
    to the client (None: none was)."""

    ours: ssl.SSLObject
    theirs: ssl.SSLObject
    c_in: ssl.MemoryBIO  # the client's incoming bytes
    s_out: ssl.MemoryBIO  # the server's outgoing bytes
    quick: bool | None


def handshaken(server: ssl.SSLContext, client: ssl.SSLContext, kept: tls_session.Kept | None = None) -> Pair:
    c_in, c_out, s_in, s_out = ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO()
    ours = client.wrap_bio(c_in, c_out, server_hostname="agent")
    quick = None if kept is None else kept.offer(ours)
    theirs = server.wrap_bio(s_in, s_out, server_side=True)
    for _ in handshake_turns(ours):
        s_in.write(c_out.read())
        with contextlib.suppress(ssl.SSLWantReadError):
            theirs.do_handshake()
        c_in.write(s_out.read())
    s_in.write(c_out.read())  # the client's Finished
    theirs.do_handshake()
    c_in.write(s_out.read())  # TLS 1.3: the tickets
    with pytest.raises(ssl.SSLWantReadError):
        ours.read(1)
    return Pair(ours, theirs, c_in, s_out, quick)


def connect(
    server: ssl.SSLContext, client: ssl.SSLContext, kept: tls_session.Kept | None = None
) -> tuple[tls_session.Kept | None, bool, bool | None]:
    """One connection in memory, through its handshake and the server's first bytes,
    then dropped: what it leaves to keep, whether it resumed, and how ``kept`` was
    offered (None: not offered)."""
    pair = handshaken(server, client, kept)
    pair.theirs.write(b"x")
    pair.c_in.write(pair.s_out.read())
    assert pair.ours.read(1) == b"x"
    left, resumed, quick = tls_session.Kept.of(pair.ours), pair.ours.session_reused, pair.quick
    del pair  # no close_notify
    gc.collect()
    return left, resumed, quick


def handshake_turns(tls_object: ssl.SSLObject) -> Iterator[None]:
    for _ in range(5):
        try:
            tls_object.do_handshake()
            return
        except ssl.SSLWantReadError:
            yield
    raise AssertionError("the handshake did not end")


def test_a_kept_session_resumes_the_quick_way_after_every_connection_that_held_it_is_gone(contexts: Contexts) -> None:
    server, client, _ = contexts
    kept, resumed, _ = connect(server, client)
    assert kept is not None and not resumed
    for _ in range(3):
        _, resumed, quick = connect(server, client, kept)
        assert (quick, resumed) == (True, True)


def test_where_the_quick_way_is_not_had_cpython_keeps_and_offers_the_session(
    contexts: Contexts, monkeypatch: pytest.MonkeyPatch
) -> None:
    server, client, _ = contexts
    monkeypatch.setattr(tls_session, "_openssl", lambda: None)  # another interpreter, say
    kept, _, _ = connect(server, client)
    assert kept is not None
    for _ in range(2):
        _, resumed, quick = connect(server, client, kept)
        assert (quick, resumed) == (False, True)


def test_a_layout_other_than_the_one_read_takes_cpythons_way(
    contexts: Contexts, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A CPython whose connection object had one more field before the pointers read:
    each read lands a word off, the checks see it, nothing is passed to OpenSSL."""
    server, client, _ = contexts
    word = tls_session._WORD
    monkeypatch.setattr(tls_session, "_SOCKET_SSL", tls_session._SOCKET_SSL + word)
    monkeypatch.setattr(tls_session, "_SOCKET_CTX", tls_session._SOCKET_CTX + word)
    kept, _, _ = connect(server, client)
    assert kept is not None
    _, resumed, quick = connect(server, client, kept)
    assert (quick, resumed) == (False, True)


def test_a_session_is_not_offered_to_another_context_a_server_or_a_handshake_begun(contexts: Contexts) -> None:
    server, client, other = contexts
    kept, _, _ = connect(server, client)
    assert kept is not None
    _, resumed, quick = connect(server, other, kept)
    assert (quick, resumed) == (False, False)
    server_side = server.wrap_bio(ssl.MemoryBIO(), ssl.MemoryBIO(), server_side=True)
    assert not kept.offer(server_side)
    begun = client.wrap_bio(ssl.MemoryBIO(), ssl.MemoryBIO(), server_hostname="agent")
    with contextlib.suppress(ssl.SSLWantReadError):
        begun.do_handshake()
    assert not kept.offer(begun)


def test_a_server_that_gives_nothing_to_resume_leaves_nothing_kept(tmp_path: Path) -> None:
    server, client, _ = made(ssl.TLSVersion.TLSv1_3, tmp_path / "agent.pem")
    server.num_tickets = 0  # TLS 1.3 resumes only by a ticket
    kept, _, _ = connect(server, client)
    assert kept is None


def test_a_kept_session_is_not_copied(contexts: Contexts) -> None:
    server, client, _ = contexts
    kept, _, _ = connect(server, client)
    with pytest.raises(TypeError):
        copy.copy(kept)
    with pytest.raises(TypeError):
        copy.deepcopy(kept)


def test_an_idle_connection_hands_its_buffers_back_and_goes_on(contexts: Contexts) -> None:
    server, client, _ = contexts
    pair = handshaken(server, client)
    release = tls_session.buffers_release(pair.ours)
    assert release is not None
    assert release() == 1
    for n in range(3):  # the next records make the buffers again
        pair.theirs.write(b"event %d" % n)
        pair.c_in.write(pair.s_out.read())
        assert pair.ours.read(100) == b"event %d" % n
        assert release() == 1
    pair.ours.write(b"request")  # and so does a write
    assert release() == 1


def test_a_record_half_read_keeps_the_buffers_until_it_is_whole(contexts: Contexts) -> None:
    server, client, _ = contexts
    pair = handshaken(server, client)
    release = tls_session.buffers_release(pair.ours)
    assert release is not None
    pair.theirs.write(b"x" * 1000)
    record = pair.s_out.read()
    pair.c_in.write(record[:500])
    with pytest.raises(ssl.SSLWantReadError):
        pair.ours.read(2000)
    assert release() == 0  # the half record is in the read buffer: kept
    pair.c_in.write(record[500:])
    assert pair.ours.read(2000) == b"x" * 1000
    assert release() == 1


def test_buffers_are_not_released_where_the_quick_way_is_not_had(
    contexts: Contexts, monkeypatch: pytest.MonkeyPatch
) -> None:
    server, client, _ = contexts
    pair = handshaken(server, client)
    with monkeypatch.context() as m:  # a layout other than the one read
        m.setattr(tls_session, "_connection", lambda tls: None)
        assert tls_session.buffers_release(pair.ours) is None
    with monkeypatch.context() as m:  # an OpenSSL without the fix (the cached answer left alone)
        m.setattr(tls_session, "_buffers", lambda: None)
        assert tls_session.buffers_release(pair.ours) is None
    assert tls_session.buffers_release(pair.ours) is not None


@pytest.mark.parametrize(
    ("version", "had"),
    [
        ((3, 0, 0, 13, 0), False),
        ((3, 0, 0, 14, 0), True),
        ((3, 2, 0, 1, 0), False),
        ((3, 3, 0, 1, 0), True),
        ((3, 5, 0, 0, 0), True),
        ((1, 1, 1, 25, 15), False),
    ],
)
def test_buffers_are_released_only_on_an_openssl_with_the_use_after_free_fixed(
    version: tuple[int, ...], had: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """CVE-2024-4741: SSL_free_buffers could free a buffer still in use before these releases."""
    monkeypatch.setattr(ssl, "OPENSSL_VERSION_INFO", version)
    assert (tls_session._buffers.__wrapped__() is not None) == had
