"""The agents side (IO): JSON-RPC and SSE over the bridge's own HTTP/1.1 transport."""
