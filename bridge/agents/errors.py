"""An agent's HTTP errors as the bridge's, mapped once here (as httpx maps httpcore's
in one place): every call of :class:`bridge.agents.client.AgentClient` runs inside
:class:`AgentErrors`, which turns a transport failure (a connection refused or lost,
a timeout, a TLS handshake refused) into :class:`~bridge.errors.AgentUnavailable`.

The bridge's error carries no link to httpx's: a request's URL may hold an API key,
and an exception's ``__context__`` would keep it. Python links an exception raised in
an ``__exit__`` (or an ``except``) to the one being handled, so the block's failure is
held, not raised, and :meth:`AgentErrors.check` raises it after the block. What it
says is the failure's kind, and a TLS failure's reason (an untrusted certificate, a
client certificate the agent asked for).
"""

from __future__ import annotations

from types import TracebackType

import httpx

from bridge.errors import AgentUnavailable

_TLS = ": TLS: "


class AgentErrors:
    """``with errors: ...`` then ``errors.check()``: the block's transport failure, held
    and then raised as :class:`AgentUnavailable` of ``agent``'s ``method``."""

    def __init__(self, agent: str, method: str) -> None:
        self._agent = agent
        self._method = method
        self._failure: AgentUnavailable | None = None

    def __enter__(self) -> AgentErrors:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> bool:
        if isinstance(exc, httpx.TransportError):
            self._failure = AgentUnavailable(self._agent, self._method, _what(exc))
            return True  # held: check() raises it outside any handler
        return False

    def check(self) -> None:
        """Raise the block's failure, if it had one; call it right after the block."""
        if self._failure is not None:
            raise self._failure


def _what(exc: httpx.TransportError) -> str:
    """What a transport failure says: its kind, and a TLS failure's reason. Never the
    request's URL."""
    text = str(exc)
    if "SSL" in text or "certificate" in text.lower():
        return f"{type(exc).__name__}{_TLS}{text[:200]}"
    return type(exc).__name__


def tls_failure(exc: AgentUnavailable) -> bool:
    """Whether the agent was out of reach for TLS (its certificate, or ours), not for being down."""
    return _TLS in exc.detail
