"""``python -m bridge.kit.mirror``: the events topics mirrored into PostgreSQL with the
consumer kit, exactly once: every Task's row and artifacts in the store's tables, the
offsets beside them (:class:`~bridge.kit.postgres.PostgresStore`).

    python -m bridge.kit.mirror --bootstrap HOST:PORT --topic EVENTS [--topic ...] \\
        --postgres 'host=... dbname=... user=...' [--schema bridge_kit] [--group GROUP]

The connection string may come from ``BRIDGE_KIT_POSTGRES`` instead (it holds a
password). SIGTERM or SIGINT stops it after the batch in hand; SIGKILL at any moment
loses nothing and applies nothing twice (what the kit's tests do to it).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys

from bridge.kit.consumer import EventConsumer
from bridge.kit.postgres import PostgresStore


async def mirror(args: argparse.Namespace, conninfo: str) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with PostgresStore(conninfo, schema=args.schema) as store:
        consumer = EventConsumer(
            store,
            args.topic,
            bootstrap_servers=args.bootstrap,
            group_id=args.group,
            consumer_options={
                "session_timeout_ms": args.session_timeout_ms,
                "heartbeat_interval_ms": max(100, args.session_timeout_ms // 6),
            },
        )
        async with consumer:
            print(f"mirror: following {', '.join(args.topic)} into schema {args.schema}", file=sys.stderr, flush=True)
            await consumer.run(stop)
        print(f"mirror: stopped; records {dict(consumer.results)}", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bridge.kit.mirror", description=__doc__.split("\n\n")[0])
    parser.add_argument("--bootstrap", required=True, help="Kafka bootstrap servers")
    parser.add_argument("--topic", action="append", required=True, help="an events topic (repeatable)")
    parser.add_argument("--postgres", default=os.environ.get("BRIDGE_KIT_POSTGRES"), help="libpq connection string")
    parser.add_argument("--schema", default="bridge_kit", help="the store's schema (made when missing)")
    parser.add_argument("--group", default=None, help="share the partitions with a consumer group")
    parser.add_argument(
        "--session-timeout-ms", type=int, default=10_000, help="with --group: how soon a dead member's partitions move"
    )
    args = parser.parse_args(argv)
    if not args.postgres:
        parser.error("--postgres or BRIDGE_KIT_POSTGRES is required")
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    logging.getLogger("bridge.kit").setLevel(logging.INFO)  # what it is given, at each rebalance
    asyncio.run(mirror(args, args.postgres))
    return 0


if __name__ == "__main__":
    sys.exit(main())
