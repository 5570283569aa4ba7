"""Which of an agent's interfaces the bridge speaks to: read from its agent card. Pure.

An A2A agent serves one or more protocol bindings, each at a URL, and says which in
its card:

- v1.0: ``supportedInterfaces: [{url, protocolBinding, protocolVersion}, ...]``, in
  the agent's order of preference;
- v0.3: ``url`` with ``preferredTransport`` (``JSONRPC`` when absent) at the card's
  ``protocolVersion``, then ``additionalInterfaces: [{url, transport}, ...]``.

The bridge speaks JSON-RPC at v0.3 and v1.0, and HTTP+JSON at v1.0
(:data:`SPOKEN`). :func:`choose` takes the first interface in the card's order that
it speaks at the version the agent is configured for (its ``dialect``), else the
first it speaks at all: so an agent configured by the base its card lives under
works whatever it serves, and an agent that serves both versions keeps the one
configured.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

Binding = Literal["jsonrpc", "http+json"]

# The card's names (case-insensitive) for the bindings the bridge speaks.
_CARD_NAMES: dict[str, Binding] = {"JSONRPC": "jsonrpc", "HTTP+JSON": "http+json"}
SPOKEN: frozenset[tuple[Binding, str]] = frozenset({("jsonrpc", "0.3"), ("jsonrpc", "1.0"), ("http+json", "1.0")})
# How many interfaces of a card are read: a card is the agent's, not a place to hide work.
MAX_INTERFACES = 64


@dataclass(frozen=True, slots=True)
class Interface:
    """One interface a card offers: its binding as the card names it (``JSONRPC``,
    ``HTTP+JSON``, ``GRPC``, ...), its URL and its protocol version (``major.minor``)."""

    binding: str
    url: str
    version: str

    @property
    def spoken(self) -> Binding | None:
        """The bridge's name of the binding, when it speaks it at this version."""
        binding = _CARD_NAMES.get(self.binding.upper())
        return binding if binding is not None and (binding, self.version) in SPOKEN else None

    def __str__(self) -> str:
        return f"{self.binding} {self.version} at {self.url}"


def version_of(value: Any) -> str:
    """``major.minor`` of a protocol version (``1.0.1`` is ``1.0``); ``?`` when none is given."""
    if not isinstance(value, str) or not value:
        return "?"
    return ".".join(value.strip().split(".")[:2])


def offered(card: dict[str, Any]) -> list[Interface]:
    """The interfaces ``card`` offers, in its order: v1.0's ``supportedInterfaces`` when it
    has them, else v0.3's ``url``/``preferredTransport`` and ``additionalInterfaces``.
    Entries without a URL or a binding name are skipped."""
    listed = card.get("supportedInterfaces")
    if isinstance(listed, list) and listed:
        out = [
            Interface(str(i["protocolBinding"]), str(i["url"]), version_of(i.get("protocolVersion")))
            for i in listed[:MAX_INTERFACES]
            if isinstance(i, dict) and _named(i.get("url")) and _named(i.get("protocolBinding"))
        ]
        return out
    version = version_of(card.get("protocolVersion") or "0.3")
    out = []
    if _named(card.get("url")):
        preferred = card.get("preferredTransport")
        out.append(Interface(str(preferred) if _named(preferred) else "JSONRPC", str(card["url"]), version))
    more = card.get("additionalInterfaces")
    if isinstance(more, list):
        out.extend(
            Interface(str(i["transport"]), str(i["url"]), version)
            for i in more[:MAX_INTERFACES]
            if isinstance(i, dict) and _named(i.get("url")) and _named(i.get("transport"))
        )
    return out


def _named(value: Any) -> bool:
    return isinstance(value, str) and bool(value.strip())


def choose(interfaces: list[Interface], version: str) -> Interface | None:
    """The first interface the bridge speaks at ``version``, else the first it speaks at
    any version; None when it speaks none of them."""
    spoken = [i for i in interfaces if i.spoken is not None]
    return next((i for i in spoken if i.version == version), spoken[0] if spoken else None)


def unspoken(interfaces: list[Interface]) -> str:
    """Why no interface was chosen, for a log line and a DLQ reason."""
    if not interfaces:
        return "its agent card lists no interface"
    shown = ", ".join(f"{i.binding} {i.version}" for i in interfaces[:8])
    return f"its agent card offers {shown}; this bridge speaks JSON-RPC (0.3, 1.0) and HTTP+JSON (1.0)"
