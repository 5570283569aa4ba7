"""Which of an agent's interfaces the bridge speaks to: read from its agent card. Pure.

An A2A agent serves one or more protocol bindings, each at a URL, and says which in
its card:

- v1.0: ``supportedInterfaces: [{url, protocolBinding, protocolVersion}, ...]``, in
  the agent's order of preference;
- v0.3: ``url`` with ``preferredTransport`` (``JSONRPC`` when absent) at the card's
  ``protocolVersion``, then ``additionalInterfaces: [{url, transport}, ...]``.

The bridge speaks JSON-RPC at v0.3 and v1.0, HTTP+JSON and gRPC at v1.0
(:data:`SPOKEN`). :func:`choose` takes the first interface in the card's order that
it speaks at the version the agent is configured for (its ``dialect``), else the
first it speaks at all: so an agent configured by the base its card lives under
works whatever it serves, and an agent that serves both versions keeps the one
configured.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import urlsplit

Binding = Literal["jsonrpc", "http+json", "grpc"]

# The card's names (case-insensitive) for the bindings the bridge speaks.
_CARD_NAMES: dict[str, Binding] = {"JSONRPC": "jsonrpc", "HTTP+JSON": "http+json", "GRPC": "grpc"}
SPOKEN: frozenset[tuple[Binding, str]] = frozenset(
    {("jsonrpc", "0.3"), ("jsonrpc", "1.0"), ("http+json", "1.0"), ("grpc", "1.0")}
)
# The schemes of a gRPC interface's URL, and whether each is TLS; a bare host:port is TLS.
GRPC_SCHEMES = {"grpc": False, "grpcs": True, "http": False, "https": True}
# The port of a gRPC URL that names none.
TLS_PORT, PLAIN_PORT = 443, 80
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
        """The bridge's name of the binding, when it speaks it at this version (and, for
        gRPC, the URL names a host it can dial)."""
        binding = _CARD_NAMES.get(self.binding.upper())
        if binding is None or (binding, self.version) not in SPOKEN:
            return None
        if binding == "grpc" and grpc_url_problem(self.url) is not None:
            return None
        return binding

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
    return f"its agent card offers {shown}; this bridge speaks JSON-RPC (0.3, 1.0), HTTP+JSON (1.0) and GRPC (1.0)"


@dataclass(frozen=True, slots=True)
class GrpcTarget:
    """Where a gRPC interface is served: ``host:port`` as gRPC dials it, and whether over TLS."""

    address: str
    tls: bool


def grpc_target(url: str) -> GrpcTarget:
    """The gRPC target of an interface URL as cards write them: ``grpc://host:port``
    (plaintext), ``grpcs://host:port`` (TLS), ``http(s)://host:port``, or a bare
    ``host:port`` (TLS). A path is ignored: gRPC has none of its own (every method is
    ``/lf.a2a.v1.A2AService/<name>``). :class:`ValueError` for a URL of another scheme
    or without a host."""
    text = url.strip()
    parts = urlsplit(text if "://" in text else "grpcs://" + text)
    scheme = parts.scheme.lower()
    if scheme not in GRPC_SCHEMES:
        raise ValueError(f"{scheme}:// is not a gRPC URL (grpc://, grpcs://, http://, https:// or host:port)")
    tls = GRPC_SCHEMES[scheme]
    try:
        host, port = parts.hostname, parts.port
    except ValueError:
        raise ValueError("its port is not a number up to 65535") from None
    if not host:
        raise ValueError("it names no host")
    shown = f"[{host}]" if ":" in host else host
    return GrpcTarget(f"{shown}:{port or (TLS_PORT if tls else PLAIN_PORT)}", tls)


def grpc_url_problem(url: str) -> str | None:
    """What keeps ``url`` from being a gRPC interface's (None: nothing)."""
    try:
        grpc_target(url)
    except ValueError as exc:
        return f"{url!r} is not a gRPC URL: {exc}"
    return None
