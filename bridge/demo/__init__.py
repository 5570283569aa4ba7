"""Demo and test agents: the seed's gateway server and a2a-sdk agents.

Both servers run the same scripted behaviours from :mod:`bridge.demo.scripts`,
so a test can drive one scenario through every dialect.
"""
