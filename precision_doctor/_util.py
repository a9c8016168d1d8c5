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
    if not keepends and "\r" not in text:  # the usual file: the same lines, split without a regular expression
        lines = text.split("\n")
        if lines[-1] == "":
            lines.pop()
        return lines
    lines = _PYTHON_LINE.findall(text)
    return lines if keepends else [line.rstrip("\r\n") for line in lines]


MAX_GPUS_PER_NODE = 1024  # more than any node has: a larger count is a typo, and would make the doctor build it
MAX_PORT = 65535


def whole_number(text: str, low: int, high: int) -> int | None:
    """`text` as a whole number from `low` to `high` when it is written in ASCII digits; otherwise None. Never
    raises: not on '²' (a digit to str.isdigit, not to int), not on 5,000 digits (int's own limit is 4,300)."""
    text = text.strip()
    if not text or len(text) > 18 or not (text.isascii() and text.isdigit()):
        return None
    number = int(text)
    return number if low <= number <= high else None
