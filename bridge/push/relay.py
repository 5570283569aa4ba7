"""The webhook's producer: a notification goes to the notifications topic, at the
partition its route names, and :meth:`Relay.produce` returns only once Kafka has
acknowledged it (``acks=all``, idempotent producer), so the webhook's 200 means the
notification is durably in Kafka.

A send that fails or outlasts ``push.produce_timeout_seconds`` raises
:class:`~bridge.errors.KafkaUnreachable` (the webhook answers 503 and the agent
retries). The producer may still deliver a send it gave up waiting for; the agent's
retry is then a second record of the same notification, which the owner's dedupe
absorbs like any redelivery.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any

from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError, MessageSizeTooLargeError

from bridge.config.model import Config
from bridge.core.task.push import Route, record_bytes
from bridge.errors import KafkaUnreachable
from bridge.kafka.auth import client_options
from bridge.kafka.errors import kafka_errors
from bridge.wire import notifications

log = logging.getLogger(__name__)

# How long a known partition count is trusted before it is asked again (topics grow).
PARTITIONS_MAX_AGE_SECONDS = 60.0


class TooLarge(Exception):
    """Kafka refused the record as too large for the topic (its max.message.bytes)."""


class Relay:
    def __init__(self, config: Config, *, producer: Any = None) -> None:
        self.config = config
        self.topic = config.kafka.notifications_topic
        self.timeout = config.push.produce_timeout_seconds
        self._producer: Any = producer
        # A producer handed in is its owner's to start and stop.
        self._own = producer is None
        self._lock = asyncio.Lock()
        self._partitions: tuple[int, float] | None = None  # (count, when it was read)

    def _new_producer(self) -> Any:
        request = max(self.config.kafka.max_request_size, record_bytes(self.config.push.max_body_bytes))
        return AIOKafkaProducer(
            acks="all", enable_idempotence=True, max_request_size=request, **client_options(self.config.kafka)
        )

    async def start(self) -> None:
        """Start the producer if Kafka answers now; if not, the first notification tries again."""
        try:
            await self._started()
        except KafkaUnreachable as exc:
            log.warning("push relay: %s; notifications are answered 503 until it answers", exc)

    async def _started(self) -> Any:
        async with self._lock:
            if self._producer is not None:
                return self._producer
            producer = self._new_producer()
            try:
                with self._kafka_errors("starting the producer"):
                    await asyncio.wait_for(producer.start(), self.timeout)
            except KafkaUnreachable:
                await _quietly_stop(producer)
                raise
            self._producer = producer
            return producer

    async def stop(self) -> None:
        producer, self._producer = self._producer, None
        if producer is not None and self._own:
            await _quietly_stop(producer)

    async def partition_count(self, *, fresh: bool = False) -> int:
        """The notifications topic's partitions (asked again after a while, or when
        ``fresh``); :class:`KafkaUnreachable` while Kafka does not say."""
        known = self._partitions
        if not fresh and known is not None and time.monotonic() - known[1] < PARTITIONS_MAX_AGE_SECONDS:
            return known[0]
        producer = await self._started()
        with self._kafka_errors(f"the notifications topic {self.topic!r}'s metadata"):
            found = await asyncio.wait_for(producer.partitions_for(self.topic), self.timeout)
        if not found:
            raise KafkaUnreachable(f"the notifications topic {self.topic!r} has no partitions (`bridge topics`)")
        self._partitions = (len(found), time.monotonic())
        return len(found)

    async def produce(self, route: Route, body: bytes, received_at: float) -> None:
        """Put one notification in the topic and wait for Kafka's acknowledgement;
        :class:`KafkaUnreachable` on failure or timeout, :class:`TooLarge` when the topic
        refuses the record's size."""
        key, value, headers = notifications.encode(route, body, received_at)
        deadline = time.monotonic() + self.timeout
        producer = await self._started()
        with self._kafka_errors("the notification's acknowledgement"):
            try:
                sent = await asyncio.wait_for(
                    producer.send(self.topic, value, key=key, partition=route.partition, headers=headers), self.timeout
                )
                # Not wait_for on the delivery itself: cancelling aiokafka's future would not
                # take the record back, only hide its outcome (read once it comes, below).
                sent.add_done_callback(_outcome_read)
                done, _ = await asyncio.wait({sent}, timeout=max(0.0, deadline - time.monotonic()))
                if not done:
                    raise TimeoutError(f"no acknowledgement within {self.timeout} s")
                sent.result()
            except MessageSizeTooLargeError:
                raise TooLarge(f"the record is larger than the topic {self.topic!r} takes") from None

    def _kafka_errors(self, doing: str) -> contextlib.AbstractContextManager[None]:
        """Kafka's errors as :class:`KafkaUnreachable` (the webhook answers 503, the agent
        retries), whatever they are (bridge/kafka/errors.py)."""
        return kafka_errors(self.config.kafka.bootstrap_servers, doing, permanent=KafkaUnreachable)


def _outcome_read(sent: asyncio.Future[Any]) -> None:
    """Reads a delivery's outcome, so one given up on is not reported as never retrieved."""
    if not sent.cancelled():
        sent.exception()


async def _quietly_stop(producer: Any) -> None:
    try:
        await producer.stop()
    except (KafkaError, OSError, TimeoutError) as exc:
        log.debug("push relay: stopping the producer: %r", exc)
