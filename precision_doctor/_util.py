"""Small helpers shared across layers."""

from __future__ import annotations

from typing import Callable, Hashable, Iterable, TypeVar

T = TypeVar("T")


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
