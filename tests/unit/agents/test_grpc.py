"""The gRPC binding without a server: ProtoJSON into the request messages and answers
back into ProtoJSON for the v1.0 dialect, and gRPC statuses as the bridge's errors
(bridge.agents.grpc.convert, bridge.agents.grpc.errors)."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import grpc
import pytest

from bridge.agents.credentials import credentials
from bridge.agents.errors import tls_failure
from bridge.agents.grpc import a2a_pb2, status_pb2
from bridge.agents.grpc.channels import Channels
from bridge.agents.grpc.client import GrpcCaller
from bridge.agents.grpc.convert import METHODS, a2a_error, request, result
from bridge.agents.grpc.errors import GrpcErrors, failure
from bridge.config.model import AgentConfig
from bridge.core.task.lifecycle import ArtifactUpdate, StatusUpdate, TaskSnapshot
from bridge.errors import (
    AgentAuthError,
    AgentGrpcError,
    AgentOversize,
    AgentProtocolError,
    AgentUnavailable,
    RpcError,
)
from bridge.wire.dialects import Push, V1Dialect
from bridge.wire.interfaces import GrpcTarget

DIALECT = V1Dialect("w")


def sent(text: str = "hi", **kwargs: Any) -> dict[str, Any]:
    plain = {
        "role": "user",
        "parts": [
            {"kind": "text", "text": text},
            {"kind": "data", "data": {"n": 2, "list": [True, None, "x"]}},
            {"kind": "file", "file": {"bytes": base64.b64encode(b"\x00\x01").decode(), "mimeType": "a/b", "name": "f"}},
            {"kind": "file", "file": {"uri": "https://x/y"}},
        ],
        "metadata": {"trace": "t"},
    }
    return DIALECT.message(plain, message_id="m1", context_id=kwargs.get("context"), task_id=kwargs.get("task"))


def test_every_operation_of_the_dialect_becomes_its_grpc_request() -> None:
    send = request("w", DIALECT.send("stream", "r", sent(context="c", task="t"), Push("https://hook", "tok")))
    assert isinstance(send, a2a_pb2.SendMessageRequest)
    m = send.message
    assert (m.message_id, m.context_id, m.task_id, m.role) == ("m1", "c", "t", a2a_pb2.ROLE_USER)
    assert [p.WhichOneof("content") for p in m.parts] == ["text", "data", "raw", "url"]
    assert m.parts[2].raw == b"\x00\x01" and (m.parts[2].media_type, m.parts[2].filename) == ("a/b", "f")
    assert m.parts[1].data.struct_value["n"] == 2
    assert m.metadata["trace"] == "t"
    config = send.configuration
    assert config.return_immediately and (
        config.task_push_notification_config.url,
        config.task_push_notification_config.token,
    ) == ("https://hook", "tok")
    assert request("w", DIALECT.get("r", "t1")) == a2a_pb2.GetTaskRequest(id="t1")
    assert request("w", DIALECT.cancel("r", "t1")) == a2a_pb2.CancelTaskRequest(id="t1")
    assert request("w", DIALECT.resubscribe("r", "t1", None)) == a2a_pb2.SubscribeToTaskRequest(id="t1")
    listed = request("w", DIALECT.list_tasks("r", "ctx", "p2"))
    assert listed == a2a_pb2.ListTasksRequest(context_id="ctx", page_size=100, history_length=20, page_token="p2")
    assert {op: name for op, (name, _) in METHODS.items()} == {op: DIALECT.methods[op] for op in METHODS}


def test_params_that_do_not_fit_the_message_are_a_protocol_error_naming_no_value() -> None:
    req = DIALECT.send("send", "r", {**sent(), "parts": [{"raw": ["not", "bytes"]}]})
    with pytest.raises(AgentProtocolError) as unfit:
        request("w", req)
    assert unfit.value.detail == "the request does not fit lf.a2a.v1.SendMessageRequest (a field of another shape)"
    assert not unfit.value.retryable


def test_answers_are_read_by_the_v1_dialect_as_the_other_bindings_answers_are() -> None:
    task = a2a_pb2.Task(id="t", context_id="c")
    task.status.state = a2a_pb2.TASK_STATE_INPUT_REQUIRED
    task.status.message.parts.add(text="which colour?")
    task.status.message.role = a2a_pb2.ROLE_AGENT
    task.artifacts.add(artifact_id="a", name="out").parts.add(url="https://x/f", media_type="text/plain")
    task.history.add(message_id="m", role=a2a_pb2.ROLE_USER).parts.add(text="hi")
    doc = result(a2a_pb2.StreamResponse(task=task))
    assert doc["task"]["status"]["state"] == "TASK_STATE_INPUT_REQUIRED" and "contextId" in doc["task"]
    snap = DIALECT.update(doc)
    assert isinstance(snap, TaskSnapshot) and (snap.task_id, snap.context_id, snap.state) == (
        "t",
        "c",
        "input-required",
    )
    assert snap.message is not None and snap.message["role"] == "agent"
    assert snap.artifacts[0]["parts"] == [{"kind": "file", "file": {"uri": "https://x/f", "mimeType": "text/plain"}}]
    assert snap.history[0]["parts"] == [{"kind": "text", "text": "hi"}]
    status = a2a_pb2.StreamResponse(status_update=a2a_pb2.TaskStatusUpdateEvent(task_id="t", context_id="c"))
    status.status_update.status.state = a2a_pb2.TASK_STATE_COMPLETED
    done = DIALECT.update(result(status))
    assert isinstance(done, StatusUpdate) and done.state == "completed" and done.message is None
    chunk = a2a_pb2.TaskArtifactUpdateEvent(task_id="t", append=True)
    chunk.artifact.artifact_id = "a"
    chunk.artifact.parts.add(data=None).data.string_value = "x"
    update = DIALECT.update(result(a2a_pb2.StreamResponse(artifact_update=chunk)))
    assert isinstance(update, ArtifactUpdate) and (update.append, update.last_chunk) == (True, False)
    assert update.parts == [{"kind": "data", "data": "x"}]
    assert DIALECT.task(result(task)).task_id == "t"  # GetTask / CancelTask answer the Task itself
    assert DIALECT.task(result(a2a_pb2.SendMessageResponse(task=task))).task_id == "t"
    page = a2a_pb2.ListTasksResponse(tasks=[task], next_page_token="")
    assert [t.task_id for t in DIALECT.tasks(result(page))[0]] == ["t"] and DIALECT.tasks(result(page))[1] is None


def details(reason: str, domain: str = "a2a-protocol.org", message: str = "Task not found") -> list[tuple[str, Any]]:
    status = status_pb2.Status(code=5, message=message)
    status.details.add().Pack(status_pb2.Status(message="a detail of another type first"))
    status.details.add().Pack(status_pb2.ErrorInfo(reason=reason, domain=domain))
    return [("other", "x"), ("grpc-status-details-bin", status.SerializeToString())]


def test_an_a2a_error_info_is_the_json_rpc_code_of_its_reason() -> None:
    assert a2a_error(details("TASK_NOT_FOUND")) == (-32001, "TASK_NOT_FOUND: Task not found")
    assert a2a_error(details("UNSUPPORTED_OPERATION", message="")) == (-32004, "UNSUPPORTED_OPERATION")
    assert a2a_error(details("TASK_NOT_FOUND", domain="example.com")) is None
    assert a2a_error(details("NO_SUCH_REASON")) is None
    assert a2a_error([("grpc-status-details-bin", b"\xff\xff not a status")]) is None
    assert a2a_error(None) is None and a2a_error([]) is None


def test_grpc_statuses_map_onto_the_bridges_errors() -> None:
    code = grpc.StatusCode
    named = failure("w", "GetTask", code.NOT_FOUND, "Task not found", details("TASK_NOT_FOUND"))
    assert isinstance(named, RpcError) and named.code == -32001 and not named.retryable
    # An A2A error wins over the status it came with, even a retried one.
    assert isinstance(failure("w", "m", code.UNAVAILABLE, "", details("TASK_NOT_CANCELABLE")), RpcError)
    for status, http in ((code.UNAUTHENTICATED, 401), (code.PERMISSION_DENIED, 403)):
        auth = failure("w", "m", status, "invalid bearer token", None)
        assert isinstance(auth, AgentAuthError) and auth.status == http and not auth.retryable
    big = failure("w", "m", code.RESOURCE_EXHAUSTED, "CLIENT: Received message larger than max (9 vs. 5)", None)
    assert isinstance(big, AgentOversize)
    for status in (code.UNAVAILABLE, code.DEADLINE_EXCEEDED, code.RESOURCE_EXHAUSTED, code.CANCELLED, code.ABORTED):
        down = failure("w", "m", status, "", None)
        assert isinstance(down, AgentUnavailable) and down.retryable and down.detail == f"gRPC {status.name}", status
    tls = failure("w", "m", code.UNAVAILABLE, "Ssl handshake failed: CERTIFICATE_VERIFY_FAILED", None)
    assert isinstance(tls, AgentUnavailable) and ": TLS: " in str(tls)
    missing = failure("w", "m", code.UNIMPLEMENTED, "Method not found!", None)
    assert isinstance(missing, RpcError) and missing.code == -32601
    for status in (code.INTERNAL, code.INVALID_ARGUMENT, code.UNKNOWN, code.FAILED_PRECONDITION, code.DATA_LOSS):
        other = failure("w", "m", status, "x" * 5000, None)
        assert isinstance(other, AgentGrpcError) and not other.retryable and other.code == status.name
        assert len(other.detail) < 300  # the agent's message cut short


def test_the_block_failure_is_held_and_raised_linked_to_nothing_of_grpcs() -> None:
    rpc = grpc.aio.AioRpcError(grpc.StatusCode.UNAUTHENTICATED, grpc.aio.Metadata(), grpc.aio.Metadata(), "no", None)
    errors = GrpcErrors("w", "GetTask")
    with errors:
        raise rpc
    assert errors.refused
    with pytest.raises(AgentAuthError) as caught:
        errors.check()
    assert caught.value.__context__ is None and caught.value.__cause__ is None
    silent = GrpcErrors("w", "SubscribeToTask", idle_seconds=2.5)
    with silent:
        raise TimeoutError
    with pytest.raises(AgentUnavailable, match=r"no event for 2\.5s"):
        silent.check()
    with pytest.raises(TimeoutError), GrpcErrors("w", "GetTask"):  # a unary call's deadline is gRPC's own
        raise TimeoutError
    with pytest.raises(ValueError), GrpcErrors("w", "GetTask"):
        raise ValueError("not grpc's")


async def test_each_call_carries_the_version_and_the_credentials_as_lower_case_metadata(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("G_TOKEN", "t0k")
    monkeypatch.setenv("G_KEY", "k3y")
    config = AgentConfig(
        "w", "https://a", binding="grpc", token_env="G_TOKEN", api_key_env="G_KEY", api_key_header="X-Api-Key"
    )
    channels = Channels(config)
    caller = GrpcCaller.at(config, "grpcs://a:443", channels, credentials(config))
    assert caller.target == GrpcTarget("a:443", tls=True)
    _, metadata = await caller._metadata(DIALECT.get("r", "t"), None)
    assert sorted(metadata) == [("a2a-version", "1.0"), ("authorization", "Bearer t0k"), ("x-api-key", "k3y")]
    await channels.close()


async def test_a_tls_file_that_cannot_be_read_is_a_tls_failure_naming_its_key(tmp_path: Path) -> None:
    config = AgentConfig("w", "https://a", binding="grpc", tls_ca_file=str(tmp_path / "gone.pem"))
    channels = Channels(config)
    with pytest.raises(AgentUnavailable) as caught:
        channels.stub(GrpcTarget("a:443", tls=True), 0, streaming=False)
    assert tls_failure(caught.value) and "agents.w.tls_ca_file" in caught.value.detail
    plain = channels.stub(GrpcTarget("a:80", tls=False), 0, streaming=True)
    assert channels.stub(GrpcTarget("a:80", tls=False), 0, streaming=True) is plain  # one channel, one stub
    await channels.close()
