"""Push notification routes and their tokens. Pure: no IO, no clock, no randomness.

A Task the bridge follows by push gets a webhook URL of its own that names what any
replica needs to route a notification without shared state: the agent, the commands
partition that owns the Task, the Task's ``taskKey`` and its start ``commandId``
(base64url, so any caller string fits in one path segment). Its token (A2A's
``token``; v0.3's ``X-A2A-Notification-Token`` header) is an HMAC of that route
under the bridge's push secret: every replica holding the secret can verify it, and
a token for one Task is worth nothing for another.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from bridge.core.backoff import jittered

PREFIX = ("push", "v1")
# The token's domain: a MAC made for anything else never verifies here.
_DOMAIN = b"a2a-bridge-push/v1\0"
# One URL path segment that needs no percent-encoding (RFC 3986 unreserved, no '~').
_SEGMENT = re.compile(r"[A-Za-z0-9._-]+")
_B64U = re.compile(r"[A-Za-z0-9_-]+")
# A Kafka partition number fits an int32.
MAX_PARTITION = 2**31 - 1

# Room beside the body in a notification record and its batch: the key (a taskKey of
# up to 256 characters) and the headers.
RECORD_OVERHEAD_BYTES = 16 * 1024


def record_bytes(max_body_bytes: int) -> int:
    """The largest notification record: what the notifications topic's
    ``max.message.bytes`` and the webhook producer's request size must take."""
    return max_body_bytes + RECORD_OVERHEAD_BYTES


# Why the webhook refused a request (bridge_push_notifications_refused_total{reason});
# a refused request is never produced.
Refusal = Literal[
    "not-found",
    "method",
    "unauthenticated",
    "media-type",
    "too-large",
    "malformed",
    "too-deep",  # a JSON object nested deeper than the bridge could write it back (bridge/wire/nesting.py)
    "kafka-unavailable",
    "unverifiable",  # the agent's JWKS could not be read: the signature cannot be checked now
    "busy",  # too many connections at once
]
STATUS: dict[Refusal, int] = {
    "not-found": 404,
    "method": 405,
    "unauthenticated": 401,
    "media-type": 415,
    "too-large": 413,
    "malformed": 400,
    "too-deep": 400,
    "kafka-unavailable": 503,
    "unverifiable": 503,
    "busy": 503,
}
# A signed notification's JWT is fresh for this long after its `iat`, and may come
# from a clock this far ahead of the bridge's.
JWT_MAX_AGE_SECONDS = 300.0
JWT_CLOCK_SKEW_SECONDS = 60.0
# The claim A2A's guidance names for the hash of the body (hex SHA-256).
BODY_HASH_CLAIM = "request_body_sha256"


@dataclass(frozen=True, slots=True)
class Route:
    agent: str
    partition: int
    task_key: str
    command_id: str  # the start command's commandId


def b64u(text: str) -> str:
    """urlsafe base64 of ``text``'s UTF-8 bytes without ``=`` padding."""
    return base64.urlsafe_b64encode(text.encode("utf-8")).rstrip(b"=").decode("ascii")


def _unb64u(segment: str) -> str | None:
    """The text :func:`b64u` made ``segment`` from; None when it is not exactly such a segment
    (so that one route has one URL: no padding, no non-canonical trailing bits)."""
    if not _B64U.fullmatch(segment) or len(segment) % 4 == 1:
        return None
    try:
        text = base64.urlsafe_b64decode(segment + "=" * (-len(segment) % 4)).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return None
    return text if text and b64u(text) == segment else None


def url(base_url: str, route: Route) -> str:
    """The webhook URL of ``route`` under ``base_url`` (what agents reach)."""
    if not _SEGMENT.fullmatch(route.agent) or not 0 <= route.partition <= MAX_PARTITION:
        raise ValueError("a push route needs an agent name of letters, digits, '.', '_', '-' and a partition >= 0")
    if not route.task_key or not route.command_id:
        raise ValueError("a push route needs a taskKey and a commandId")
    tail = "/".join((*PREFIX, route.agent, str(route.partition), b64u(route.task_key), b64u(route.command_id)))
    return f"{base_url.rstrip('/')}/{tail}"


