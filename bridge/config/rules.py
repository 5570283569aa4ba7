"""The rules of the configuration model (bridge/config/model.py), as plain functions of values.

A value rule takes one key's value and returns what is wrong with it (or None); model.py
names the rule of each key next to its type and default. The rules that relate keys take
a section's effective values (defaults filled in) and return :class:`Problem` values.
Nothing here reads a file or the environment.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from bridge.config.schemas import load as load_schema
from bridge.wire.interfaces import GRPC_SCHEMES, grpc_url_problem

# What a value rule says about a value: None when it fits.
Rule = Callable[[Any], "str | None"]

SASL_PROTOCOLS = ("SASL_PLAINTEXT", "SASL_SSL")
PLAIN_PROTOCOLS = ("PLAINTEXT", "SSL")  # no SASL
TLS_PROTOCOLS = ("SSL", "SASL_SSL")
# The keys of a SASL login by user name and password, and those of OAUTHBEARER
# (sasl_oauth_auth_method has a default, so it is never "set" by itself).
SASL_PASSWORD_KEYS = ("sasl_username", "sasl_password_file", "sasl_password_env")
SASL_OAUTH_KEYS = (
    "sasl_oauth_token_url",
    "sasl_oauth_client_id",
    "sasl_oauth_client_secret_file",
    "sasl_oauth_client_secret_env",
    "sasl_oauth_scopes",
    "sasl_oauth_audience",
    "sasl_oauth_ca_file",
)
# Kafka's own rule for topic names.
TOPIC_NAME = re.compile(r"^[A-Za-z0-9._-]{1,249}$")
URL = re.compile(r"^https?://[^/\s]+")
# The dialects besides "gateway" (bridge/config/model.py, Dialect); none sends agent_code.
A2A_DIALECTS = ("a2a-0.3", "a2a-1.0")
# A command's deadlineSeconds is at most this (schemas/command.schema.json); so is the default.
MAX_DEADLINE_SECONDS = 2592000


@dataclass(frozen=True, slots=True)
class Problem:
    """One thing wrong with a configuration (or, as a warning, one thing that has no effect)."""

    where: str
    message: str
    warning: bool = False

    def __str__(self) -> str:
        return f"{self.where}: {self.message}"


def suggest(word: str, known: Iterable[str]) -> str:
    """`` (did you mean 'x'?)`` for the nearest known name, if one is near."""
    known = list(known)
    near = difflib.get_close_matches(word, known, n=1, cutoff=0.6)
    if not near:
        near = difflib.get_close_matches(word.lower(), [k.lower() for k in known], n=1, cutoff=0.6)
        near = [k for k in known if k.lower() in near]
    return f" (did you mean {near[0]!r}?)" if near else ""


def agent_name_pattern() -> str:
    """The command schema's pattern for ``agent``: a configured name outside it can never be addressed."""
    start = next(b for b in load_schema("command")["allOf"] if b["if"]["properties"]["type"]["const"] == "start")
    pattern: str = start["then"]["properties"]["agent"]["pattern"]
    return pattern


# ------------------------------------------------------------ value rules --


def one_of(allowed: tuple[str, ...]) -> Rule:
    def rule(value: Any) -> str | None:
        if value in allowed:
            return None
        return f"must be one of {list(allowed)}, got {value!r}{suggest(str(value), allowed)}"

    return rule


def positive(value: Any) -> str | None:
    """A size, a count, a timeout or a rate: zero or less makes no sense (nor does NaN)."""
    return None if value > 0 else f"must be above 0, got {value!r}"


def non_negative(value: Any) -> str | None:
    """Zero means none, or no limit."""
    return None if value >= 0 else f"must be 0 (none) or more, got {value!r}"


def port(value: Any) -> str | None:
    if -1 <= value <= 65535:
        return None
    return f"must be -1 (no HTTP endpoints), 0 (any free port) or a port up to 65535, got {value}"


def listen_port(value: Any) -> str | None:
    """A server that must listen: 0 (any free port) or a port."""
    return None if 0 <= value <= 65535 else f"must be 0 (any free port) or a port up to 65535, got {value}"


