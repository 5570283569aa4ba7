"""What an agent card requires and offers, and whether the configured credentials get
through, asked of the agents themselves: the warnings ``bridge run`` logs at start, and
``bridge config check --live``."""

from __future__ import annotations

import asyncio
import contextlib

import httpx

from bridge.agents import security
from bridge.agents.client import AgentClient, clients
from bridge.agents.errors import tls_failure
from bridge.config.model import Config
from bridge.config.rules import Problem
from bridge.errors import AgentAuthError, AgentFault, AgentUnavailable, CredentialsUnavailable
from bridge.wire import interfaces


async def card_problem(agent: AgentClient) -> Problem | None:
    """A warning when the agent's card requires credentials its configuration does not
    present (bridge/agents/security.py), or offers no interface the bridge speaks
    (bridge/wire/interfaces.py); None too when there is no card to read."""
    try:
        card = await agent.card()
    except (AgentFault, CredentialsUnavailable):
        return None
    problem = _unspoken(agent, card) or security.unmet(card, agent.credentials.held(agent.config))
    return Problem(f"agents.{agent.name}", problem, warning=True) if problem else None


def _unspoken(agent: AgentClient, card: dict[str, object]) -> str | None:
    """Why no start to the agent will go out, when its card offers nothing the bridge speaks."""
    if agent.config.binding != "auto" or not interfaces.offered(card) or agent.interface(card) is not None:
        return None
    return f"{interfaces.unspoken(interfaces.offered(card))}: its Tasks will be refused"


async def spoken(agent: AgentClient) -> str:
    """Which interface the bridge speaks to the agent at, and what its card offers."""
    c = agent.config
    if c.dialect == "gateway":
        return f"agents.{agent.name}: the gateway at {c.url} (JSON-RPC)"
    if c.binding != "auto":
        return f"agents.{agent.name}: {c.binding} at {c.interface_url or c.url} (configured)"
    try:
        card = await agent.card()
    except (AgentFault, CredentialsUnavailable) as exc:
        return f"agents.{agent.name}: no agent card to read ({exc.detail}): JSON-RPC at {c.url}"
    found = interfaces.offered(card)
    if not found:
        return f"agents.{agent.name}: its agent card lists no interface: JSON-RPC at {c.url}"
    chosen = agent.interface(card)
    offers = "; ".join(str(i) for i in found[:8])
    speaks = f"speaks {chosen}" if chosen is not None else "speaks none of them"
    return f"agents.{agent.name}: its card offers {offers}; the bridge {speaks}"


async def live_problem(agent: AgentClient) -> Problem | None:
    """What keeps the agent from taking this bridge's requests, asked for real: a token
    endpoint that gives no token, an agent that cannot be reached (an untrusted
    certificate) or refuses the credentials, a card requirement not met. A card that
    cannot be read is a warning. One problem at most, never a secret."""
    where = f"agents.{agent.name}"
    problem = await _token_problem(agent, where)
    if problem is not None or agent.config.dialect == "gateway":
        return problem  # a gateway serves no agent card (docs/gateway-protocol.md): nothing more to ask
    return await _card_problem(agent, where)


async def _token_problem(agent: AgentClient, where: str) -> Problem | None:
    if agent.credentials.token is None:
        return None
    try:
        await agent.credentials.token.token()
    except CredentialsUnavailable as exc:
        return Problem(where, f"the token endpoint gave no token: {exc.detail}")
    return None


async def _card_problem(agent: AgentClient, where: str) -> Problem | None:
    try:
        card = await agent.card()
    except AgentUnavailable as exc:
        if tls_failure(exc):
            return Problem(where, f"cannot reach the agent: {exc.detail}")
        # Down now is no fault of the configuration: `bridge run` waits for it.
        return Problem(where, f"cannot reach the agent now ({exc.detail}); not checked further", warning=True)
    except AgentAuthError as exc:
        return Problem(where, f"the agent refused the credentials: {exc.detail}")
    except (AgentFault, CredentialsUnavailable) as exc:
        detail = exc.detail
        return Problem(where, f"no agent card to check its security requirements against ({detail})", warning=True)
    problem = _unspoken(agent, card) or security.unmet(card, agent.credentials.held(agent.config))
    return Problem(where, problem) if problem else None


async def check_live(config: Config) -> tuple[list[Problem], list[str]]:
    """:func:`live_problem` of every configured agent, at once, and (:func:`spoken`) the
    interface each is spoken to at."""
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=8)
    async with contextlib.AsyncExitStack() as stack:
        agents = await clients(config, stack, limits, 1)
        found = await asyncio.gather(*(live_problem(a) for a in agents.values()))
        lines = await asyncio.gather(*(spoken(a) for a in agents.values()))
    return [p for p in found if p is not None], list(lines)
