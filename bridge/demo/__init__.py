"""Demo and test agents: a gateway server (docs/gateway-protocol.md) and a2a-sdk agents.

Both servers run the same scripted behaviours from :mod:`bridge.demo.scripts`,
so a test can drive one scenario through every dialect.
"""
