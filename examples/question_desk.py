"""A downstream service on the consumer kit: it mirrors the bridge's Tasks into PostgreSQL
and answers the questions agents ask (``input-required``) by writing ``reply`` commands.

    python -m examples.question_desk --bootstrap HOST:PORT --events-topic EVENTS \\
        --commands-topic COMMANDS [--schema desk]      (DESK_POSTGRES: libpq connection string)

Exactly once, end to end, though it may crash anywhere:

1. The mirror: each Task's row, artifacts and the consumer's offsets are written in one
   transaction (:class:`bridge.kit.EventConsumer`, :class:`bridge.kit.postgres.PostgresStore`).
2. A reply is written to the commands topic, and awaited, *before* the batch that holds
   the question commits. A crash in between reads the question again and writes the reply
   again, with the same ``commandId`` (``desk-{eventId}`` of the question): the bridge
   takes a repeated ``commandId`` as a duplicate (docs/consuming.md), so the agent gets
   one answer.
3. The ``answers`` table (the question, the answer, the reply's commandId) is written in
   the batch's own transaction (``PostgresStore(also=...)``): one row per question.

Questions it has no answer for are left for a person: the row's ``question`` shows them.

``DESK_CRASH_BEFORE_COMMIT=1`` makes it exit at once (as a SIGKILL would stop it) right
after it wrote a reply, before the batch commits: the moment step 2 is about; the tests
use it to show the reply taken once.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
from typing import Any

import orjson
from aiokafka import AIOKafkaProducer
from psycopg import AsyncCursor, sql

from bridge.kit import Batch, Event, EventConsumer
from bridge.kit.postgres import PostgresStore

# What the desk answers, by a word of the question (the demo agent `asker` asks
# "Which format do you want? Options: json, csv").
ANSWERS = {"format": "csv"}
# The exit status of DESK_CRASH_BEFORE_COMMIT (see the module).
CRASHED = 70


def answer_to(question: str) -> str | None:
    """The desk's answer to ``question``, None when it has none."""
    lowered = question.lower()
    return next((a for word, a in ANSWERS.items() if word in lowered), None)


def text_of(message: Any) -> str:
    parts = message.get("parts") if isinstance(message, dict) else None
    return " ".join(p["text"] for p in parts or [] if isinstance(p, dict) and isinstance(p.get("text"), str))


def reply_for(event: Event, answer: str) -> dict[str, Any]:
    """The reply command to the question ``event`` (schemas/command.schema.json)."""
    return {
        "type": "reply",
        "commandId": f"desk-{event['eventId']}",
        "taskKey": event["taskKey"],
        "message": {"role": "user", "parts": [{"kind": "text", "text": answer}]},
    }


class Desk:
    """The kit's ``on_batch`` (step 2 of the module) and the store's ``also`` (step 3)."""

    def __init__(self, producer: AIOKafkaProducer, commands_topic: str, schema: str) -> None:
        self.producer = producer
        self.commands_topic = commands_topic
        self.schema = schema
        self.replied: list[tuple[Event, str, dict[str, Any]]] = []

    async def on_batch(self, batch: Batch) -> None:
        self.replied = []  # a batch that did not commit is read again, and answered again
        for event in batch.applied:
            if event.get("kind") != "status" or event.get("state") != "input-required":
                continue
            question = text_of(event.get("message"))
            answer = answer_to(question)
            if answer is None:
                continue
            reply = reply_for(event, answer)
            await self.producer.send_and_wait(self.commands_topic, orjson.dumps(reply), key=event["taskKey"].encode())
            self.replied.append((event, question, reply))
        if self.replied and os.environ.get("DESK_CRASH_BEFORE_COMMIT") == "1":
            os._exit(CRASHED)  # no cleanup, no commit: what a crash leaves

    async def also(self, cur: AsyncCursor[Any], batch: Batch) -> None:
        if not self.replied:
            return
        await cur.executemany(
            sql.SQL(
                "INSERT INTO {}.answers (event_id, task_id, task_key, question, answer, command_id)"
                " VALUES (%s, %s, %s, %s, %s, %s)"
            ).format(sql.Identifier(self.schema)),
            [
                [e["eventId"], e["taskId"], e["taskKey"], q, text_of(r["message"]), r["commandId"]]
                for e, q, r in self.replied
            ],
        )


async def create_answers_table(store: PostgresStore) -> None:
    async with store.conn.transaction():
        await store.conn.execute(
            sql.SQL(
                "CREATE TABLE IF NOT EXISTS {}.answers (event_id text PRIMARY KEY, task_id text NOT NULL,"
                " task_key text NOT NULL, question text NOT NULL, answer text NOT NULL, command_id text NOT NULL)"
            ).format(sql.Identifier(store.schema))
        )


async def serve(args: argparse.Namespace, conninfo: str) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    producer = AIOKafkaProducer(bootstrap_servers=args.bootstrap, enable_idempotence=True, acks="all")
    await producer.start()
    try:
        desk = Desk(producer, args.commands_topic, args.schema)
        async with PostgresStore(conninfo, schema=args.schema, also=desk.also) as store:
            await create_answers_table(store)
            consumer = EventConsumer(
                store, [args.events_topic], bootstrap_servers=args.bootstrap, on_batch=desk.on_batch
            )
            async with consumer:
                print(f"desk: following {args.events_topic}", file=sys.stderr, flush=True)
                await consumer.run(stop)
    finally:
        await producer.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m examples.question_desk", description=__doc__.split("\n\n")[0])
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--events-topic", required=True)
    parser.add_argument("--commands-topic", required=True)
    parser.add_argument("--schema", default="desk")
    args = parser.parse_args(argv)
    conninfo = os.environ.get("DESK_POSTGRES")
    if not conninfo:
        parser.error("DESK_POSTGRES (a libpq connection string) is required")
    asyncio.run(serve(args, conninfo))
    return 0


if __name__ == "__main__":
    sys.exit(main())
