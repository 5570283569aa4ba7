"""bridge.wire.schemas.Schema.check: jsonschema's verdict, compiled.

The command schema is compiled into plain checks; on generated commands, valid
and broken in every field the schema speaks of (and at each bound), the fast
verdict must be jsonschema's.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

from bridge.config.schemas import schema as read_schema
from bridge.wire import schemas
from bridge.wire.schemas import Schema
from tests.support.strategies import json_values

ids = st.one_of(
    st.text(min_size=1, max_size=4),
    st.text(max_size=0),
    st.text(min_size=255, max_size=258),  # around the 256-character bound
    json_values,
)
agents = st.one_of(
    st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}", fullmatch=True),
    st.sampled_from(["", ".x", "-x", "a" * 64, "a" * 65, "wrïter", "a b", "writer\n", "writer\nx"]),
    json_values,
)
part_values = st.one_of(st.text(max_size=3), st.dictionaries(st.text(max_size=3), json_values, max_size=2), json_values)
parts = st.one_of(
    st.fixed_dictionaries(
        {"kind": st.sampled_from(["text", "data", "file", "image", 1])},
        optional={"text": part_values, "data": part_values, "file": part_values},
    ),
    json_values,
)
part_lists = st.one_of(
    st.lists(parts, max_size=3),
    st.integers(99, 101).map(lambda n: [{"kind": "text", "text": "x"}] * n),  # around the 100-part bound
    json_values,
)
messages = st.one_of(
    st.fixed_dictionaries(
        {},
        optional={
            "role": st.sampled_from(["user", "agent", None, 1]),
            "parts": part_lists,
            "metadata": st.one_of(st.dictionaries(st.text(max_size=3), json_values, max_size=2), json_values),
            "messageId": json_values,
        },
    ),
    json_values,
)
numbers = st.one_of(
    st.sampled_from([0, 0.0, -1, 1e-9, 1, 2592000, 2592000.0, 2592000.5, 2592001, True, False, "5", None]),
    st.floats(allow_nan=False, allow_infinity=False),
    st.integers(-(2**63), 2**63 - 1),
)
FIELDS: dict[str, st.SearchStrategy[Any]] = {
    "type": st.sampled_from(["start", "reply", "cancel", "stop", "", 1, None]),
    "commandId": ids,
    "taskKey": ids,
    "agent": agents,
    "message": messages,
    "metadata": st.one_of(st.dictionaries(st.text(max_size=3), json_values, max_size=2), json_values),
    "deadlineSeconds": numbers,
    "contextId": ids,
    "reason": st.one_of(st.text(max_size=3), st.text(min_size=999, max_size=1001), json_values),
    "other": json_values,
}
commands = st.fixed_dictionaries({}, optional=FIELDS)
VALID: dict[str, dict[str, Any]] = {
    "start": {
        "type": "start",
        "commandId": "c1",
        "taskKey": "k1",
        "agent": "writer",
        "message": {"role": "user", "parts": [{"kind": "text", "text": "hi"}]},
    },
    "reply": {
        "type": "reply",
        "commandId": "c2",
        "taskKey": "k1",
        "message": {"role": "user", "parts": [{"kind": "data", "data": {}}]},
    },
    "cancel": {"type": "cancel", "commandId": "c3", "taskKey": "k1", "reason": "no longer needed"},
}


@st.composite
def near_valid(draw: st.DrawFn) -> dict[str, Any]:
    """A valid command of each type, with up to two fields changed, removed or added."""
    doc = dict(VALID[draw(st.sampled_from(sorted(VALID)))])
    for _ in range(draw(st.integers(0, 2))):
        name = draw(st.sampled_from(sorted(FIELDS)))
        if name in doc and draw(st.booleans()):
            del doc[name]
        else:
            doc[name] = draw(FIELDS[name])
    return doc


def verdicts(doc: Any) -> tuple[bool, bool]:
    doc = orjson.loads(orjson.dumps(doc))  # as the bridge gets it
    command = read_schema("command")
    return command.check(doc), command.validator.is_valid(doc)


@settings(max_examples=1500)
@given(near_valid())
def test_near_valid_commands_get_jsonschemas_verdict(doc: dict[str, Any]) -> None:
    fast, slow = verdicts(doc)
    assert fast == slow


@settings(max_examples=800)
@given(commands)
def test_any_command_shaped_object_gets_jsonschemas_verdict(doc: dict[str, Any]) -> None:
    fast, slow = verdicts(doc)
    assert fast == slow


@given(json_values)
def test_any_json_gets_jsonschemas_verdict(doc: Any) -> None:
    fast, slow = verdicts(doc)
    assert fast == slow


@pytest.mark.parametrize(
    ("doc", "valid"),
    [
        (VALID["start"], True),
        (VALID["reply"], True),
        (VALID["cancel"], True),
        ({**VALID["start"], "deadlineSeconds": 2592000}, True),
        ({**VALID["start"], "deadlineSeconds": 0}, False),
        ({**VALID["start"], "deadlineSeconds": True}, False),
        ({**VALID["start"], "agent": "a" * 65}, False),
        ({**VALID["start"], "commandId": "x" * 257}, False),
        ({**VALID["start"], "message": {"role": "user", "parts": []}}, False),
        # A part's kind picks one of oneOf's branches; other fields beside it are allowed.
        ({**VALID["start"], "message": {"role": "user", "parts": [{"kind": "text", "text": "a", "data": {}}]}}, True),
        ({**VALID["start"], "message": {"role": "user", "parts": [{"kind": "data", "text": "a", "data": {}}]}}, True),
        ({**VALID["start"], "message": {"role": "user", "parts": [{"kind": "text", "text": 1}]}}, False),
        ({**VALID["cancel"], "reason": "r" * 1001}, False),
        ({"type": "start", "commandId": "c", "taskKey": "k"}, False),
        ({"type": "stop", "commandId": "c", "taskKey": "k"}, False),
        ([VALID["start"]], False),
    ],
)
def test_known_commands(doc: Any, valid: bool) -> None:
    assert verdicts(doc) == (valid, valid)


def test_the_command_schema_is_compiled_not_left_to_jsonschema() -> None:
    command = read_schema("command")
    assert command.check != command.validator.is_valid


def test_a_schema_with_a_keyword_it_does_not_know_is_left_to_jsonschema() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "string", "format": "email"}}}
    with pytest.raises(schemas.Unsupported):
        schemas.compiled(schema)
    recursive = {"$defs": {"node": {"items": {"$ref": "#/$defs/node"}}}, "$ref": "#/$defs/node"}
    with pytest.raises(schemas.Unsupported):
        schemas.compiled(recursive)
    rebased = {"$defs": {"a": {"type": "string"}}, "properties": {"x": {"$id": "other.json", "$ref": "#/$defs/a"}}}
    with pytest.raises(schemas.Unsupported):
        schemas.compiled(rebased)
    custom = Schema(schema)
    assert custom.check == custom.validator.is_valid


@pytest.mark.parametrize(
    ("a", "b", "equal"),
    [
        (1, 1.0, True),
        (True, 1, False),
        (False, 0, False),
        ([1, True], [1.0, True], True),
        ({"a": 1}, {"a": 1.0}, True),
        ("1", 1, False),
        (None, None, True),
        ({"a": 1}, {"b": 1}, False),
    ],
)
def test_json_equality(a: Any, b: Any, equal: bool) -> None:
    assert schemas.json_equal(a, b) is equal


KEYWORD_SCHEMAS = [
    {"oneOf": [{"type": "integer"}, {"type": "number"}]},  # 1 matches both: not one of them
    {"anyOf": [{"type": "string", "minLength": 2}, {"type": "integer"}]},
    {"type": ["string", "null"], "maxLength": 1},
    {"type": "integer", "minimum": 0, "exclusiveMaximum": 3},
    {"enum": [1, "a", None, [1], {"b": True}]},
    {"const": {"a": [1, 2]}},
    {"items": {"type": "boolean"}, "minItems": 1, "maxItems": 2},
    {"if": {"required": ["a"]}, "then": {"required": ["b"]}, "else": {"required": ["c"]}},
    {"properties": {"a": False, "b": True}},
    {"pattern": "^x+$"},
]
small_docs = st.one_of(
    json_values,
    st.sampled_from([1, 1.0, 1.5, 2, 3, -1, True, "", "x", "xx", "x\n", [], [True], [1], {"a": 1}, {"b": 1}]),
)


@pytest.mark.parametrize("schema", KEYWORD_SCHEMAS, ids=lambda s: ",".join(s))
@given(doc=small_docs)
def test_each_keyword_gets_jsonschemas_verdict(schema: dict[str, Any], doc: Any) -> None:
    fast = schemas.compiled(schema)
    assert fast(doc) == Draft202012Validator(schema).is_valid(doc)
