"""A kept TLS session offered to a new connection without CPython's re-encoding of it.

CPython's ssl (3.11 here) gives a connection a session (``wrap_bio(..., session=)``,
``SSLObject.session = ...``) as a private copy: OpenSSL marks a session as not
resumable when a connection that holds it is freed without close_notify, which is
how the bridge drops a stream, and every later connection offered it would do a
full handshake. CPython makes that copy by encoding the session and decoding it
again, the agent's certificate with it: ~150 µs of the main thread per connect,
the largest cost after the handshake itself while a restart resumes thousands of
Tasks over TLS (bench/results/2026-12-07-tls-session-offer.json). OpenSSL's
``SSL_SESSION_dup`` makes a private copy without the round trip through DER (the
certificate shared by reference): ~3 µs.

:class:`Kept` calls it through ctypes, on the OpenSSL that CPython's ``_ssl`` module
is linked to, with the C pointers read out of ``_ssl``'s objects: the bridge's only
reach into the C structs of CPython's objects, all of it here. The layout read is
checked on each call against what the objects must hold (each object's pointer to
its SSL context is where the layout puts it, and is the context the caller knows),
so another interpreter or layout takes CPython's own way instead: the same session,
offered more slowly. ``tests/unit/agents/test_tls_session.py`` holds both ways to a
resumed handshake, and ``tests/servers/test_sockets.py`` the transport's use of it.
"""

from __future__ import annotations

import ctypes
import functools
import ssl
import sys
from typing import Any

# PyObject_HEAD: the reference count, then the type.
_HEAD = ctypes.sizeof(ctypes.c_ssize_t) + ctypes.sizeof(ctypes.c_void_p)
_WORD = ctypes.sizeof(ctypes.c_void_p)
# _ssl.c's PySSLSocket: PyObject_HEAD, Socket, ssl (SSL *), ctx (PySSLContext *), ...
_SOCKET_SSL = _HEAD + _WORD
_SOCKET_CTX = _HEAD + 2 * _WORD
# _ssl.c's PySSLSession: PyObject_HEAD, session (SSL_SESSION *), ctx (PySSLContext *).
_SESSION_SESSION = _HEAD
_SESSION_CTX = _HEAD + _WORD


class _OpenSSL:
    """The three libssl calls, typed."""

    def __init__(self, lib: ctypes.CDLL) -> None:
        self.dup = lib.SSL_SESSION_dup
        self.dup.argtypes = [ctypes.c_void_p]
        self.dup.restype = ctypes.c_void_p
        self.free = lib.SSL_SESSION_free
        self.free.argtypes = [ctypes.c_void_p]
        self.free.restype = None
        self.set = lib.SSL_set_session
        self.set.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
        self.set.restype = ctypes.c_int


@functools.cache
def _openssl() -> _OpenSSL | None:
    """libssl as ``_ssl`` sees it (looked up through the extension's own handle, so
    the library it was linked to), or None where that cannot be had."""
    path = getattr(ssl._ssl, "__file__", None)  # type: ignore[attr-defined]
    if sys.implementation.name != "cpython" or not isinstance(path, str):
        return None
    try:
        return _OpenSSL(ctypes.CDLL(path))
    except (OSError, AttributeError):
        return None


class Kept:
    """A session to offer again: CPython's object and, where the quick way works,
    OpenSSL's own copy of it, made when it is kept. CPython's object shares the
    session of the connection it was read from, which OpenSSL marks as not resumable
    when that connection is freed without close_notify; a copy made now
    is nobody's and stays resumable."""

    __slots__ = ("_copy", "_free", "session")

    def __init__(self, context: ssl.SSLContext, session: ssl.SSLSession) -> None:
        self.session = session
        self._copy: int | None = None
        self._free: Any = None
        lib = _openssl()
        if lib is None or type(session) is not ssl.SSLSession or ssl.SSLSession.__basicsize__ < _SESSION_CTX + _WORD:
            return
        shared = _pointer(session, _SESSION_SESSION)
        if _pointer(session, _SESSION_CTX) != id(context) or not shared:
            return  # not the layout read here
        self._copy, self._free = lib.dup(shared) or None, lib.free

    def __del__(self) -> None:
        if self._copy is not None:
            self._free(self._copy)

    def offer(self, tls: ssl.SSLObject) -> bool:
        """Offer this session to ``tls``, a client connection of the same context whose
        handshake has not begun. True if it went the quick way; CPython's way otherwise
        (which raises what CPython raises: a session of another context is refused)."""
        if self._offered_quickly(tls):
            return True
        tls.session = self.session
        return False

    def _offered_quickly(self, tls: ssl.SSLObject) -> bool:
        lib = _openssl()
        inner: Any = getattr(tls, "_sslobj", None)
        if lib is None or self._copy is None or inner is None or tls.server_side:
            return False
        if type(inner).__basicsize__ < _SOCKET_CTX + _WORD or _pointer(inner, _SOCKET_CTX) != id(tls.context):
            return False  # not the layout read here
        if _pointer(self.session, _SESSION_CTX) != id(tls.context):
            return False  # a session of another context: CPython says so
        connection = _pointer(inner, _SOCKET_SSL)
        copy = lib.dup(self._copy) if connection else None
        if not copy:
            return False
        try:
            return bool(lib.set(connection, copy) == 1)  # takes its own reference
        finally:
            lib.free(copy)


def _pointer(obj: object, offset: int) -> int | None:
    """The pointer stored ``offset`` bytes into ``obj``'s C struct (within its size)."""
    value: int | None = ctypes.c_void_p.from_address(id(obj) + offset).value
    return value
