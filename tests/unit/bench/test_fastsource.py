"""The fast source's A2A 1.0 frames (bench/fastsource.py): the same Tasks over every binding."""

from __future__ import annotations

import dataclasses
from typing import Any

import orjson
import pytest

from bench.fastsource import Frames, Shape, Task, V1Frames, inner, render, v1_task
from bridge.agents.grpc import a2a_pb2, convert
from bridge.core.task.lifecycle import Update
from bridge.wire.dialects import GatewayDialect, V1Dialect, unwrap
from bridge.wire.sse import Parser

TID, CID = "task-abc123-1f", "bridge-start-bench-r1-c7"


def sse(body: bytes) -> list[Any]:
    parser = Parser(1 << 20)
    return [orjson.loads(f.data) for f in parser.feed(body) + parser.close() if f.data]


def plain(updates: list[Update | None]) -> list[Update]:
    """The updates without their source seqs: the gateway's SSE ids, which v1.0 has not."""
    return [dataclasses.replace(u, source_seq=None) for u in updates if u is not None]


def gateway(frames: Frames) -> list[Update]:
    d = GatewayDialect("writer", "writer")
    body = render(frames.joined, inner(TID), inner(CID), b'"r1"')
    return plain([d.update(unwrap(doc, agent="writer", method="stream")) for doc in sse(body)])


def v1_jsonrpc(frames: V1Frames) -> list[Update]:
    d = V1Dialect("writer")
    body = render(frames.jsonrpc, inner(TID), inner(CID), b'"r1"')
    docs = sse(body)
    assert {doc["id"] for doc in docs} == {"r1"}
    return plain([d.update(unwrap(doc, agent="writer", method="stream")) for doc in docs])


def v1_rest(frames: V1Frames) -> list[Update]:
    d = V1Dialect("writer")
    return plain([d.update(doc) for doc in sse(render(frames.rest, inner(TID), inner(CID), b""))])


def v1_grpc(frames: V1Frames, task_id: str = TID, context_id: str = CID) -> list[Update]:
    d = V1Dialect("writer")
    messages = frames.grpc(task_id, context_id)
    return plain([d.update(convert.result(a2a_pb2.StreamResponse.FromString(m))) for m in messages])


@pytest.mark.parametrize("text", ["chunks=3 size=25", "chunks=1 size=7 mode=pause", "chunks=0"])
def test_every_binding_carries_the_events_the_gateway_does(text: str) -> None:
    frames = Frames(Shape.parse(text))
    v1 = V1Frames(frames)
    expected = gateway(frames)
    assert len(expected) == len(frames.events)
    assert v1_jsonrpc(v1) == expected
    assert v1_rest(v1) == expected
    assert v1_grpc(v1) == expected


def test_grpc_frames_carry_ids_of_any_length() -> None:
    # A protobuf string carries its length: the frames are rendered once per pair of lengths.
    v1 = V1Frames(Frames(Shape.parse("chunks=2 size=30")))
    for task_id, context_id in [("t", "c-1"), (TID, CID), ("task-" + "x" * 300, "ctx-é-" + "y" * 200), (TID, CID)]:
        updates = v1_grpc(v1, task_id, context_id)
        assert {(u.task_id, u.context_id) for u in updates} == {(task_id, context_id)}


def test_the_first_frame_is_the_task_with_the_users_message_in_its_history() -> None:
    task = Task(TID, CID, Shape.parse("chunks=2"), "chunks=2")
    v03 = GatewayDialect("writer", "writer").update(task.task_object())
    v1 = V1Dialect("writer").update({"task": v1_task(task.task_object())})
    assert v1 == v03
    assert v1 is not None and v1.history[0]["role"] == "user"  # type: ignore[union-attr]
