"""Wire formats, pure: what the bridge reads and writes, as bytes.

Commands, events, checkpoints, the agents' dialects, SSE and chunked bodies."""
