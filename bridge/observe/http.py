"""The operator's HTTP endpoints: /metrics, /healthz, /readyz (with a detail of
what is not ready, and of capacity: which limit new starts wait on).

A tiny asyncio server: three GET routes do not need a web framework.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest


class OpsServer:
    def __init__(self, port: int, ready: Callable[[], tuple[bool, str]], host: str = "0.0.0.0") -> None:
        self.port = port
        self.host = host
        self._ready = ready
        self._server: asyncio.Server | None = None

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._handle, self.host, self.port)
        sock = self._server.sockets[0]
        self.port = sock.getsockname()[1]

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            line = await asyncio.wait_for(reader.readline(), 5)
            while (await asyncio.wait_for(reader.readline(), 5)) not in (b"\r\n", b"\n", b""):
                pass
            parts = line.decode("latin-1").split()
            path = parts[1].split("?")[0] if len(parts) > 1 else ""
            if path == "/metrics":
                status, ctype, body = 200, CONTENT_TYPE_LATEST, generate_latest()
            elif path == "/healthz":
                status, ctype, body = 200, "text/plain", b"ok\n"
            elif path == "/readyz":
                ok, detail = self._ready()
                head = "ready" if ok else "not ready"
                status, ctype, body = (200 if ok else 503), "text/plain", f"{head}\n{detail}".encode()
            else:
                status, ctype, body = 404, "text/plain", b"not found\n"
            reason = {200: "OK", 404: "Not Found", 503: "Service Unavailable"}[status]
            writer.write(
                f"HTTP/1.1 {status} {reason}\r\nContent-Type: {ctype}\r\nContent-Length: {len(body)}\r\n"
                "Connection: close\r\n\r\n".encode()
                + body
            )
            await writer.drain()
        except (TimeoutError, ConnectionError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()
