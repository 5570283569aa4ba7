"""A2A v1.0's gRPC binding (``lf.a2a.v1.A2AService``): the bridge's own minimal proto,
its generated Python, and the client :class:`bridge.agents.client.AgentClient` speaks
through when an agent's binding is ``grpc``."""
