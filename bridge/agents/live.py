"""What an agent card requires, and whether the configured credentials get through,
asked of the agents themselves: the warning ``bridge run`` logs at start, and
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


async def card_problem(agent: AgentClient) -> Problem | None:
    """A warning when the agent's card requires credentials its configuration does not
    present (bridge/agents/security.py); None too when there is no card to read."""
    try:
        card = await agent.card()
    except (AgentFault, CredentialsUnavailable):
        return None
    unmet = security.unmet(card, agent.credentials.held(agent.config))
    return Problem(f"agents.{agent.name}", unmet, warning=True) if unmet else None


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
    unmet = security.unmet(card, agent.credentials.held(agent.config))
    return Problem(where, unmet) if unmet else None


async def check_live(config: Config) -> list[Problem]:
    """:func:`live_problem` of every configured agent, at once."""
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=8)
    async with contextlib.AsyncExitStack() as stack:
        agents = await clients(config, stack, limits, 1)
        found = await asyncio.gather(*(live_problem(a) for a in agents.values()))
    return [p for p in found if p is not None]
