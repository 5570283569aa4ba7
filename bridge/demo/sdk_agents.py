"""The scripted demo agents hosted by the official a2a-sdk server.

One Starlette app serves every agent of :mod:`bridge.demo.scripts` with the
SDK's own server pieces: an :class:`AgentExecutor` per agent that turns script
steps into A2A events, the SDK's default request handler over an in-memory task
store, the SDK's JSON-RPC routes with v0.3 compatibility switched on, and its
HTTP+JSON routes. So one URL per agent, ``/agents/<name>``, speaks both A2A v0.3
JSON-RPC (``message/stream``, ``tasks/get`` ...) and v1.0 (``SendStreamingMessage``,
``GetTask`` ... with the ``A2A-Version: 1.0`` header), and ``/agents/<name>/rest``
speaks v1.0 HTTP+JSON (``POST .../message:stream``, ``GET .../tasks/<id>`` ...). The
agent card is at ``/agents/<name>/.well-known/agent-card.json``; it lists the
interfaces of the agent's ``bindings``, in that order (the agent serves all of them).

``writer-poll`` runs the writer script behind a card that says
``streaming: false``, for the bridge's polling path. The ``-rest`` agents' cards
offer HTTP+JSON only; ``writer-any``'s offers HTTP+JSON first, then JSON-RPC.

With ``--grpc-port P`` the agents whose cards offer gRPC are served too, by the SDK's
own gRPC handler, each on a port of its own from ``P`` on (:mod:`bridge.demo.sdk_grpc`;
``--grpc-port 0``: each on a free port, as the tests run it): the ``-grpc`` agents'
cards offer GRPC only; ``writer-all``'s GRPC, HTTP+JSON, then JSON-RPC. Without it
(the default) those agents are not hosted.

Every card says ``pushNotifications: true``: a send may carry a push config
(``configuration.pushNotificationConfig`` in v0.3, ``taskPushNotificationConfig`` in
v1.0, or the ``...PushNotificationConfig`` methods) and the SDK's own
``BasePushNotificationSender`` then POSTs each Task update to it, retried and, with
``--push-jwt``, signed as :mod:`bridge.demo.push_sender` describes (the JWKS at
``/.well-known/jwks.json``).

Run: ``python -m bridge.demo.sdk_agents --host 127.0.0.1 --port 18090``, plus
the credential options of :mod:`bridge.demo.guard` (a bearer token file, a JWT
from an issuer, an API key, HTTPS with a required client certificate). The cards
then declare what the agents require (``securitySchemes`` with ``security`` for
v0.3 and ``securityRequirements`` for v1.0, both in one card as the SDK serves it),
and stay readable without credentials: an A2A card is public.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import sys
import uuid
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass

import uvicorn
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes, create_rest_routes
from a2a.server.tasks import BasePushNotificationSender, InMemoryPushNotificationConfigStore, InMemoryTaskStore
from a2a.types import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    APIKeySecurityScheme,
    Artifact,
    HTTPAuthSecurityScheme,
    Message,
    MutualTlsSecurityScheme,
    OpenIdConnectSecurityScheme,
    Part,
    Role,
    SecurityRequirement,
    SecurityScheme,
    StringList,
    Task,
    TaskArtifactUpdateEvent,
    TaskState,
    TaskStatus,
    TaskStatusUpdateEvent,
)
from a2a.utils.constants import AGENT_CARD_WELL_KNOWN_PATH
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import BaseRoute, Route

from bridge.demo import scripts
from bridge.demo.guard import Guard, GuardError, GuardMiddleware, GuardOptions, TlsOptions, add_arguments, options_from
from bridge.demo.push_sender import JWKS_PATH, SIGNING_ALGORITHMS, PushOptions, Signer, push_client
from bridge.demo.sdk_grpc import GrpcServers

log = logging.getLogger(__name__)

AGENTS_PREFIX = "/agents"


# The path under an agent's URL its HTTP+JSON interface is served at.
REST_PATH = "/rest"


@dataclass(frozen=True, slots=True)
class HostedAgent:
    """One agent the server hosts: its URL name, its script, its streaming capability and
    the bindings its card offers, in its order of preference (the card's names)."""

    name: str
    script: str
    streaming: bool
    bindings: tuple[str, ...] = ("JSONRPC",)


HOSTED: tuple[HostedAgent, ...] = (
    *(HostedAgent(name, name, True) for name in scripts.AGENTS),
    HostedAgent("writer-poll", "writer", False),
    *(HostedAgent(f"{name}-rest", name, True, ("HTTP+JSON",)) for name in scripts.AGENTS),
    HostedAgent("writer-poll-rest", "writer", False, ("HTTP+JSON",)),
    HostedAgent("writer-any", "writer", True, ("HTTP+JSON", "JSONRPC")),
    *(HostedAgent(f"{name}-grpc", name, True, ("GRPC",)) for name in scripts.AGENTS),
    HostedAgent("writer-poll-grpc", "writer", False, ("GRPC",)),
    HostedAgent("writer-all", "writer", True, ("GRPC", "HTTP+JSON", "JSONRPC")),
)
GRPC = "GRPC"

_DESCRIPTIONS = {
    "writer": "Writes `chunks` chunks (append/lastChunk) of one artifact, then completes.",
    "failer": "Works briefly, then fails with a status message.",
    "asker": "Asks a question (input-required); the follow-up answer completes the task.",
    "sleeper": "Ticks `ticks` times every `interval` seconds; the one to cancel.",
}


def task_state(name: str) -> TaskState:
    """The proto state for a script state name (``input-required`` -> TASK_STATE_INPUT_REQUIRED)."""
    state: TaskState = getattr(TaskState, "TASK_STATE_" + name.upper().replace("-", "_"))
    return state


def _agent_message(text: str, task_id: str, context_id: str) -> Message:
    return Message(
        message_id=str(uuid.uuid4()),
        role=Role.ROLE_AGENT,
        parts=[Part(text=text)],
        task_id=task_id,
        context_id=context_id,
    )


def _turn(task: Task | None) -> int:
    """How many user messages the task already has: the script's turn number."""
    if task is None:
        return 0
    return sum(1 for m in task.history if m.role == Role.ROLE_USER)


class ScriptedAgentExecutor(AgentExecutor):
    """Runs one script of :mod:`bridge.demo.scripts` as an A2A agent."""

    def __init__(self, script: str) -> None:
        if script not in scripts.AGENTS:
            raise KeyError(script)
        self.script = script
        # Tasks asked to cancel: their execute() stops enqueueing at once, so no
        # event lands after the CANCELED status that cancel() enqueues.
        self._canceled: set[str] = set()

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        task_id = context.task_id
        context_id = context.context_id
        if task_id is None or context_id is None:  # the handler always fills both in
            raise RuntimeError("request context without task or context id")
        current = context.current_task
        turn = _turn(current)
        if current is None:
            first = Task(
                id=task_id,
                context_id=context_id,
                status=TaskStatus(state=TaskState.TASK_STATE_SUBMITTED),
                history=[context.message] if context.message is not None else [],
            )
            await event_queue.enqueue_event(first)
        text = context.get_user_input(" ")
        try:
            for step in scripts.run(self.script, text, turn):
                if task_id in self._canceled:
                    return
                if isinstance(step, scripts.Pause):
                    await asyncio.sleep(step.seconds)
                elif isinstance(step, scripts.Status):
                    status = TaskStatus(state=task_state(step.state))
                    if step.text is not None:
                        status.message.CopyFrom(_agent_message(step.text, task_id, context_id))
                    status.timestamp.GetCurrentTime()
                    await event_queue.enqueue_event(
                        TaskStatusUpdateEvent(task_id=task_id, context_id=context_id, status=status)
                    )
                else:
                    artifact = Artifact(artifact_id=step.artifact_id, name=step.name, parts=[Part(text=step.text)])
                    await event_queue.enqueue_event(
                        TaskArtifactUpdateEvent(
                            task_id=task_id,
                            context_id=context_id,
                            artifact=artifact,
                            append=step.append,
                            last_chunk=step.last_chunk,
                        )
                    )
        finally:
            self._canceled.discard(task_id)

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        task_id = context.task_id
        if task_id is None:
            raise RuntimeError("cancel without task id")
        task = context.current_task
        context_id = context.context_id or (task.context_id if task is not None else "")
        self._canceled.add(task_id)
        status = TaskStatus(state=TaskState.TASK_STATE_CANCELED)
        status.message.CopyFrom(_agent_message("canceled on request", task_id, context_id))
        status.timestamp.GetCurrentTime()
        await event_queue.enqueue_event(TaskStatusUpdateEvent(task_id=task_id, context_id=context_id, status=status))


def agent_url(base_url: str, name: str) -> str:
    """The JSON-RPC URL of agent ``name`` on the server at ``base_url``."""
    return f"{base_url.rstrip('/')}{AGENTS_PREFIX}/{name}"


def interfaces(url: str, bindings: tuple[str, ...], grpc_url: str | None = None) -> list[AgentInterface]:
    """What a card lists for ``bindings`` of the agent at ``url``: JSON-RPC at 1.0 and 0.3
    (one URL speaks both), HTTP+JSON at 1.0, gRPC at 1.0 at ``grpc_url``."""
    out: list[AgentInterface] = []
    for binding in bindings:
        if binding == "JSONRPC":
            out.append(AgentInterface(url=url, protocol_binding="JSONRPC", protocol_version="1.0"))
            out.append(AgentInterface(url=url, protocol_binding="JSONRPC", protocol_version="0.3"))
        elif binding == "HTTP+JSON":
            out.append(AgentInterface(url=url + REST_PATH, protocol_binding="HTTP+JSON", protocol_version="1.0"))
        elif binding == GRPC and grpc_url:
            out.append(AgentInterface(url=grpc_url, protocol_binding=GRPC, protocol_version="1.0"))
        else:
            raise ValueError(f"no {binding} interface is served here")
    return out


def security_schemes(auth: GuardOptions, tls: TlsOptions) -> dict[str, SecurityScheme]:
    """What a card declares for the credentials the guard requires (all of them at once)."""
    schemes: dict[str, SecurityScheme] = {}
    if auth.jwt_issuer:
        discovery = auth.jwt_issuer.rstrip("/") + "/.well-known/openid-configuration"
        schemes["oidc"] = SecurityScheme(
            open_id_connect_security_scheme=OpenIdConnectSecurityScheme(open_id_connect_url=discovery)
        )
    elif auth.bearer:
        schemes["bearer"] = SecurityScheme(http_auth_security_scheme=HTTPAuthSecurityScheme(scheme="bearer"))
    if auth.api_key_file:
        location, name = ("header", auth.api_key_header) if auth.api_key_header else ("query", auth.api_key_query)
        schemes["apiKey"] = SecurityScheme(
            api_key_security_scheme=APIKeySecurityScheme(location=location, name=name or "")
        )
    if tls.client_ca_file:
        schemes["mtls"] = SecurityScheme(mtls_security_scheme=MutualTlsSecurityScheme())
    return schemes


def agent_card(
    base_url: str, agent: HostedAgent, schemes: dict[str, SecurityScheme] | None = None, grpc_url: str | None = None
) -> AgentCard:
    """The card of ``agent``: its interfaces (:func:`interfaces`), capabilities and skill."""
    url = agent_url(base_url, agent.name)
    description = _DESCRIPTIONS[agent.script]
    if not agent.streaming:
        description += " No streaming: poll with tasks/get."
    return AgentCard(
        name=agent.name,
        description=description,
        version="1.0.0",
        supported_interfaces=interfaces(url, agent.bindings, grpc_url),
        capabilities=AgentCapabilities(streaming=agent.streaming, push_notifications=True),
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
        skills=[
            AgentSkill(
                id=agent.name,
                name=agent.name,
                description=description,
                tags=["demo", "scripted"],
                examples=["chunks=5 interval=0.05"],
            )
        ],
        security_schemes=schemes or {},
        # One requirement naming every scheme: all of them at once (AND), as the guard checks.
        security_requirements=[SecurityRequirement(schemes={n: StringList() for n in schemes})] if schemes else [],
    )


def _public(path: str) -> bool:
    # The cards and the push signing keys: what anyone may read to check this server.
    return path.endswith(AGENT_CARD_WELL_KNOWN_PATH) or path == JWKS_PATH


def create_app(
    base_url: str,
    agents: tuple[HostedAgent, ...] = HOSTED,
    auth: GuardOptions | None = None,
    tls: TlsOptions | None = None,
    push: PushOptions | None = None,
    *,
    grpc_urls: Mapping[str, str] | None = None,
) -> Starlette:
    """The Starlette app hosting ``agents``; ``base_url`` is what the cards announce;
    ``auth`` what every request but the cards' must carry (TLS is the server's, see :func:`serve`);
    ``push`` how notifications are delivered (``app.state.push_signer`` signs them, or is None);
    ``grpc_urls`` where each agent offering GRPC serves it (:class:`GrpcServers`): one
    without is not hosted. ``app.state.handlers`` are the agents' request handlers, by name."""
    auth, tls, push = auth or GuardOptions(), tls or TlsOptions(), push or PushOptions()
    guard = Guard(auth)
    signer = Signer(push.signing) if push.signing else None
    pusher = push_client(push, signer)
    schemes = security_schemes(auth, tls)
    routes: list[BaseRoute] = []
    handlers: dict[str, DefaultRequestHandler] = {}
    grpc_urls = grpc_urls or {}
    for agent in agents:
        if GRPC in agent.bindings and agent.name not in grpc_urls:
            continue
        card = agent_card(base_url, agent, schemes, grpc_urls.get(agent.name))
        push_configs = InMemoryPushNotificationConfigStore()
        handler = DefaultRequestHandler(
            agent_executor=ScriptedAgentExecutor(agent.script),
            task_store=InMemoryTaskStore(),
            agent_card=card,
            push_config_store=push_configs,
            push_sender=BasePushNotificationSender(pusher, push_configs),
        )
        handlers[agent.name] = handler
        rpc_path = f"{AGENTS_PREFIX}/{agent.name}"
        routes.extend(create_jsonrpc_routes(handler, rpc_url=rpc_path, enable_v0_3_compat=True))
        # Without the SDK's multi-tenant mount (``/{tenant}/...``): it would catch every path.
        rest = create_rest_routes(handler, path_prefix=rpc_path + REST_PATH)
        routes.extend(r for r in rest if isinstance(r, Route) and r.path.startswith(rpc_path + REST_PATH))
        routes.extend(create_agent_card_routes(card, card_url=rpc_path + AGENT_CARD_WELL_KNOWN_PATH))
    if signer is not None:
        jwks = signer.jwks

        async def jwks_endpoint(_request: Request) -> JSONResponse:
            return JSONResponse(jwks)

        routes.append(Route(JWKS_PATH, jwks_endpoint, methods=["GET"]))

    @contextlib.asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        try:
            yield
        finally:
            for handler in handlers.values():
                await handler.aclose()
            await pusher.aclose()

    app = Starlette(
        routes=routes,
        lifespan=lifespan,
        middleware=[Middleware(GuardMiddleware, guard=guard, public=_public)],
    )
    app.state.guard = guard
    app.state.push_signer = signer
    app.state.handlers = handlers
    return app


async def serve(
    host: str,
    port: int,
    auth: GuardOptions | None = None,
    tls: TlsOptions | None = None,
    push: PushOptions | None = None,
    *,
    grpc_port: int | None = None,
) -> None:
    """Run the server until interrupted; print the ready line once it listens (and the
    gRPC servers, from ``grpc_port`` on, or each on a free port if it is 0)."""
    tls = tls or TlsOptions()
    base_url = f"{tls.scheme}://{host}:{port}"
    try:
        grpc_servers = GrpcServers(host, grpc_port or 0, tls)
        grpc_urls = grpc_servers.bind([a.name for a in HOSTED if GRPC in a.bindings]) if grpc_port is not None else {}
        app = create_app(base_url, auth=auth, tls=tls, push=push, grpc_urls=grpc_urls)
    except GuardError as exc:
        raise SystemExit(f"sdk agents: {exc}") from None
    await grpc_servers.start(app.state.handlers, app.state.guard)
    config = uvicorn.Config(app, host=host, port=port, log_level="warning", **tls.uvicorn_kwargs())
    server = uvicorn.Server(config)
    runner = asyncio.create_task(server.serve())
    while not server.started:
        if runner.done():
            await runner  # startup failed: raise its error
            raise SystemExit(1)
        await asyncio.sleep(0.02)
    print(f"sdk agents listening on {base_url}", flush=True)
    for name, url in grpc_urls.items():
        print(f"sdk agent {name} serving gRPC on {url}", flush=True)
    try:
        await runner
    finally:
        await grpc_servers.stop(0)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=18090)
    parser.add_argument(
        "--grpc-port",
        type=int,
        help="serve the agents offering gRPC, each on a port of its own from this one on (0: each on a free port)",
    )
    add_arguments(parser)
    g = parser.add_argument_group("push notifications")
    g.add_argument(
        "--push-attempts", type=int, default=8, help="POSTs at most per notification (retried on 5xx/429/408)"
    )
    g.add_argument(
        "--push-jwt", choices=SIGNING_ALGORITHMS, help="sign each notification with a JWT; JWKS at " + JWKS_PATH
    )
    args = parser.parse_args(argv)
    auth, tls = options_from(parser, args)
    push = PushOptions(attempts=args.push_attempts, signing=args.push_jwt)
    if push.problems():
        parser.error("; ".join(push.problems()))
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    asyncio.run(serve(args.host, args.port, auth, tls, push, grpc_port=args.grpc_port))


if __name__ == "__main__":
    main()
