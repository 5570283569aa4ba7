"""A TLS session kept and offered to a new connection without CPython's copies of it,
and an idle connection's record buffers handed back (:func:`buffers_release`).

CPython's ssl (3.11) gives a connection a session (``wrap_bio(..., session=)``,
``SSLObject.session = ...``) as a private copy: OpenSSL marks a session as not
resumable when a connection that holds it is freed without close_notify, which is
how the bridge drops a stream, and every later connection offered it would do a
full handshake. CPython makes that copy by encoding the session and decoding it
again, the agent's certificate with it: ~150 µs of the main thread per connect,
the largest cost after the handshake itself while a restart resumes thousands of
Tasks over TLS (bench/results/2026-12-07-tls-session-offer.json). Reading a
connection's session (``SSLObject.session``) makes such a copy too, and never
frees it (3.11 hands back the connection's own session instead: ~5 KiB lost a read).
OpenSSL's ``SSL_SESSION_dup`` makes a private copy without the round trip through
DER (the certificate shared by reference): ~3 µs.

:class:`Kept` reads and offers sessions through ctypes, on the OpenSSL that
CPython's ``_ssl`` module is linked to, with the C pointers read out of ``_ssl``'s
objects: the bridge's only reach into the C structs of CPython's objects, all of it
here. It is taken only on the CPython versions whose layout was read
(:data:`_LAYOUTS_READ`), and each use checks what the objects must hold (the
connection object's type and its pointer to its SSL context where the layout puts
it; OpenSSL's own answer that the connection belongs to that context); anything else
takes CPython's way, as before. ``tests/unit/agents/test_tls_session.py`` holds both
ways to a resumed handshake over TLS 1.2 and 1.3, and fails on a CPython whose layout
was not read, so that an upgrade is checked here rather than silently slower.
:func:`buffers_release` reaches a connection the same way, for SSL_free_buffers, and
only on an OpenSSL release where that call is safe (:data:`_BUFFERS_FIXED`).
"""

from __future__ import annotations

import ctypes
import functools
import ssl
import sys
import sysconfig
from collections.abc import Callable
from typing import Any, NoReturn

# CPython versions whose Modules/_ssl.c structs were read for the offsets below.
_LAYOUTS_READ = frozenset({(3, 11)})
# PyObject_HEAD: the reference count, then the type.
_HEAD: int = object.__basicsize__
_WORD = ctypes.sizeof(ctypes.c_void_p)
# PySSLContext: PyObject_HEAD, ctx (SSL_CTX *), ...
_CONTEXT_CTX = _HEAD
# PySSLSocket: PyObject_HEAD, Socket, ssl (SSL *), ctx (PySSLContext *), ...
_SOCKET_SSL = _HEAD + _WORD
_SOCKET_CTX = _HEAD + 2 * _WORD


class _OpenSSL:
    """The libssl calls, typed."""

    def __init__(self, lib: ctypes.CDLL) -> None:
        def typed(name: str, result: Any, *args: Any) -> Any:
            call = getattr(lib, name)  # libcrypto's too: libssl's dependency
            call.argtypes, call.restype = list(args), result
            return call

        pointer = ctypes.c_void_p
        self.get1_session = typed("SSL_get1_session", pointer, pointer)
        self.is_resumable = typed("SSL_SESSION_is_resumable", ctypes.c_int, pointer)
        self.dup = typed("SSL_SESSION_dup", pointer, pointer)
        self.free = typed("SSL_SESSION_free", None, pointer)
        self.set_session = typed("SSL_set_session", ctypes.c_int, pointer, pointer)
        self.in_before = typed("SSL_in_before", ctypes.c_int, pointer)
        self.ssl_ctx = typed("SSL_get_SSL_CTX", pointer, pointer)
        self.clear_errors = typed("ERR_clear_error", None)


class _Buffers:
    """SSL_free_buffers, typed, called with the GIL held: a read pass calls it, and it
    does no IO (a CDLL call would let the producer thread in for every one)."""

    def __init__(self, lib: ctypes.PyDLL) -> None:
        call = lib.SSL_free_buffers
        call.argtypes, call.restype = [ctypes.c_void_p], ctypes.c_int
        self.free = call


@functools.cache
def _openssl() -> _OpenSSL | None:
    """libssl as ``_ssl`` sees it (looked up through the extension's own handle, so
    the library it was linked to), or None where the layout read here does not hold."""
    path = getattr(ssl._ssl, "__file__", None)  # type: ignore[attr-defined]
    if (
        sys.implementation.name != "cpython"
        or sys.version_info[:2] not in _LAYOUTS_READ
        or sysconfig.get_config_var("Py_GIL_DISABLED")
        or not isinstance(path, str)
    ):
        return None
    try:
        return _OpenSSL(ctypes.CDLL(path))
    except (OSError, AttributeError):
        return None


# Where SSL_free_buffers is safe on a connection that may hold unread data
# (CVE-2024-4741, a use after free, fixed in these releases of each line); the
# patch release is ssl.OPENSSL_VERSION_INFO[3] from OpenSSL 3 on.
_BUFFERS_FIXED = {(3, 0): 14, (3, 1): 6, (3, 2): 2, (3, 3): 1}