def deadline(value: Any) -> str | None:
    if value > MAX_DEADLINE_SECONDS:
        return f"at most {MAX_DEADLINE_SECONDS} (30 days), as a command's deadlineSeconds"
    return positive(value)


def not_empty(value: Any) -> str | None:
    return None if str(value).strip() else "must not be empty"


def topic(value: Any) -> str | None:
    if TOPIC_NAME.match(value) and value not in (".", ".."):
        return None
    return f"{value!r} is not a Kafka topic name (letters, digits, '.', '_', '-'; at most 249)"


def http_url(value: Any) -> str | None:
    return None if URL.match(str(value)) else f"{value!r} is not an http:// or https:// URL"


def interface_url(value: Any) -> str | None:
    """An interface's URL: http(s):// (any binding), or grpc(s):// (gRPC's; :func:`agent`
    checks it fits the binding)."""
    scheme = str(value).partition("://")[0].lower()
    if scheme in GRPC_SCHEMES and "://" in str(value):
        return None
    return f"{value!r} is not an http://, https://, grpc:// or grpcs:// URL"


def hosts(value: Any) -> str | None:
    """``host:port[,host:port...]``."""
    if not str(value).strip():
        return "must not be empty"
    bad = []
    for item in filter(None, (s.strip() for s in str(value).split(","))):
        host, sep, number = item.rpartition(":")
        if not sep or not host or not number.isdigit() or not 0 < int(number) <= 65535:
            bad.append(repr(item))
    if not bad:
        return None
    return f"{', '.join(bad)} {'is' if len(bad) == 1 else 'are'} not host:port"


# ----------------------------------------------------- rules across keys --


def secret_source(where: str, values: Mapping[str, Any], key: str) -> list[Problem]:
    """A secret is read from a file (``<key>_file``) or a variable (``<key>_env``): one of them."""
    if values.get(f"{key}_file") and values.get(f"{key}_env"):
        return [Problem(f"[{where}]", f"both {key}_file and {key}_env are set; name one place for the secret")]
    return []


def _sasl_password(k: Mapping[str, Any], protocol: str) -> list[Problem]:
    """A login by user name and password (PLAIN, SCRAM; or no mechanism named yet)."""
    out: list[Problem] = []
    for key in ("sasl_mechanism", "sasl_username"):
        if not k[key]:
            out.append(Problem(f"kafka.{key}", f"required with security_protocol {protocol!r}"))
    if not (k["sasl_password_file"] or k["sasl_password_env"]):
        out.append(Problem("[kafka]", f"security_protocol {protocol!r} needs sasl_password_file or sasl_password_env"))
    if k["sasl_mechanism"]:
        mechanism = k["sasl_mechanism"]
        for key in SASL_OAUTH_KEYS:
            if k[key]:
                out.append(Problem(f"kafka.{key}", f"is set, but sasl_mechanism {mechanism!r} does not use OAuth"))
    return out


def _sasl_oauth(k: Mapping[str, Any]) -> list[Problem]:
    """OAUTHBEARER: a token endpoint, a client and its secret; no user name or password."""
    out = [
        Problem(f"kafka.{key}", "is set, but sasl_mechanism 'OAUTHBEARER' logs in with a token, not a password")
        for key in SASL_PASSWORD_KEYS
        if k[key]
    ]
    for key in ("sasl_oauth_token_url", "sasl_oauth_client_id"):
        if not k[key]:
            out.append(Problem(f"kafka.{key}", "required with sasl_mechanism 'OAUTHBEARER'"))
    if not _secret_set(k, "sasl_oauth_client_secret"):
        message = "sasl_mechanism 'OAUTHBEARER' needs sasl_oauth_client_secret_file or sasl_oauth_client_secret_env"
        out.append(Problem("[kafka]", message))
    url = k["sasl_oauth_token_url"]
    if isinstance(url, str) and url.startswith("http://"):
        # As for an agent's token endpoint (oauth2 below): a secret in clear off this machine.
        if not loopback(url):
            message = "http:// sends the client secret in clear; use https://"
            out.append(Problem("kafka.sasl_oauth_token_url", message, warning=True))
        if k["sasl_oauth_ca_file"]:
            message = "ignored: the token endpoint is plain http, not TLS"
            out.append(Problem("kafka.sasl_oauth_ca_file", message, warning=True))
    return out


