"""The wire contract's JSON Schemas, judged: a schema document ready to judge
documents (:class:`Schema`), its verdict compiled into plain checks. Pure: the
documents themselves are read from ``schemas/`` by :mod:`bridge.config.schemas`,
the one place that reads them.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from jsonschema import Draft202012Validator


class Schema:
    """One schema document: :attr:`check` is the fast verdict (:func:`compiled`, or
    jsonschema's own for a schema it does not compile), :attr:`validator`
    jsonschema's, which says why a document fails."""

    __slots__ = ("check", "doc", "validator")

    def __init__(self, doc: dict[str, Any]) -> None:
        Draft202012Validator.check_schema(doc)
        self.doc = doc
        self.validator = Draft202012Validator(doc)
        try:
            self.check: Check = compiled(doc)
        except Unsupported:
            self.check = self.validator.is_valid


# ------------------------------------------------------------ fast verdicts --

Check = Callable[[Any], bool]

# Keywords that only describe; they never change a verdict.
_ANNOTATIONS = frozenset(
    {"$schema", "$id", "$defs", "$comment", "title", "description", "examples", "default", "deprecated"}
)


class Unsupported(Exception):
    """A keyword :func:`check` does not compile: jsonschema judges that schema."""


def compiled(schema: dict[str, Any]) -> Check:
    """``schema``'s verdict as plain checks, much faster than jsonschema's; :class:`Unsupported`
    if it uses a keyword (or a ``$ref`` shape) the compiler does not know.

    jsonschema walks its general machinery for every document (a validator object per
    subschema, ``$ref`` resolution), a large share of the bridge's CPU when many Tasks
    start at once (bench/results/tuned-command-validation.json). The keywords the
    schemas in ``schemas/`` use are compiled once into plain checks, by the 2020-12
    rules (tests/unit/wire/test_schemas.py holds them to jsonschema's verdicts on generated
    documents). A schema with any other keyword is left to jsonschema whole. Only the
    verdict is fast: why a document fails is still jsonschema's to say."""
    return _compile(schema, schema, ())


def _compile(node: Any, root: dict[str, Any], refs: tuple[str, ...]) -> Check:
    if node is True:
        return lambda _: True
    if node is False:
        return lambda _: False
    if not isinstance(node, dict):
        raise Unsupported(repr(node)[:40])
    checks: list[Check] = []
    for key, value in node.items():
        if key == "$id" and node is not root:
            raise Unsupported("$id below the root")  # a new base for the $refs under it
        if key in _ANNOTATIONS or key in ("then", "else"):
            continue
        compiler = _KEYWORDS.get(key)
        if compiler is None:
            raise Unsupported(key)
        checks.append(compiler(value, node, root, refs))
    return _every(checks)


def _every(checks: list[Check]) -> Check:
    if len(checks) == 1:
        return checks[0]

    def every(doc: Any) -> bool:
        for c in checks:  # noqa: SIM110 - a loop costs half of all(generator), per command
            if not c(doc):
                return False
        return True

    return every


def _is_number(doc: Any) -> bool:
    return isinstance(doc, int | float) and not isinstance(doc, bool)


_TYPES: dict[str, Check] = {
    "object": lambda d: isinstance(d, dict),
    "array": lambda d: isinstance(d, list),
    "string": lambda d: isinstance(d, str),
    "number": _is_number,
    "integer": lambda d: _is_number(d) and (isinstance(d, int) or d.is_integer()),
    "boolean": lambda d: isinstance(d, bool),
    "null": lambda d: d is None,
}


def json_equal(a: Any, b: Any) -> bool:
    """JSON equality as the spec has it: 1 equals 1.0, true does not equal 1."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if _is_number(a) and _is_number(b):
        return bool(a == b)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(json_equal(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(json_equal(a[k], b[k]) for k in a)
    return type(a) is type(b) and bool(a == b)


_Compiler = Callable[[Any, dict[str, Any], dict[str, Any], tuple[str, ...]], Check]


def _type(value: Any, node: dict[str, Any], root: dict[str, Any], refs: tuple[str, ...]) -> Check:
    names = [value] if isinstance(value, str) else value
    if not isinstance(names, list) or not all(n in _TYPES for n in names):
        raise Unsupported(f"type {value!r}")
    tests = [_TYPES[n] for n in names]
    return lambda doc: any(t(doc) for t in tests)


def _enum(value: Any, node: dict[str, Any], root: dict[str, Any], refs: tuple[str, ...]) -> Check:
    if not isinstance(value, list):
        raise Unsupported("enum")
    return lambda doc: any(json_equal(doc, v) for v in value)


def _const(value: Any, node: dict[str, Any], root: dict[str, Any], refs: tuple[str, ...]) -> Check:
    return lambda doc: json_equal(doc, value)


def _ref(value: Any, node: dict[str, Any], root: dict[str, Any], refs: tuple[str, ...]) -> Check:
    prefix = "#/$defs/"
    if not isinstance(value, str) or not value.startswith(prefix) or value in refs:
        raise Unsupported(f"$ref {value!r}")  # another document, or recursion
    target = root.get("$defs", {}).get(value[len(prefix) :])
    if target is None:
        raise Unsupported(f"$ref {value!r}")
    return _compile(target, root, (*refs, value))


def _required(value: Any, node: dict[str, Any], root: dict[str, Any], refs: tuple[str, ...]) -> Check:
    names = tuple(value)
    return lambda doc: not isinstance(doc, dict) or all(n in doc for n in names)


def _properties(value: Any, node: dict[str, Any], root: dict[str, Any], refs: tuple[str, ...]) -> Check:
    props = [(name, _compile(sub, root, refs)) for name, sub in value.items()]

    def properties(doc: Any) -> bool:
        if isinstance(doc, dict):
            for name, c in props:
                if name in doc and not c(doc[name]):
                    return False
        return True

    return properties


def _all_of(value: Any, node: dict[str, Any], root: dict[str, Any], refs: tuple[str, ...]) -> Check:
    return _every([_compile(sub, root, refs) for sub in value])


def _any_of(value: Any, node: dict[str, Any], root: dict[str, Any], refs: tuple[str, ...]) -> Check:
    subs = [_compile(sub, root, refs) for sub in value]
    return lambda doc: any(c(doc) for c in subs)


def _one_of(value: Any, node: dict[str, Any], root: dict[str, Any], refs: tuple[str, ...]) -> Check:
    subs = [_compile(sub, root, refs) for sub in value]
    return lambda doc: sum(1 for c in subs if c(doc)) == 1


def _if(value: Any, node: dict[str, Any], root: dict[str, Any], refs: tuple[str, ...]) -> Check:
    cond = _compile(value, root, refs)
    then = _compile(node.get("then", True), root, refs)
    otherwise = _compile(node.get("else", True), root, refs)
    return lambda doc: then(doc) if cond(doc) else otherwise(doc)


def _length(kind: type[str] | type[list[Any]], test: Callable[[int, int], bool]) -> _Compiler:
    """A bound on the length of instances of ``kind``; others pass."""

    def compiler(value: Any, node: dict[str, Any], root: dict[str, Any], refs: tuple[str, ...]) -> Check:
        if not isinstance(value, int) or isinstance(value, bool):
            raise Unsupported(f"length {value!r}")
        return lambda doc: not isinstance(doc, kind) or test(len(doc), value)

    return compiler


def _limit(test: Callable[[Any, Any], bool]) -> _Compiler:
    """A bound on numbers (not booleans); others pass."""

    def compiler(value: Any, node: dict[str, Any], root: dict[str, Any], refs: tuple[str, ...]) -> Check:
        if not _is_number(value):
            raise Unsupported(f"limit {value!r}")
        return lambda doc: not _is_number(doc) or test(doc, value)

    return compiler


def _pattern(value: Any, node: dict[str, Any], root: dict[str, Any], refs: tuple[str, ...]) -> Check:
    regex = re.compile(value)  # as jsonschema: Python's re, searched
    return lambda doc: not isinstance(doc, str) or regex.search(doc) is not None


def _items(value: Any, node: dict[str, Any], root: dict[str, Any], refs: tuple[str, ...]) -> Check:
    if "prefixItems" in node:
        raise Unsupported("prefixItems")
    sub = _compile(value, root, refs)

    def items(doc: Any) -> bool:
        if isinstance(doc, list):
            for item in doc:
                if not sub(item):
                    return False
        return True

    return items


_KEYWORDS: dict[str, _Compiler] = {
    "type": _type,
    "enum": _enum,
    "const": _const,
    "$ref": _ref,
    "required": _required,
    "properties": _properties,
    "allOf": _all_of,
    "anyOf": _any_of,
    "oneOf": _one_of,
    "if": _if,
    "minLength": _length(str, lambda n, v: n >= v),
    "maxLength": _length(str, lambda n, v: n <= v),
    "minItems": _length(list, lambda n, v: n >= v),
    "maxItems": _length(list, lambda n, v: n <= v),
    "minimum": _limit(lambda d, v: d >= v),
    "maximum": _limit(lambda d, v: d <= v),
    "exclusiveMinimum": _limit(lambda d, v: d > v),
    "exclusiveMaximum": _limit(lambda d, v: d < v),
    "pattern": _pattern,
    "items": _items,
}
