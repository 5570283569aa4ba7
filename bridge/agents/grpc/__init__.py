"""A2A v1.0's gRPC binding (``lf.a2a.v1.A2AService``): the bridge's own minimal proto,
its generated Python, and the client :class:`bridge.agents.client.AgentClient` speaks
through when an agent's binding is ``grpc``.

gRPC's core writes its own log lines to stderr, unstructured, beside the bridge's (an
agent's failed TLS handshake at INFO, say): kept to its errors unless
``GRPC_VERBOSITY`` says otherwise. Read when grpc is first imported, so set here,
before any module of this package imports it.
"""

import os

os.environ.setdefault("GRPC_VERBOSITY", "ERROR")