def kafka(k: Mapping[str, Any]) -> list[Problem]:
    """SASL and TLS settings that fit the protocol (an unknown protocol is its own
    problem, not theirs); a heartbeat inside the session."""
    protocol = k["security_protocol"]
    out: list[Problem] = []
    if protocol in SASL_PROTOCOLS:
        out += _sasl_oauth(k) if k["sasl_mechanism"] == "OAUTHBEARER" else _sasl_password(k, protocol)
    elif protocol in PLAIN_PROTOCOLS:
        for key in ("sasl_mechanism", *SASL_PASSWORD_KEYS, *SASL_OAUTH_KEYS):
            if k[key]:
                out.append(Problem(f"kafka.{key}", f"is set, but security_protocol {protocol!r} does not use SASL"))
    out += secret_source("kafka", k, "sasl_password")
    out += secret_source("kafka", k, "sasl_oauth_client_secret")
    if protocol in ("PLAINTEXT", "SASL_PLAINTEXT"):
        for key in ("ssl_cafile", "ssl_certfile", "ssl_keyfile"):
            if k[key]:
                message = f"ignored: security_protocol {protocol!r} does not use TLS"
                out.append(Problem(f"kafka.{key}", message, warning=True))
    if bool(k["ssl_certfile"]) != bool(k["ssl_keyfile"]):
        out.append(Problem("[kafka]", "ssl_certfile and ssl_keyfile go together (a client certificate and its key)"))
    session, heartbeat = k["session_timeout_ms"], k["heartbeat_interval_ms"]
    if 0 < session <= heartbeat:
        message = f"{heartbeat} must be below session_timeout_ms {session} (a third of it)"
        out.append(Problem("kafka.heartbeat_interval_ms", message))
    return out


def agent(where: str, a: Mapping[str, Any], has_url: bool) -> list[Problem]:
    """An agent has an http(s) URL, the gateway dialect its agent_code, polls that widen."""
    out: list[Problem] = []
    if not has_url:
        out.append(Problem(f"[{where}]", "url is required"))
    elif isinstance(a["url"], str) and not URL.match(a["url"]):
        out.append(Problem(f"{where}.url", f"{a['url']!r} is not an http:// or https:// URL"))
    dialect = a["dialect"]
    if dialect == "gateway" and not a["agent_code"]:
        out.append(Problem(f"[{where}]", "the gateway dialect needs agent_code (the Agent selector)"))
    # A misspelt dialect is its own problem (with "did you mean"), not a second one here.
    if dialect in A2A_DIALECTS and a["agent_code"]:
        message = f"only the gateway dialect sends it; {dialect} ignores it"
        out.append(Problem(f"{where}.agent_code", message, warning=True))
    binding = a.get("binding", "auto")
    if dialect == "gateway" and binding not in ("auto", "jsonrpc"):
        out.append(Problem(f"{where}.binding", f"the gateway dialect speaks JSON-RPC only, not {binding}"))
    if a.get("interface_url") and binding == "auto":
        message = 'binding = "auto" takes the interface\'s URL from the agent card; name the binding it is for'
        out.append(Problem(f"{where}.interface_url", message))
    out += _grpc(where, a, binding)
    out += credentials(where, a)
    first, top = a["poll_initial_seconds"], a["poll_max_seconds"]
    if first > top > 0:
        out.append(Problem(f"{where}.poll_max_seconds", f"{top} is below poll_initial_seconds {first}"))
    return out


def _grpc(where: str, a: Mapping[str, Any], binding: str) -> list[Problem]:
    """An interface URL that fits its binding; what gRPC cannot carry."""
    out: list[Problem] = []
    url = a.get("interface_url")
    if binding == "grpc":
        problem = grpc_url_problem(str(url or a.get("url") or ""))
        if problem is not None and (url or isinstance(a.get("url"), str)):
            out.append(Problem(f"{where}.{'interface_url' if url else 'url'}", problem))
        if a.get("api_key_query"):
            message = "gRPC has no query to carry the API key: name its header (api_key_header)"
            out.append(Problem(f"{where}.api_key_query", message))
    elif url and binding != "auto" and not URL.match(str(url)):
        out.append(Problem(f"{where}.interface_url", f"{url!r} is not an http:// or https:// URL ({binding})"))
    return out


