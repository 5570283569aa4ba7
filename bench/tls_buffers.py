"""What OpenSSL keeps per idle client connection, with and without its buffers let go.

``python -m bench.tls_buffers [connections]`` (default 2000): that many client
connections over memory BIOs to a server context of this process, each through its
handshake, the server's tickets (TLS 1.3 sends them after the handshake) and a
response of ten 200 B records read to the end, as a streaming Task's connection
idles between events. Then the server sides are freed and glibc's count of bytes in
use (mallinfo2: OpenSSL's heap, and Python's objects past pymalloc's 512 B) is read.
Each case once with the connections as they are and once after
``bridge.agents.tls_session.buffers_release`` (what ``bridge/agents/transport.py``
``_TLSProtocol`` calls after each read pass): TLS 1.3 resumed (the bridge's usual
case: every connection after the first offers a kept session), TLS 1.3 full, and
TLS 1.2 resumed. Prints KiB per connection as JSON.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import ssl
import sys
import tempfile
from pathlib import Path
from typing import Any

import orjson

from bench.certs import certificate
from bridge.agents import tls_session


class _MallInfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks")
    ] + [("keepcost", ctypes.c_size_t)]


_libc = ctypes.CDLL("libc.so.6")
_libc.mallinfo2.restype = _MallInfo2


def in_use() -> int:
    """Bytes malloc has handed out and not had back (small blocks and mmap'd ones)."""
    info = _libc.mallinfo2()
    return int(info.uordblks + info.hblkhd)


def connections(
    server: ssl.SSLContext, client: ssl.SSLContext, count: int, *, resume: bool, release: bool
) -> tuple[float, int]:
    """KiB per client connection left after ``count`` connections, and how many resumed."""
    kept: tls_session.Kept | None = None
    clients: list[tuple[ssl.SSLObject, ssl.MemoryBIO, ssl.MemoryBIO]] = []
    servers: list[ssl.SSLObject] = []
    resumed = 0
    gc.collect()
    before = in_use()
    for _ in range(count):
        c_in, c_out, s_in, s_out = ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO()
        ours = client.wrap_bio(c_in, c_out, server_hostname="localhost")
        if kept is not None:
            kept.offer(ours)
        theirs = server.wrap_bio(s_in, s_out, server_side=True)
        for _ in range(5):
            for side in (ours, theirs):
                with contextlib.suppress(ssl.SSLWantReadError):
                    side.do_handshake()
            s_in.write(c_out.read())
            c_in.write(s_out.read())
        for _ in range(10):
            theirs.write(b"x" * 200)
        c_in.write(s_out.read())
        while True:
            try:
                ours.read(65536)
            except ssl.SSLWantReadError:
                break
        if release and (free := tls_session.buffers_release(ours)) is not None:
            free()
        if resume and kept is None:
            kept = tls_session.Kept.of(ours)
        resumed += ours.session_reused
        clients.append((ours, c_in, c_out))
        servers.append(theirs)
    servers.clear()
    gc.collect()
    per = (in_use() - before) / count / 1024
    clients.clear()
    return round(per, 1), resumed


def main(count: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as folder:
        cert, key = certificate(Path(folder))
        server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        server.load_cert_chain(cert, key)
        cases: dict[str, Any] = {}
        for name, version, resume in (
            ("tls1.3 resumed", ssl.TLSVersion.TLSv1_3, True),
            ("tls1.3 full", ssl.TLSVersion.TLSv1_3, False),
            ("tls1.2 resumed", ssl.TLSVersion.TLSv1_2, True),
        ):
            client = ssl.create_default_context(cafile=str(cert))
            client.maximum_version = version
            case: dict[str, Any] = {}
            for release in (False, True, False, True):  # alternating: twice each
                per, resumed = connections(server, client, count, resume=resume, release=release)
                key_ = "released" if release else "kept"
                case.setdefault(f"kib_per_connection_{key_}", []).append(per)
                case["resumed"] = resumed
            cases[name] = case
    return {
        "connections": count,
        "openssl": ssl.OPENSSL_VERSION,
        "release_available": tls_session._buffers() is not None,
        "cases": cases,
    }


if __name__ == "__main__":
    print(orjson.dumps(main(int(sys.argv[1]) if len(sys.argv) > 1 else 2000), option=orjson.OPT_INDENT_2).decode())
