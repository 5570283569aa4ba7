"""W3C trace context: a command's ``traceparent`` continued to the agent and the events.

A start that carries a ``traceparent`` header (https://www.w3.org/TR/trace-context/)
puts its Task in that trace: every call to the agent for the Task is a client
span of it (its ``traceparent`` header sent with the request), and every event
of the Task carries it as the CloudEvents distributed-tracing extension
(``ce_traceparent``, https://github.com/cloudevents/spec/blob/main/cloudevents/extensions/distributed-tracing.md).

Through the OpenTelemetry API only: without an SDK (the default) spans are not
recorded and the header is passed on as it came; with one (for example run the
bridge under ``opentelemetry-instrument`` with ``OTEL_TRACES_EXPORTER=otlp``)
each agent call is exported as a span of the producer's trace.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator, Sequence

from opentelemetry import propagate, trace
from opentelemetry.trace import SpanKind

_TRACEPARENT = re.compile(r"^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$")
_tracer = trace.get_tracer("a2a-kafka-bridge")


def traceparent(headers: Sequence[tuple[str, bytes | None]] | None) -> str | None:
    """A well-formed ``traceparent`` among a record's headers, else None."""
    for name, value in headers or ():
        if name.lower() == "traceparent" and value:
            text = value.decode("ascii", "replace").strip().lower()
            if _TRACEPARENT.match(text) and not text.startswith("ff"):
                return text
    return None


@contextlib.contextmanager
def agent_call(parent: str | None, method: str) -> Iterator[dict[str, str]]:
    """A client span for one agent call in the Task's trace; yields the headers that
    carry it (none when the Task has no trace)."""
    if parent is None:
        yield {}
        return
    context = propagate.extract({"traceparent": parent})
    with _tracer.start_as_current_span(f"a2a {method}", context=context, kind=SpanKind.CLIENT):
        carrier: dict[str, str] = {}
        propagate.inject(carrier)
        yield carrier
