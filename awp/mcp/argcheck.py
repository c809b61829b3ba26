"""Checking a tool call's arguments against the tool's declared ``inputSchema``.

MCP clients are not obliged to validate arguments before calling, so the
server must: a value the schema rules out (a state outside its ``enum``, a
string where a number goes) is refused here, with a message for the model,
rather than passed on to the daemon.

This is a small validator for the JSON Schema subset our tools declare
(``type``, ``enum``, ``minimum``/``maximum``, ``minLength``/``maxLength``,
``properties``, ``required``, ``additionalProperties``, ``items``), written
out rather than taken from the ``jsonschema`` package: that package is not
installed with awp and would bring its own dependencies for a dozen flat
schemas. :func:`unsupported` lists any keyword a schema uses that this
module does not check, and a unit test keeps that list empty for every tool,
so a schema cannot silently promise more than is enforced.
"""

from __future__ import annotations

from typing import Any

from ..base.echo import echo

#: Keywords this module enforces, and the ones that only describe.
CHECKED = frozenset({"type", "enum", "minimum", "maximum", "minLength", "maxLength",
                     "properties", "required", "additionalProperties", "items"})
DESCRIPTIVE = frozenset({"description", "title", "default", "examples"})


class ArgumentError(ValueError):
    """An argument the schema rules out; the message is for the model."""


_TYPES = {
    "string": lambda v: isinstance(v, str),
    "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "null": lambda v: v is None,
}


def _what(schema: dict) -> str:
    kind = schema.get("type")
    if kind == "array":
        inner = schema.get("items", {}).get("type") if isinstance(schema.get("items"),
                                                                   dict) else None
        return f"a list of {inner}s" if isinstance(inner, str) else "a list"
    if isinstance(kind, list):
        return " or ".join(_article(k) for k in kind)
    return _article(str(kind))


def _article(kind: str) -> str:
    return f"an {kind}" if kind in ("integer", "object", "array") else f"a {kind}"


def check_value(value: Any, schema: dict, name: str) -> None:
    """Raise :class:`ArgumentError` if ``value`` does not fit ``schema``."""
    kind = schema.get("type")
    if kind is not None:
        kinds = kind if isinstance(kind, list) else [kind]
        if not any(_TYPES[k](value) for k in kinds):
            raise ArgumentError(f"{name} must be {_what(schema)}")
    enum = schema.get("enum")
    if enum is not None and value not in enum:
        raise ArgumentError(f"{name}: unknown value {echo(value)}; choose from "
                            + ", ".join(str(e) for e in enum))
    if _TYPES["number"](value):
        lo, hi = schema.get("minimum"), schema.get("maximum")
        if (lo is not None and value < lo) or (hi is not None and value > hi):
            if lo is not None and hi is not None:
                raise ArgumentError(f"{name} must be between {lo} and {hi}")
            raise ArgumentError(f"{name} must be at least {lo}" if lo is not None
                                else f"{name} must be at most {hi}")
    if isinstance(value, str):
        short, long = schema.get("minLength"), schema.get("maxLength")
        if short is not None and len(value) < short:
            raise ArgumentError(f"{name} must be at least {short} characters")
        if long is not None and len(value) > long:
            raise ArgumentError(f"{name} must be at most {long} characters")
    items = schema.get("items")
    if isinstance(value, list) and isinstance(items, dict):
        kinds = items.get("type")
        kinds = kinds if isinstance(kinds, list) else [kinds] if kinds else []
        if kinds and not all(any(_TYPES[k](x) for k in kinds) for x in value):
            raise ArgumentError(f"{name} must be {_what(schema)}")
        for item in value:
            check_value(item, items, name)
    if isinstance(value, dict) and ("properties" in schema or "required" in schema):
        check_object(value, schema, f"{name}.")


def check_object(args: dict, schema: dict, prefix: str = "") -> None:
    """Check an object's keys: required ones present, unknown ones refused, each value.

    At the top level (the call's arguments) a required argument given as
    ``null``, ``""`` or ``[]`` counts as missing, and an optional one given
    as ``null`` counts as left out: models often send those for "none".
    """
    props = schema.get("properties", {})
    for key in schema.get("required", []):
        if args.get(key) in (None, "", []):
            raise ArgumentError(f"{prefix}{key} is required")
    extra = schema.get("additionalProperties", True)
    for key, value in args.items():
        spec = props.get(key)
        if spec is None:
            if extra is False:
                raise ArgumentError(f"unknown argument {echo(prefix + key)}; this tool takes: "
                                    + (", ".join(props) or "no arguments"))
            if isinstance(extra, dict) and value is not None:
                check_value(value, extra, f"{prefix}{key}")
            continue
        if value is None and not prefix:
            continue
        check_value(value, spec, f"{prefix}{key}")


def unsupported(schema: Any, path: str = "") -> list[str]:
    """Keywords in ``schema`` (recursively) that this module does not enforce."""
    if not isinstance(schema, dict):
        return []
    out = [f"{path}{k}" for k in schema if k not in CHECKED | DESCRIPTIVE]
    for key, sub in (schema.get("properties") or {}).items():
        out += unsupported(sub, f"{path}properties.{key}.")
    for key in ("items", "additionalProperties"):
        out += unsupported(schema.get(key), f"{path}{key}.")
    return out
