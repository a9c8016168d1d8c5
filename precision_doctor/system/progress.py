"""A run's progress, for a bar on a terminal: the probes say how many files there are and when each is done; the CLI
decides whether anything is shown (a terminal, not CI, not --quiet). Nothing listens by default."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager


class Listener:
    def expect(self, files: int) -> None:  # more files to go
        pass

    def advance(self, files: int = 1) -> None:  # files done
        pass


_LISTENERS: list[Listener] = []


@contextmanager
def listening(listener: Listener) -> Iterator[None]:
    _LISTENERS.append(listener)
    try:
        yield
    finally:
        _LISTENERS.remove(listener)


def expect(files: int) -> None:
    for listener in _LISTENERS:
        listener.expect(files)


def advance(files: int = 1) -> None:
    for listener in _LISTENERS:
        listener.advance(files)
