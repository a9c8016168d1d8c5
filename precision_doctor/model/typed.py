"""Data read from a file the user gave (a snapshot, a `[tool.precision-doctor]` table) checked against the declared
type it must have, at the boundary, so that no rule ever meets a string where the facts declare a number.

The declared types are the dataclasses themselves (facts.py, config.py): msgspec converts plain data into them
directly and says where a value is wrong, so there is no second description of the shape to keep in step.
msgspec is imported only here, and only when such a file is read.
"""

from __future__ import annotations

import re
import typing
from collections.abc import Callable
from typing import Any

from .errors import InputError

_STEP = re.compile(r"\.([A-Za-z_][A-Za-z0-9_-]*)|\[(\d+)\]|\[\.\.\.\]")
_WHERE = re.compile(r" - at `\$([^`]*)`$")
_EXPECTED = re.compile(r"^Expected `([^`]+)`(?: of length (\d+))?(?:, got `?([^`]+)`?)?$")
_JSON_NAMES = {
    "str": "a string",
    "int": "an integer",
    "float": "a number",
    "bool": "true or false",
    "array": "an array",
    "object": "an object",
    "null": "null",
    "int | null": "an integer or null",
    "str | null": "a string or null",
    "object | null": "an object or null",
}


def convert(
    data: Any, tp: Any, where: str, root: str = "", key_name: Callable[[str], str] = str, null: bool = True
) -> Any:
    """`data` as an instance of `tp`, or InputError naming the bad value's path: `where: root.a[0].b: expected
    an array of 2 integers, got "8.0"`. Strict: a string is never read as a number, nor a number as a string.
    `key_name` spells a field as the file does; `null=False` for a format that has no null (TOML)."""
    import msgspec

    try:
        return msgspec.convert(data, tp, strict=True)
    except msgspec.ValidationError as exc:
        raise InputError(f"{where}: {_explain(str(exc), data, tp, root, key_name, null)}") from None
    except RecursionError:
        raise InputError(f"{where}: nested too deeply to be {_describe(tp)}") from None


def decode_json(raw: bytes, tp: Any, where: str, malformed: str = "not valid JSON") -> Any:
    """Strict JSON (no NaN or Infinity, numbers within 64 bits) straight into `tp`; errors as for convert, and
    malformed JSON as `where: not valid JSON (...)`."""
    import msgspec

    try:
        return msgspec.json.decode(raw, type=tp, strict=True)
    except msgspec.ValidationError as exc:
        try:
            data = msgspec.json.decode(raw)  # only to show the bad value itself
        except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
            data = _MISSING
        raise InputError(f"{where}: {_explain(str(exc), data, tp, '')}") from None
    except msgspec.DecodeError as exc:
        raise InputError(f"{where}: {malformed} ({str(exc).replace('JSON is malformed: ', '')})") from None
    except RecursionError:
        raise InputError(f"{where}: {malformed} (nested too deeply)") from None


def _explain(
    message: str, data: Any, tp: Any, root: str, key_name: Callable[[str], str] = str, null: bool = True
) -> str:
    match = _WHERE.search(message)
    path = match.group(1) if match else ""
    text = message[: match.start()] if match else message
    spelt = _STEP.sub(lambda m: f".{key_name(m.group(1))}" if m.group(1) else m.group(), path)
    shown = (root + spelt) if root else spelt.lstrip(".") or "the top level"
    if text.startswith("Invalid enum value") or text.startswith("Invalid value"):
        value, declared = _value_at(data, path), _type_at(tp, path)
        if value is not _MISSING and declared is not None:
            return f"{shown}: expected {_describe(declared)}, got {_show(value)}"
    expected = _EXPECTED.match(text)
    if expected:
        value = _value_at(data, path)
        declared = _type_at(tp, path)
        want = _describe(declared) if declared is not None else _JSON_NAMES.get(expected.group(1), expected.group(1))
        got = _show(value) if value is not _MISSING else _JSON_NAMES.get(expected.group(3), expected.group(3))
        if value is _MISSING and expected.group(2):
            got = "an array of another length"
        return f"{shown}: expected {want if null else want.replace(' or null', '')}, got {got}"
    return f"{shown}: {text[:1].lower()}{text[1:]}"


_MISSING = object()


def _steps(path: str) -> list[str | int | None]:
    """`.gpus[0].capability` -> ["gpus", 0, "capability"]; a dict key msgspec does not name is None."""
    out: list[str | int | None] = []
    for m in _STEP.finditer(path):
        out.append(m.group(1) if m.group(1) is not None else int(m.group(2)) if m.group(2) is not None else None)
    return out


def _value_at(data: Any, path: str) -> Any:
    for step in _steps(path):
        if isinstance(step, str) and isinstance(data, dict) and step in data:
            data = data[step]
        elif isinstance(step, int) and isinstance(data, list) and step < len(data):
            data = data[step]
        else:
            return _MISSING
    return data


def _type_at(tp: Any, path: str) -> Any:
    import dataclasses

    for step in _steps(path):
        tp = _without_none(tp)
        args = typing.get_args(tp)
        if isinstance(step, str) and dataclasses.is_dataclass(tp):
            hints = typing.get_type_hints(tp)
            if step not in hints:
                return None
            tp = hints[step]
        elif isinstance(step, int) and typing.get_origin(tp) in (tuple, list):
            if typing.get_origin(tp) is tuple and not (len(args) == 2 and args[1] is Ellipsis):
                tp = args[step] if step < len(args) else None
            else:
                tp = args[0] if args else None
        elif step is None and typing.get_origin(tp) is dict:
            tp = args[1] if args else None
        else:
            return None
        if tp is None:
            return None
    return tp


def _without_none(tp: Any) -> Any:
    inner = [a for a in typing.get_args(tp) if a is not type(None)]
    if (typing.get_origin(tp) is typing.Union or type(tp).__name__ == "UnionType") and len(inner) == 1:
        return inner[0]
    return tp


def _describe(tp: Any) -> str:
    import dataclasses
    import enum

    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is typing.Union or type(tp).__name__ == "UnionType":
        parts = [_describe(a) for a in args if a is not type(None)]
        return " or ".join(parts) + (" or null" if type(None) in args else "")
    if origin is typing.Literal:
        return "one of " + ", ".join(repr(a) for a in args)
    if origin is tuple and args and not (len(args) == 2 and args[1] is Ellipsis):
        if len(set(args)) == 1:
            return f"an array of {len(args)} {_plural(args[0])}"
        return f"an array of {len(args)} items"
    if origin in (tuple, list):
        return f"an array of {_plural(args[0])}" if args else "an array"
    if origin is dict:
        return f"an object of {_plural(args[1])}" if len(args) == 2 else "an object"
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return "one of " + ", ".join(repr(m.value) for m in tp)
    if dataclasses.is_dataclass(tp):
        return "an object"
    return {str: "a string", int: "an integer", float: "a number", bool: "true or false"}.get(tp, "a value")


def _plural(tp: Any) -> str:
    single = _describe(tp)
    article, _, rest = single.partition(" ")
    if article not in ("a", "an") or " or " in rest:
        return f"items ({single})"
    noun, _, tail = rest.partition(" ")
    return f"{noun}s {tail}".rstrip()


def _show(value: Any) -> str:
    import json

    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 64:
        return f"a {value.bit_length()}-bit integer"
    try:
        text = json.dumps(value, allow_nan=False, ensure_ascii=False)
    except (TypeError, ValueError):
        text = type(value).__name__
    return text if len(text) <= 60 else text[:57] + "..."