# RFC 9110 5.6.2: a field name is a token.
HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
# Headers the bridge writes itself, or that frame the request: an API key there
# would replace the bearer token, the body's type or length, or the route.
RESERVED_HEADERS = ("authorization", "proxy-authorization", "host", "connection", "transfer-encoding", "te")
LOOPBACK_HOSTS = ("localhost", "::1", "[::1]")
OAUTH2_KEYS = ("oauth2_token_url", "oauth2_client_id", "oauth2_client_secret_file", "oauth2_client_secret_env")
OAUTH2_EXTRAS = ("oauth2_scopes", "oauth2_audience", "oauth2_ca_file")


def header_name(value: str) -> str | None:
    """What is wrong with ``value`` as the header an API key goes in (None: nothing)."""
    if not HEADER_NAME.match(value):
        return f"{value!r} is not a header name (RFC 9110: letters, digits and !#$%&'*+-.^_`|~)"
    low = value.lower()
    if low in RESERVED_HEADERS or low.startswith("content-"):
        return f"{value!r} is a header the bridge sets itself; name the agent's API key header"
    return None


def host_of(url: str) -> str:
    """The host of an http(s) URL, lower-cased, without user info and port."""
    rest = url.partition("://")[2]
    authority = re.split(r"[/?#]", rest, maxsplit=1)[0].rpartition("@")[2].lower()
    if authority.startswith("["):
        return authority[: authority.find("]") + 1]
    return authority.partition(":")[0]


def loopback(url: str) -> bool:
    host = host_of(url)
    return host in LOOPBACK_HOSTS or re.fullmatch(r"127(\.\d{1,3}){3}", host) is not None


def _secret_set(a: Mapping[str, Any], key: str) -> bool:
    return bool(a.get(f"{key}_file") or a.get(f"{key}_env"))


def oauth2(where: str, a: Mapping[str, Any]) -> list[Problem]:
    """OAuth2 client credentials need the token endpoint, the client id and its secret."""
    if not any(a.get(k) for k in (*OAUTH2_KEYS, *OAUTH2_EXTRAS)):
        return []
    missing = [k for k in ("oauth2_token_url", "oauth2_client_id") if not a.get(k)]
    if not _secret_set(a, "oauth2_client_secret"):
        missing.append("oauth2_client_secret_file or oauth2_client_secret_env")
    out = [Problem(f"[{where}]", f"OAuth2 client credentials need {', '.join(missing)}")] if missing else []
    url = a.get("oauth2_token_url")
    if isinstance(url, str) and url and not URL.match(url):
        out.append(Problem(f"{where}.oauth2_token_url", f"{url!r} is not an http:// or https:// URL"))
    elif isinstance(url, str) and url.startswith("http://") and not loopback(url):
        message = "http:// sends the client secret in clear; use https://"
        out.append(Problem(f"{where}.oauth2_token_url", message, warning=True))
    return out + secret_source(where, a, "oauth2_client_secret")


def api_key(where: str, a: Mapping[str, Any]) -> list[Problem]:
    """An API key goes in one named header or one query parameter."""
    has_key = _secret_set(a, "api_key")
    header, query = a.get("api_key_header"), a.get("api_key_query")
    out = secret_source(where, a, "api_key")
    if has_key and bool(header) == bool(query):
        out.append(Problem(f"[{where}]", "an API key needs exactly one of api_key_header and api_key_query"))
    if (header or query) and not has_key:
        out.append(Problem(f"[{where}]", "api_key_header / api_key_query need api_key_file or api_key_env"))
    if isinstance(header, str) and (problem := header_name(header)):
        out.append(Problem(f"{where}.api_key_header", problem))
    if isinstance(query, str) and not re.fullmatch(r"[A-Za-z0-9._~-]+", query):
        message = f"{query!r} is not a plain query parameter name (letters, digits and ._~-)"
        out.append(Problem(f"{where}.api_key_query", message))
    return out