def parse(path: str) -> Route | None:
    """The route of a request path :func:`url` made (its last six segments, so a base URL
    with a path of its own works whether a proxy strips that path or not); None for
    anything else."""
    segments = path.split("/")
    if len(segments) < 7 or segments[0] != "":
        return None
    push, version, agent, partition, task_key, command_id = segments[-6:]
    if (push, version) != PREFIX or not _SEGMENT.fullmatch(agent):
        return None
    if not partition.isascii() or not partition.isdigit() or str(int(partition)) != partition:
        return None
    if int(partition) > MAX_PARTITION:
        return None
    key, command = _unb64u(task_key), _unb64u(command_id)
    if key is None or command is None:
        return None
    return Route(agent, int(partition), key, command)


def token(key: bytes, route: Route) -> str:
    """The route's token: base64url(HMAC-SHA256(key, domain + the route's fields)).

    The taskKey and commandId enter as their base64url, so no field can hold the
    separator and two routes never MAC the same bytes."""
    fields = (route.agent, str(route.partition), b64u(route.task_key), b64u(route.command_id))
    message = _DOMAIN + "\0".join(fields).encode("ascii")
    digest = hmac.new(key, message, hashlib.sha256).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


def verify(key: bytes, route: Route, presented: str | None) -> bool:
    """Whether ``presented`` is the route's token (in constant time)."""
    if presented is None:
        return False
    return hmac.compare_digest(token(key, route).encode("ascii"), presented.encode("utf-8", "replace"))


def backstop_delay(base: float, draw: float) -> float:
    """The wait before a push-followed Task's next backstop ``tasks/get``: ``base`` spread
    over [0.75, 1.25] of itself (``draw`` in [0, 1)), so Tasks restored together do not
    poll together."""
    return jittered(base, lambda: draw, spread=0.25)


# @a2a-js/sdk POSTs a v1.0 Task's notifications as A2A's own media type.
JSON_MEDIA_TYPES = ("application/json", "application/a2a+json")


def json_media_type(content_type: str | None) -> bool:
    """Whether a Content-Type is JSON (:data:`JSON_MEDIA_TYPES`) with any parameters (a
    charset or none), in any case."""
    if content_type is None:
        return False
    return content_type.split(";", 1)[0].strip().lower() in JSON_MEDIA_TYPES


def refuse_head(
    *,
    method: str,
    route: Route | None,
    authentic: bool,
    pushes: bool,
    content_type: str | None,
    content_length: int | None,
    max_body_bytes: int,
) -> Refusal | None:
    """What the webhook answers a request head with before it reads the body, in this
    order: not a push path, not POST, a token that is not the route's, an agent that
    does not push (only an authenticated caller learns that), not JSON, too large."""
    checks: tuple[tuple[bool, Refusal], ...] = (
        (route is None, "not-found"),
        (method != "POST", "method"),
        (not authentic, "unauthenticated"),
        (not pushes, "not-found"),
        (not json_media_type(content_type), "media-type"),
        (content_length is not None and content_length > max_body_bytes, "too-large"),
    )
    return next((refusal for failed, refusal in checks if failed), None)


def jwt_claims_problem(
    claims: Mapping[str, Any], now: float, body_digests: Collection[str], audience: str
) -> str | None:
    """What is wrong with the claims of a notification's verified JWT (None: nothing):
    an ``iat`` that is missing, stale or from the future; when there is one, a body
    hash claim that is none of the body's ``body_digests`` (hex SHA-256), an ``aud``
    that is not ``audience`` (the Task's webhook URL, which the agent POSTs to)."""
    iat = claims.get("iat")
    if not isinstance(iat, int | float) or isinstance(iat, bool):
        return "the JWT has no iat"
    if iat < now - JWT_MAX_AGE_SECONDS:
        return f"the JWT was issued more than {JWT_MAX_AGE_SECONDS:.0f} s ago"
    if iat > now + JWT_CLOCK_SKEW_SECONDS:
        return "the JWT was issued in the future"
    if BODY_HASH_CLAIM in claims and str(claims[BODY_HASH_CLAIM]).lower() not in body_digests:
        return f"the JWT's {BODY_HASH_CLAIM} is not the body's"
    aud = claims.get("aud", audience)
    if audience not in (aud if isinstance(aud, list) else [aud]):
        return "the JWT's aud is not this Task's webhook URL"
    return None
