"""bridge.agents.tls_session: a kept session offered to a new connection, the quick
way where the interpreter's layout is the one read, CPython's way otherwise; each
handshake here runs in memory (two BIOs a side), no socket."""

from __future__ import annotations

import contextlib
import gc
import ssl
from collections.abc import Iterator
from pathlib import Path

import pytest

from bridge.agents import tls_session
from tests.support import tls


@pytest.fixture(scope="module")
def contexts(tmp_path_factory: pytest.TempPathFactory) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    ca = tls.make_ca("tls-session-test-ca")
    keystore = tls.write_private(tmp_path_factory.mktemp("tls") / "agent.pem", tls.server_keystore_pem(ca, ["agent"]))
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server.load_cert_chain(keystore)
    return server, ssl.create_default_context(cadata=ca.pem().decode())


def connect(
    server: ssl.SSLContext, client: ssl.SSLContext, kept: tls_session.Kept | None = None
) -> tuple[ssl.SSLObject, bool | None]:
    """A handshake and the server's first bytes (its tickets come first), in memory:
    the client's TLS object and how ``kept`` was offered (None: not offered)."""
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
    theirs.write(b"x")
    c_in.write(s_out.read())
    assert ours.read(1) == b"x"
    return ours, quick


def handshake_turns(tls: ssl.SSLObject) -> Iterator[None]:
    for _ in range(5):
        try:
            tls.do_handshake()
            return
        except ssl.SSLWantReadError:
            yield
    raise AssertionError("the handshake did not end")


def kept_from(server: ssl.SSLContext, client: ssl.SSLContext) -> tls_session.Kept:
    first, _ = connect(server, client)
    assert first.session is not None
    kept = tls_session.Kept(client, first.session)
    del first  # freed without close_notify: OpenSSL marks the session it held
    gc.collect()
    return kept


def test_a_kept_session_resumes_the_quick_way_after_the_connection_it_came_from_is_gone(
    contexts: tuple[ssl.SSLContext, ssl.SSLContext],
) -> None:
    server, client = contexts
    kept = kept_from(server, client)
    for _ in range(3):
        tls, quick = connect(server, client, kept)
        assert (quick, tls.session_reused) == (True, True)


def test_where_the_quick_way_is_not_had_cpython_offers_the_session(
    contexts: tuple[ssl.SSLContext, ssl.SSLContext], monkeypatch: pytest.MonkeyPatch
) -> None:
    server, client = contexts
    monkeypatch.setattr(tls_session, "_openssl", lambda: None)  # another interpreter, say
    kept = kept_from(server, client)
    tls, quick = connect(server, client, kept)
    assert (quick, tls.session_reused) == (False, True)


def test_a_session_of_another_context_is_refused_as_cpython_refuses_it(
    contexts: tuple[ssl.SSLContext, ssl.SSLContext], tmp_path: Path
) -> None:
    server, client = contexts
    kept = kept_from(server, client)
    other = ssl.create_default_context()
    with pytest.raises(ValueError, match="different SSLContext"):
        kept.offer(other.wrap_bio(ssl.MemoryBIO(), ssl.MemoryBIO(), server_hostname="agent"))