def credentials(where: str, a: Mapping[str, Any]) -> list[Problem]:
    """How the bridge authenticates to an agent: at most one scheme sets Authorization
    (a bearer token or OAuth2), an API key and mutual TLS may come on top; none of
    them should travel in clear."""
    out = secret_source(where, a, "token") + oauth2(where, a) + api_key(where, a)
    bearer, client = _secret_set(a, "token"), bool(a.get("oauth2_token_url") or a.get("oauth2_client_id"))
    if bearer and client:
        message = "token_* and oauth2_* both set the Authorization header; configure one"
        out.append(Problem(f"[{where}]", message))
    if bool(a.get("tls_cert_file")) != bool(a.get("tls_key_file")):
        message = "tls_cert_file and tls_key_file go together (a client certificate and its key)"
        out.append(Problem(f"[{where}]", message))
    url = a.get("url")
    if isinstance(url, str) and url.startswith("http://"):
        if (bearer or client or _secret_set(a, "api_key")) and not loopback(url):
            message = "http:// sends the agent's credentials in clear; use https://"
            out.append(Problem(f"{where}.url", message, warning=True))
        for key in ("tls_cert_file", "tls_ca_file"):
            if a.get(key):
                out.append(Problem(f"{where}.{key}", "ignored: the url is http://, not TLS", warning=True))
    return out


def agent_name(name: str, pattern: str) -> list[Problem]:
    if re.match(pattern, name):
        return []
    message = f"a command's agent must match {pattern}, so no command could ever name this agent"
    return [Problem(f"[agents.{name}]", message)]


def topics(k: Mapping[str, Any], agents: Mapping[str, Mapping[str, Any]]) -> list[Problem]:
    """A topic serves one purpose: commands, events, checkpoints, dead letters, the Task
    table or notifications (a row on the checkpoints topic, under a Task's own key, would
    be read back as its checkpoint)."""
    uses: dict[str, list[tuple[str, str]]] = {}
    for role in ("commands", "events", "checkpoints", "dlq", "tasks", "notifications"):
        if f"{role}_topic" in k:
            uses.setdefault(k[f"{role}_topic"], []).append((role, f"kafka.{role}_topic"))
    for name, a in agents.items():
        for role in ("events", "dlq", "tasks"):
            if a.get(f"{role}_topic"):
                uses.setdefault(a[f"{role}_topic"], []).append((role, f"agents.{name}.{role}_topic"))
    return [
        Problem(f"topic {name!r}", "used for more than one purpose: " + ", ".join(w for _, w in used))
        for name, used in uses.items()
        if len({r for r, _ in used}) > 1
    ]


def routing(k: Mapping[str, Any], agents: Mapping[str, Mapping[str, Any]]) -> list[Problem]:
    """A DLQ keeps its agents' routing (DESIGN: "the DLQ keeps the same routing"; "the
    bridge never copies an artifact into a topic its agent is not routed to"): its
    dead letters carry their users' messages, so one DLQ serves one events topic, the
    shared DLQ the shared events topic. An agent routed to its own events topic must
    therefore name a DLQ of its own, and it cannot push: its notifications, artifacts
    included, would pass through the one notifications topic. All refused rather than
    warned of: a warning lets the data out. An agent whose events_topic is the shared
    one is not routed anywhere."""

    def events(a: Mapping[str, Any]) -> str:
        return str(a.get("events_topic") or k["events_topic"])

    def dlq(a: Mapping[str, Any]) -> str:
        return str(a.get("dlq_topic") or k["dlq_topic"])

    served: dict[str, set[str]] = {k["dlq_topic"]: {k["events_topic"]}}
    tables: dict[str, set[str]] = {str(k.get("tasks_topic", "a2a.tasks")): {k["events_topic"]}}
    for a in agents.values():
        served.setdefault(dlq(a), set()).add(events(a))
        if a.get("tasks_topic"):
            tables.setdefault(a["tasks_topic"], set()).add(events(a))
    out: list[Problem] = []
    for name, a in agents.items():
        routed = events(a) != k["events_topic"]
        if routed and dlq(a) == k["dlq_topic"]:
            message = (
                "required beside events_topic, and not the shared kafka.dlq_topic: this agent's dead-lettered "
                "commands carry its users' messages and keep its routing"
            )
            out.append(Problem(f"agents.{name}.dlq_topic", message))
        elif dlq(a) != k["dlq_topic"] and len(served[dlq(a)]) > 1:
            # The shared DLQ's conflicts are the routed agents' above, not its own users'.
            others = ", ".join(repr(t) for t in sorted(served[dlq(a)] - {events(a)}))
            message = (
                f"{dlq(a)!r} is also the DLQ of events topic {others}: a DLQ keeps one routing "
                "(its dead letters carry its agents' users' messages)"
            )
            out.append(Problem(f"agents.{name}.dlq_topic", message))
        table = a.get("tasks_topic")
        if table and len(tables[table]) > 1:
            others = ", ".join(repr(t) for t in sorted(tables[table] - {events(a)}))
            message = (
                f"{table!r} is also the Task table of events topic {others}: a table keeps one routing "
                "(its rows hold its agents' questions)"
            )
            out.append(Problem(f"agents.{name}.tasks_topic", message))
        if routed and a.get("push"):
            message = (
                "not with events_topic: its notifications, artifacts included, would pass through the shared "
                "kafka.notifications_topic; follow this agent by stream or poll (push = false)"
            )
            out.append(Problem(f"agents.{name}.push", message))
    return out


