"""The bridge's exceptions, one hierarchy.

Messages name the agent, the method and what went wrong; they never carry
tokens, headers or payloads. Foreign errors (httpx, grpc, aiokafka) are mapped onto
these once per boundary, where it meets them: an agent's HTTP in
:class:`bridge.agents.errors.AgentErrors`, its gRPC in
:class:`bridge.agents.grpc.errors.GrpcErrors`, Kafka in
:func:`bridge.kafka.errors.kafka_errors` (the push webhook's relay too), a
partition's transaction in :class:`bridge.kafka.transaction.TransactionFailed`::

    BridgeError
    ├── StartupError            the bridge refuses to run (exit 2)
    ├── KafkaUnreachable        no broker answers yet: retried
    ├── TransactionFailed       (bridge.kafka.transaction) nothing of it committed
    ├── Fenced                  (bridge.engine.ownership) another holder, as Kafka shows (exit 3)
    ├── CredentialsUnavailable  (bridge.identity) no token to send yet: retried after ``retry_after``
    └── AgentFault              an agent call gave no usable answer
        ├── AgentOversize       more than the bridge reads in one piece: not retried
        └── AgentError          retried when ``retryable``
            ├── AgentUnavailable    connection, timeout, silent stream
            ├── AgentHTTPError      HTTP 4xx/5xx
            │   └── AgentAuthError  401/403 (gRPC UNAUTHENTICATED/PERMISSION_DENIED too)
            ├── AgentGrpcError      a gRPC status that names no A2A error
            ├── AgentProtocolError  not JSON-RPC/SSE as the dialect expects
            │   └── AgentNoTask     a Message (or nothing) where a Task was due
            ├── AgentUnspoken       its card offers no interface the bridge speaks
            └── RpcError            an A2A error: JSON-RPC's error object, HTTP+JSON's Status
"""

from __future__ import annotations

from typing import Any


class BridgeError(Exception):
    """Base of every error the bridge raises on purpose."""


class StartupError(BridgeError):
    """The bridge refuses to run (e.g. topics not co-partitioned)."""


class KafkaUnreachable(BridgeError):
    """The brokers cannot be reached or do not answer yet: retried, never fatal."""


class CredentialsUnavailable(BridgeError):
    """No credential to send: the token endpoint is down, slow or refusing the client.

    ``refused``: the endpoint refused these credentials (a wrong or revoked client
    secret), which only a change of secret or client mends; otherwise it failed
    for a while. Either way the source tries again after ``retry_after`` seconds
    and the agent itself was never asked. The message names the configured
    source and what the endpoint said, never a secret or a token.
    """

    def __init__(self, source: str, detail: str, *, refused: bool, retry_after: float) -> None:
        super().__init__(f"no token for {source}: {detail}")
        self.source = source
        self.detail = detail
        self.refused = refused
        self.retry_after = retry_after


class AgentFault(BridgeError):
    """A call to an agent did not give a usable answer."""

    kind = "agent-error"

    def __init__(self, agent: str, method: str, detail: str) -> None:
        super().__init__(f"agent {agent!r} {method}: {detail}")
        self.agent = agent
        self.method = method
        self.detail = detail


class AgentOversize(AgentFault):
    """An agent sent more than the bridge reads in one piece (an SSE event, a
    JSON response, an agent card). Not an :class:`AgentError`: retrying would
    read the same thing again, so the Task is closed as ``unreadable``."""

    kind = "oversize"


class AgentError(AgentFault):
    """A failure worth retrying when :attr:`retryable`."""

    @property
    def retryable(self) -> bool:
        return False


class AgentUnavailable(AgentError):
    """Connection refused or reset, timeout, or a stream that went silent."""

    kind = "unavailable"

    @property
    def retryable(self) -> bool:
        return True


class AgentHTTPError(AgentError):
    kind = "http-error"

    def __init__(self, agent: str, method: str, status: int) -> None:
        super().__init__(agent, method, f"HTTP {status}")
        self.status = status

    @property
    def retryable(self) -> bool:
        return self.status >= 500 or self.status == 429


class AgentAuthError(AgentHTTPError):
    """401 or 403: the configured token is missing, wrong or not allowed."""

    kind = "unauthorized"


class AgentGrpcError(AgentError):
    """A gRPC status the bridge does not retry and that names no A2A error (an
    ``INTERNAL`` or ``INVALID_ARGUMENT`` without an ``ErrorInfo``, say):
    bridge/agents/grpc/errors.py maps the others."""

    kind = "grpc-error"

    def __init__(self, agent: str, method: str, code: str, message: str) -> None:
        super().__init__(agent, method, f"gRPC {code}: {message}" if message else f"gRPC {code}")
        self.code = code


class AgentProtocolError(AgentError):
    """The agent answered, but not in JSON-RPC / SSE as the dialect expects."""

    kind = "protocol-error"


class AgentNoTask(AgentProtocolError):
    """The agent answered with a Message (or nothing) where a Task was due;
    ``said`` is that Message, if any."""

    def __init__(self, agent: str, method: str, said: dict[str, Any] | None) -> None:
        what = "a Message" if said is not None else "nothing"
        super().__init__(agent, method, f"the agent answered {what}, not a Task")
        self.said = said


class AgentUnspoken(AgentError):
    """The agent's card offers no interface the bridge speaks (bridge/wire/interfaces.py):
    not retried until the card changes."""

    kind = "unspoken"


class RpcError(AgentError):
    """An A2A error the agent answered with: a JSON-RPC error object (code and message
    are the agent's own), or an HTTP+JSON ``google.rpc.Status`` naming an A2A reason,
    given the JSON-RPC code of that reason (bridge/wire/rest.py)."""

    kind = "rpc-error"
    TASK_NOT_FOUND = -32001
    TASK_NOT_CANCELABLE = -32002

    def __init__(self, agent: str, method: str, code: int, message: str, rpc_id: str | int | None) -> None:
        # The JSON-RPC id is named as such, so it is never read as a Task id.
        super().__init__(agent, method, f"JSON-RPC error {code}: {message[:200]} (JSON-RPC id {rpc_id!r})")
        self.code = code
        self.rpc_message = message
        self.rpc_id = rpc_id
