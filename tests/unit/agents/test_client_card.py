"""What the agent card tells a client (bridge.agents.client), asked by many Tasks at once."""

from __future__ import annotations

import asyncio

import httpx

from bridge.agents.client import AgentClient
from bridge.config.model import AgentConfig

CARD = {
    "name": "w",
    "capabilities": {"pushNotifications": True, "streaming": True},
    "supportedInterfaces": [{"url": "http://agent/a2a", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}],
}


def slow_card(asked: list[str]) -> httpx.MockTransport:
    async def answer(request: httpx.Request) -> httpx.Response:
        asked.append(request.url.path)
        await asyncio.sleep(0.05)  # the card on its way while other Tasks ask
        return httpx.Response(200, json=CARD)

    return httpx.MockTransport(answer)


async def test_tasks_that_ask_at_once_whether_to_follow_by_push_all_wait_for_the_card() -> None:
    asked: list[str] = []
    async with httpx.AsyncClient(transport=slow_card(asked)) as http:
        client = AgentClient(AgentConfig("w", "http://agent/a2a", "a2a-1.0", push=True), http)
        answers = await asyncio.gather(*(client.pushes() for _ in range(5)))
    assert answers == [True] * 5
    assert asked == ["/a2a/.well-known/agent-card.json"]  # one fetch for all


async def test_the_interface_a_card_chose_reads_no_card_again() -> None:
    asked: list[str] = []
    async with httpx.AsyncClient(transport=slow_card(asked)) as http:
        base = AgentClient(AgentConfig("w", "http://agent/a2a", "a2a-1.0", push=True), http)
        spoken = await base.resolve("k")
        assert spoken is not base and spoken.route == ("http://agent/a2a", "a2a-1.0", None, "jsonrpc")
        assert await spoken.pushes() and await spoken.streaming()
    assert asked == ["/a2a/.well-known/agent-card.json"]
