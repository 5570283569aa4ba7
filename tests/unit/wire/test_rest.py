"""The A2A v1.0 HTTP+JSON binding's routes and errors (bridge.wire.rest)."""

from __future__ import annotations

import pytest

from bridge.wire.dialects import Push, V1Dialect
from bridge.wire.rest import Route, route, status_error

D = V1Dialect("agent")


def test_each_operation_goes_to_its_path_with_the_json_rpc_params_as_its_body() -> None:
    message = D.message({"parts": [{"kind": "text", "text": "hi"}]}, message_id="m-1", context_id="c", task_id=None)
    send = D.send("send", "id-1", message, Push("https://bridge/push/x", "tok"))
    assert route(send) == Route("POST", "/message:send", send.body["params"])
    assert send.body["params"]["configuration"]["returnImmediately"] is True
    stream = D.send("stream", "id-2", message)
    assert route(stream) == Route("POST", "/message:stream", {"message": message})
    assert route(D.get("id-3", "t/1 ?")) == Route("GET", "/tasks/t%2F1%20%3F", None)  # an id is one path segment
    assert route(D.cancel("id-4", "t1")) == Route("POST", "/tasks/t1:cancel", {})
    assert route(D.resubscribe("id-5", "t1", 7)) == Route("POST", "/tasks/t1:subscribe", {})


def status(reason: str, domain: str = "a2a-protocol.org", message: object = "no such task") -> dict[str, object]:
    info = {"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": reason, "domain": domain}
    return {"error": {"code": 404, "status": "NOT_FOUND", "message": message, "details": [{"@type": "x"}, info]}}


@pytest.mark.parametrize(
    ("reason", "code"),
    [
        ("TASK_NOT_FOUND", -32001),
        ("TASK_NOT_CANCELABLE", -32002),
        ("UNSUPPORTED_OPERATION", -32004),
        ("INVALID_PARAMS", -32602),
    ],
)
def test_an_a2a_reason_is_the_json_rpc_code_of_the_same_error(reason: str, code: int) -> None:
    assert status_error(status(reason)) == (code, f"{reason}: no such task")


def test_what_names_no_a2a_error_is_left_to_the_http_status() -> None:
    assert status_error(status("TASK_NOT_FOUND", domain="example.com")) is None
    assert status_error(status("SOMETHING_NEW")) is None
    assert status_error({"error": "Not Found"}) is None
    assert status_error("<html>bad gateway</html>") is None
    assert status_error({"error": {"code": 500, "details": "x"}}) is None
    assert status_error(status("TASK_NOT_FOUND", message=None)) == (-32001, "TASK_NOT_FOUND")
