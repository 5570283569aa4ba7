"""The consumer kit: what a downstream service needs to follow the bridge's events
exactly once (docs/consuming.md, "The consumer kit").

- :class:`EventConsumer` reads the events topics ``read_committed``, folds each poll into
  the Tasks' rows and commits them with its offsets to a :class:`Store`, one transaction
  per poll; the offsets live in the store, not in Kafka.
- :class:`TaskBook` folds events with :func:`bridge.wire.task_row.fold`, the very fold of
  the bridge's Task table, so a row here is the table's row: state, the bridge's outcome,
  terminal, lastSeq, the pending question, the artifact index.
- :class:`Store` is the protocol a database implements; ``bridge.kit.postgres.PostgresStore``
  (the ``postgres`` extra) is one, ``python -m bridge.kit.mirror`` runs it.
- :func:`decode_event` is the decoding ``bridge tail`` and ``bridge inspect`` use too.

It needs the bridge's wire contract (``bridge.wire``) and nothing of the running bridge.
"""

from bridge.kit.book import ArtifactWrite, Batch, Partition, Position, Record, TaskBook, TaskChange
from bridge.kit.consumer import EventConsumer, OnBatch
from bridge.kit.store import OffsetConflict, Store
from bridge.wire.event_values import Event, decode_event
from bridge.wire.task_row import Folded, fold

__all__ = [
    "ArtifactWrite",
    "Batch",
    "Event",
    "EventConsumer",
    "Folded",
    "OffsetConflict",
    "OnBatch",
    "Partition",
    "Position",
    "Record",
    "Store",
    "TaskBook",
    "TaskChange",
    "decode_event",
    "fold",
]
