"""When a cached access token is used, renewed or fetched, and how failures are paced. Pure.

A token from an OAuth2 token endpoint (RFC 6749 §4.4, ``expires_in`` §5.1) is
shared by every Task of every agent configured with the same client, so the
rules below decide for all of them at once:

- a token is renewed *ahead* of its expiry (:attr:`Lease.renew_at`), in the
  background, while the old one still serves: a Task never waits for a renewal
  that was due;
- a token close to its expiry (:attr:`Lease.usable_until`) is no longer handed
  out: it could expire on its way to the agent;
- whoever needs a token while none is usable waits for *one* fetch, however
  many they are (10,000 Tasks resuming at once make one request);
- a failed fetch is not repeated before its backoff has passed: callers in
  between fail at once (:attr:`Plan.BACKED_OFF`), so a token endpoint that is
  down sees one request per backoff step, not one per Task;
- a token the agent refused (HTTP 401) is dropped, once: the next caller
  fetches a fresh one, and callers still holding the refused one do not make
  a second fetch for it;
- every token has a finite life (:func:`lifetime`: ``expires_in`` up to a cap, or
  :data:`UNSTATED_LIFETIME`; one stated as spent, 0 or less, is no token): while
  renewals fail it is handed out until then, never after, so callers learn there
  is no token (their Tasks wait, and end at their deadline) instead of sending a
  spent one for ever.

The clock is the caller's (``now``: monotonic seconds).
"""

from __future__ import annotations

import enum
import math
import random
from dataclasses import dataclass

from bridge.core.backoff import Backoff, Draw

# A token endpoint that fails: 0.5 s doubling to 30 s, at least half of each
# step, so that a provider that is down is never hammered.
TOKEN_RETRY = Backoff(base=0.5, cap=30.0, floor=0.5)
# A token without ``expires_in`` lives this long here (RFC 6749 §5.1 makes it
# optional; a provider that leaves it out usually means "a long time", which the
# bridge cannot check: it renews as often as for Keycloak's default lifespan).
UNSTATED_LIFETIME = 300.0
# The most life a token is given: one stated to live longer (or a lifetime in
# milliseconds taken for seconds) is renewed within a day all the same, so a revoked
# client is noticed.
MAX_LIFETIME = 24 * 3600.0
# Renewal starts this far ahead of the expiry at least (or half the lifetime of
# a shorter-lived token), so that a slow token endpoint still answers in time.
RENEW_AHEAD = 30.0
# The last part of a lifetime in which a token is no longer handed out: it has
# to reach the agent and be checked there before it expires.
IN_FLIGHT = 5.0

# RFC 6749 §5.2 error codes that mean "these credentials are not accepted",
# as opposed to a provider that is down or overloaded.
REFUSALS = frozenset({"invalid_client", "unauthorized_client", "invalid_grant", "invalid_scope", "invalid_request"})


@dataclass(frozen=True, slots=True)
class Lease:
    """One token's lifetime as the token endpoint stated it."""

    obtained: float
    lifetime: float  # seconds, as :func:`lifetime` reads expires_in

    @property
    def renew_at(self) -> float:
        ahead = min(max(self.lifetime * 0.2, RENEW_AHEAD), self.lifetime * 0.5)
        return self.obtained + self.lifetime - ahead

    @property
    def usable_until(self) -> float:
        return self.obtained + self.lifetime - min(IN_FLIGHT, self.lifetime * 0.1)


def lifetime(expires_in: object) -> float | None:
    """``expires_in`` as seconds, at most :data:`MAX_LIFETIME`; :data:`UNSTATED_LIFETIME`
    when it is missing or not a number; None when it is 0 or less: the endpoint says
    the token is spent (a token is never used longer than stated: the agent would
    refuse it)."""
    if isinstance(expires_in, bool) or not isinstance(expires_in, int | float | str):
        return UNSTATED_LIFETIME
    try:
        seconds = float(expires_in)
    except ValueError:
        return UNSTATED_LIFETIME
    if math.isnan(seconds):
        return UNSTATED_LIFETIME
    return min(seconds, MAX_LIFETIME) if seconds > 0 else None


def refused(status: int, error: object) -> bool:
    """Whether a token endpoint's error answer refuses these credentials (a wrong
    or revoked client), rather than failing for a while (5xx, 429, a proxy)."""
    if status in (400, 401, 403) and isinstance(error, str):
        return error in REFUSALS
    return status in (401, 403)


class Plan(enum.Enum):
    USE = "use"  # hand out the cached token
    USE_AND_RENEW = "use-and-renew"  # hand it out, and start one renewal in the background
    FETCH = "fetch"  # nothing usable: wait for one fetch (started by whoever comes first)
    BACKED_OFF = "backed-off"  # nothing usable, and the last fetch failed too recently: fail now


@dataclass(slots=True)
class TokenState:
    """The cached token of one (token endpoint, client, scopes, audience), as rules see it."""

    lease: Lease | None = None
    generation: int = 0  # counts tokens obtained; a 401 names the generation it refused
    failures: int = 0  # fetches failed in a row
    retry_at: float = 0.0  # no fetch before this, after a failure

    def plan(self, now: float) -> Plan:
        usable = self.lease is not None and now < self.lease.usable_until
        if usable:
            assert self.lease is not None
            due = now >= self.lease.renew_at and now >= self.retry_at
            return Plan.USE_AND_RENEW if due else Plan.USE
        return Plan.BACKED_OFF if now < self.retry_at else Plan.FETCH

    def obtained(self, lease: Lease) -> int:
        """A fetch succeeded; the new token's generation."""
        self.lease = lease
        self.generation += 1
        self.failures = 0
        self.retry_at = 0.0
        return self.generation

    def failed(self, now: float, draw: Draw = random.random) -> float:
        """A fetch failed: the seconds until the next may be made."""
        delay = TOKEN_RETRY.delay(self.failures, draw)
        self.failures += 1
        self.retry_at = now + delay
        return delay

    def refused(self, generation: int) -> bool:
        """The agent refused the token of ``generation``; True when that drops the
        cached token (a later generation was already fetched: nothing to do)."""
        if generation != self.generation or self.lease is None:
            return False
        self.lease = None
        # A refusal is news, not a failure of the endpoint: fetch at once.
        self.retry_at = 0.0
        return True
