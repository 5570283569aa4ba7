"""One value fetched for every waiter: the driver of :class:`bridge.identity.tokens.TokenState`.

A token from a token endpoint (bridge/identity/oauth2.py) and an agent's JWKS
(bridge/push/signatures.py) are both documents many callers need at once from a
server that may be slow, down or hostile. :class:`Shared` keeps one, fetched by
one request however many wait (a new one in the background ahead of its
expiry), never hands it out past its life, and shares a failed fetch with every
waiter, asking the server again only once the backoff passed: between, callers
are told at once (:class:`Failed`, with how long until the next try).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

from bridge.identity.tokens import Lease, Plan, TokenState

log = logging.getLogger(__name__)

T = TypeVar("T")


class Failed(Exception):
    """No value: what the last fetch said (``detail``, safe to show: never a secret or
    the server's own words), and in how many seconds the next one may be made.
    ``error``: the fetcher's own exception, for a caller that raises that kind."""

    def __init__(
        self, detail: str, *, refused: bool = False, retry_after: float = 0.0, error: Exception | None = None
    ) -> None:
        super().__init__(detail)
        self.detail = detail
        self.refused = refused  # the server refused these credentials (not: failed for a while)
        self.retry_after = retry_after
        self.error = error


class Shared(Generic[T]):
    """The value ``fetch`` gives (with its lifetime in seconds, or :class:`Failed`),
    for every caller. ``name`` and ``failing`` make the one warning a failed fetch
    logs: ``"<name>: <failing> (<detail>); next try in N s"`` (no ``failing``: the
    callers report it)."""

    def __init__(self, fetch: Callable[[], Awaitable[tuple[T, float]]], name: str, failing: str | None) -> None:
        self._fetcher = fetch
        self.name = name
        self._failing = failing
        self._state = TokenState()
        self._value: T | None = None
        self._failed: Failed | None = None
        self._fetch: asyncio.Task[None] | None = None

    @property
    def value(self) -> T | None:
        """The value last fetched, usable or not (None before the first)."""
        return self._value

    def age(self) -> float:
        """Seconds since the value was fetched (infinite without one)."""
        lease = self._state.lease
        return time.monotonic() - lease.obtained if lease is not None else float("inf")

    async def get(self) -> T:
        """The value to use now: kept, or fetched (one fetch for every waiter);
        :class:`Failed` when there is none."""
        plan = self._state.plan(time.monotonic())
        if plan is Plan.USE_AND_RENEW:
            self._start_fetch()
        if plan in (Plan.USE, Plan.USE_AND_RENEW):
            assert self._value is not None
            return self._value
        if plan is Plan.FETCH:
            await asyncio.shield(self._start_fetch())
            if self._state.plan(time.monotonic()) in (Plan.USE, Plan.USE_AND_RENEW):
                assert self._value is not None
                return self._value
        raise self._unavailable()

    def drop(self) -> bool:
        """The value in use was refused: the next :meth:`get` fetches at once (the
        backoff of earlier failures does not apply). False when it was dropped already."""
        return self._state.refused(self._state.generation)

    def _unavailable(self) -> Failed:
        last = self._failed
        retry = max(0.0, self._state.retry_at - time.monotonic())
        detail = last.detail if last is not None else "none fetched yet"
        if last is None:
            return Failed(detail, retry_after=retry)
        return Failed(detail, refused=last.refused, retry_after=retry, error=last.error)

    def _start_fetch(self) -> asyncio.Task[None]:
        """The fetch in flight, or a new one: never two at once."""
        loop = asyncio.get_running_loop()
        if self._fetch is None or self._fetch.done() or self._fetch.get_loop() is not loop:
            self._fetch = loop.create_task(self._fetch_once(), name=f"fetch:{self.name}")
        return self._fetch

    async def _fetch_once(self) -> None:
        try:
            value, lifetime = await self._fetcher()
        except Failed as exc:
            delay = self._state.failed(time.monotonic())
            self._failed = exc
            if self._failing is not None:
                log.warning("%s: %s (%s); next try in %.1f s", self.name, self._failing, exc.detail, delay)
            return
        self._value = value
        self._state.obtained(Lease(time.monotonic(), lifetime))
        self._failed = None