def push(p: Mapping[str, Any], agents: Mapping[str, Mapping[str, Any]], b: Mapping[str, Any]) -> list[Problem]:
    """Agents followed by push need the webhook's base URL and token secret; the gateway
    protocol has no push notifications; the webhook's TLS is a certificate and its key;
    a JWKS only matters to an agent that pushes."""
    out = secret_source("push", p, "token_secret")
    pushing = sorted(name for name, a in agents.items() if a.get("push"))
    for name in pushing:
        if agents[name].get("dialect") == "gateway":
            message = "the gateway protocol has no push notifications (docs/gateway-protocol.md); use stream or poll"
            out.append(Problem(f"agents.{name}.push", message))
    out += _push_jwks(agents)
    if pushing:
        users = ", ".join(pushing)
        if not p["base_url"]:
            out.append(Problem("push.base_url", f"required: agents {users} push to it"))
        if not _secret_set(p, "token_secret"):
            out.append(Problem("[push]", f"agents {users} push: the tokens need token_secret_file or token_secret_env"))
    base = p["base_url"]
    if isinstance(base, str) and URL.match(base):
        if re.search(r"[?#]", base):
            out.append(Problem("push.base_url", "must not have a query or fragment: each Task's path goes after it"))
        elif base.startswith("http://") and not loopback(base):
            message = "http:// sends each Task's token in clear; use https:// (tls_cert_file, or TLS in front)"
            out.append(Problem("push.base_url", message, warning=True))
    if bool(p["tls_cert_file"]) != bool(p["tls_key_file"]):
        message = "tls_cert_file and tls_key_file go together (the webhook's certificate and its key)"
        out.append(Problem("[push]", message))
    per_peer, most = p["max_connections_per_peer"], p["max_connections"]
    if per_peer > most > 0:
        message = f"{per_peer} is above max_connections {most}, so it bounds nothing (0 says so)"
        out.append(Problem("push.max_connections_per_peer", message, warning=True))
    if p["listen_port"] and p["listen_port"] == b["http_port"]:
        message = f"{p['listen_port']} is bridge.http_port too; the webhook has a port of its own"
        out.append(Problem("push.listen_port", message))
    return out


def _push_jwks(agents: Mapping[str, Mapping[str, Any]]) -> list[Problem]:
    """A JWKS of an agent that does not push does nothing; a pushing agent's JWKS in
    clear off this machine lets whoever is on the way serve keys of their own and sign
    notifications (as a token endpoint's or base_url in clear would)."""
    out: list[Problem] = []
    for name, a in agents.items():
        url = a.get("push_jwks_url")
        if url and not a.get("push"):
            out.append(Problem(f"agents.{name}.push_jwks_url", "ignored: the agent does not push", warning=True))
        elif isinstance(url, str) and url.startswith("http://") and not loopback(url):
            message = "http:// lets anyone on the way replace the agent's signing keys; use https://"
            out.append(Problem(f"agents.{name}.push_jwks_url", message, warning=True))
    return out
