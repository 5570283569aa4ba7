"""Kafka's errors as the bridge's, mapped once here (as httpx maps httpcore's in one
place): every call to Kafka outside a partition's transactions runs inside
:func:`kafka_errors` (a transaction's own failure is
:class:`bridge.kafka.transaction.TransactionFailed`, whose reason
:mod:`bridge.core.partition.txn_failure` tells from the same error classes).

A retriable error (no broker, a timeout, a coordinator moving) is
:class:`~bridge.errors.KafkaUnreachable`: the caller waits and asks again. Any other
is the caller's ``permanent`` error: :class:`~bridge.errors.StartupError` at a start
(the bridge refuses to run), :class:`KafkaUnreachable` where the only answer is to
try later (the push webhook answers 503 either way).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from aiokafka.errors import KafkaConnectionError, KafkaError

from bridge.errors import BridgeError, KafkaUnreachable, StartupError


@contextlib.contextmanager
def kafka_errors(bootstrap: str, doing: str = "", *, permanent: type[BridgeError] = StartupError) -> Iterator[None]:
    """The block's Kafka errors as the bridge's (see the module's docstring); ``doing``
    says what was asked, in the message."""
    what = f" ({doing})" if doing else ""
    try:
        yield
    except (KafkaConnectionError, TimeoutError, OSError) as exc:
        raise KafkaUnreachable(f"Kafka at {bootstrap} is unreachable{what}: {exc!r}") from None
    except KafkaError as exc:
        if exc.retriable:
            raise KafkaUnreachable(f"Kafka at {bootstrap} is not ready{what}: {exc!r}") from None
        raise permanent(f"Kafka at {bootstrap} refused{what}: {exc!r}") from None
