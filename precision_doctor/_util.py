"""Small helpers shared across layers."""

from __future__ import annotations

import enum
import re
from typing import Callable, Hashable, Iterable, TypeVar

T = TypeVar("T")


class StrEnum(str, enum.Enum):
    """An enum whose members are their string values: they compare, format and serialise as those strings."""

    __str__ = str.__str__
    __format__ = str.__format__


def unique(items: Iterable[T], key: Callable[[T], Hashable]) -> list[T]:
    """The items in order, keeping the first of each key."""
    seen: set = set()
    out: list[T] = []
    for item in items:
        k = key(item)
        if k not in seen:
            seen.add(k)
            out.append(item)
    return out


_PYTHON_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+$")


def python_lines(text: str, keepends: bool = False) -> list[str]:
    """`text.splitlines()` as Python numbers lines: split on \\n, \\r\\n and \\r only. str.splitlines also splits on
    form feeds, U+2028 and other characters Python's tokenizer keeps inside a line, which shifts line numbers."""
    lines = _PYTHON_LINE.findall(text)
    return lines if keepends else [line.rstrip("\r\n") for line in lines]