@functools.cache
def _buffers() -> _Buffers | None:
    """SSL_free_buffers of the linked OpenSSL, where :func:`_openssl` reaches it and
    the release has the fix."""
    major, minor, _, patch, _ = ssl.OPENSSL_VERSION_INFO
    if _openssl() is None or major < 3 or patch < _BUFFERS_FIXED.get((major, minor), 0):
        return None
    try:
        return _Buffers(ctypes.PyDLL(ssl._ssl.__file__))  # type: ignore[attr-defined]
    except (OSError, AttributeError):
        return None


def buffers_release(tls: ssl.SSLObject) -> Callable[[], int] | None:
    """For a client connection past its handshake, a call that hands its record
    buffers back to malloc while it holds no data (1 if it did), or None where that is
    not had here: call it after each read pass.

    CPython sets SSL_MODE_RELEASE_BUFFERS, yet OpenSSL 3.0 lets a connection's 16.7
    KiB read buffer go only in a few of its read paths, and never after a TLS 1.3
    ticket, which a server sends after every handshake: each idle stream kept it
    (``python -m bench.tls_buffers``; bench/results/2026-12-08-tls-buffers-released.json).
    The next record makes it again."""
    buffers, connection = _buffers(), _connection(tls)
    if buffers is None or connection is None:
        return None
    return functools.partial(buffers.free, connection)


class Kept:
    """A session to offer again: OpenSSL's own copy of it, made when it is kept (the
    connection it came from goes on holding, and may spoil, its own), or, where the
    quick way is not had, CPython's session object.

    Not copyable: the copy is freed with this object."""

    __slots__ = ("_context", "_copy", "_free", "_session")

    def __init__(
        self, context: ssl.SSLContext, session: ssl.SSLSession | None, copy: int | None = None, free: Any = None
    ) -> None:
        """Made by :meth:`of`: CPython's ``session``, or OpenSSL's ``copy`` that ``free`` frees."""
        self._context = id(context)
        self._session = session
        self._copy = copy
        self._free = free

    @classmethod
    def of(cls, tls: ssl.SSLObject) -> Kept | None:
        """What ``tls`` (a client connection past its handshake) can offer a later one:
        None if its session cannot be resumed (no ticket nor id, or spoilt)."""
        lib, connection = _openssl(), _connection(tls)
        if lib is None or connection is None:
            session = tls.session
            if session is None or not (session.has_ticket or session.id):
                return None
            return cls(tls.context, session)
        held = lib.get1_session(connection)
        if not held:
            return None
        try:
            copy = lib.dup(held) if lib.is_resumable(held) == 1 else None
        finally:
            lib.free(held)
        if not copy:
            lib.clear_errors()
            return None
        return cls(tls.context, None, copy, lib.free)

    def __del__(self) -> None:
        if self._copy is not None and self._free is not None:
            self._free(self._copy)

    def __copy__(self) -> NoReturn:
        raise TypeError("a kept TLS session is not copied: its OpenSSL copy is freed with it")

    def __deepcopy__(self, memo: object) -> NoReturn:
        self.__copy__()

    def offer(self, tls: ssl.SSLObject) -> bool:
        """Offer this session to ``tls``, a client connection of the same context whose
        handshake has not begun. True if it went the quick way. A session kept the
        quick way is offered no other way: to another context, a server side or a
        handshake begun, not at all (a full handshake, where CPython would refuse)."""
        if self._copy is None:
            if self._session is not None:
                tls.session = self._session  # CPython's way, and its refusals
            return False
        lib, connection = _openssl(), _connection(tls)
        if lib is None or connection is None or id(tls.context) != self._context or lib.in_before(connection) != 1:
            return False
        copy = lib.dup(self._copy)
        if not copy:
            lib.clear_errors()
            return False
        try:
            if lib.set_session(connection, copy) == 1:  # takes its own reference
                return True
            lib.clear_errors()
            return False
        finally:
            lib.free(copy)


def _connection(tls: ssl.SSLObject) -> int | None:
    """``tls``'s ``SSL *`` (a client's), where the layout read here holds for it."""
    inner: Any = getattr(tls, "_sslobj", None)
    lib = _openssl()
    if lib is None or tls.server_side or type(inner) is not ssl._ssl._SSLSocket:  # type: ignore[attr-defined]
        return None
    context = tls.context
    if _pointer(inner, _SOCKET_CTX) != id(context):
        return None
    connection, ctx = _pointer(inner, _SOCKET_SSL), _pointer(context, _CONTEXT_CTX)
    if not connection or not ctx or lib.ssl_ctx(connection) != ctx:
        return None
    return connection


def _pointer(obj: object, offset: int) -> int | None:
    """The pointer stored ``offset`` bytes into ``obj``'s C struct (within its size:
    each struct read here is larger than the offsets read)."""
    value: int | None = ctypes.c_void_p.from_address(id(obj) + offset).value
    return value
