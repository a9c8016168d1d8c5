"""A whole `check` run's answer, replayed while nothing the run read has changed.

A gate that runs `check` again over a tree nobody touched (pre-commit on one file, CI on an unchanged repository)
would otherwise start the whole doctor to print what it printed last time. The first run records every read it
makes (system/reads.py: files, files looked for, folder listings, environment variables) and keeps, beside its
per-file entries, what it wrote to stdout and its exit code, found by the command line and where and how it ran
(working directory, interpreter, terminal). The next identical command prints that answer while every read gives
what it gave, without loading the rules.

Only a run whose reads are all known is kept: one that probed no machine (`--target` or `--facts`), asked no
program or network, said nothing on stderr (nor did a worker), wrote no file and was the first run in its process
(an in-process memo may hold a value without its reads). Worker processes send each item's reads back with its
result (system/pool.py), so a folder run computed in workers is kept like one computed here. The entry is JSON,
never pickled: it is read before the run knows every tree it will check, so it can carry nothing that runs, and
it names the trees its run checked, so that a cache folder inside one of them is never answered from.
"""

from __future__ import annotations

import io
import json
import os
import sys
from collections.abc import Callable
from typing import Any

from . import content_cache, reads

KIND = "run"
_runs_in_process = [0]


def question(argv: list[str]) -> str:
    """The entry's name: everything the run depends on that is not a read: the command line, the working directory,
    the interpreter and its import path (they decide the training environment read), and what stdout and stderr are
    (a terminal's width and colours shape the report)."""

    def terminal(stream: Any) -> tuple:
        try:
            if not stream.isatty():
                return (False,)
            size = os.get_terminal_size(stream.fileno())
            return (True, size.columns, size.lines)
        except (AttributeError, OSError, ValueError):
            return (None,)

    asked = (
        tuple(argv),
        sys.executable,
        sys.prefix,
        tuple(sys.path),
        terminal(sys.stdout),
        terminal(sys.stderr),
        getattr(sys.stdout, "encoding", None),
        getattr(sys.stdout, "errors", None),
    )
    return content_cache.entry_name(KIND, asked)  # which adds the working directory


def replay(name: str) -> tuple[str, int] | None:
    """The kept answer, as (what was printed, the exit code), or None (no entry, or something it read has changed).
    The cache must be open (content_cache.prepare())."""
    folder = content_cache.open_folder()
    if folder is None:
        return None
    try:
        with reads.unrecorded():
            entry = json.loads(folder.read(name, content_cache.MAX_ENTRY_BYTES, private=True))
        if entry["doctor"] != content_cache.doctor_fingerprint() or entry["name"] != name:
            return None
        from .programs import inside

        if inside(os.path.realpath(folder.path), [str(t) for t in entry["trees"]]):
            return None
        manifest = tuple((str(kind), str(key), _tuples(then)) for kind, key, then in entry["reads"])
        output, code = str(entry["stdout"]), int(entry["exit"])
    except Exception:  # missing, torn, foreign or of another shape: a miss  # noqa: BLE001
        return None
    if not reads.unchanged(manifest, None):
        return None
    return output, code


def answer(name: str, run: Callable[[], int]) -> int:
    """run(), recorded; its answer is kept where every read it made is known (see the module's docstring)."""
    _runs_in_process[0] += 1
    first = _runs_in_process[0] == 1
    stdout, stderr = _Tee(sys.stdout), _Tee(sys.stderr)
    sys.stdout, sys.stderr = stdout, stderr
    try:
        with reads.recording() as frame:
            code = run()
    finally:
        sys.stdout, sys.stderr = stdout.inner, stderr.inner
    folder = content_cache.open_folder()
    if not first or folder is None or stderr.parts or stdout.failed:
        return code
    # the job's environment follows from the launch line and the machine's facts, both read
    manifest = reads.manifest(frame, None, skip=("jobenv", "jobenv*"))
    if manifest is None:
        return code
    from .programs import checked_trees

    entry = {
        "doctor": content_cache.doctor_fingerprint(),
        "name": name,
        "trees": checked_trees(),
        "reads": manifest,
        "stdout": "".join(stdout.parts),
        "exit": code,
    }
    content_cache.store_bytes(folder, name, json.dumps(entry).encode())
    return code


def _tuples(value: Any) -> Any:
    """A fingerprint as reads.fingerprint gives it (JSON gives its tuples back as lists)."""
    return tuple(_tuples(v) for v in value) if isinstance(value, list) else value


class _Tee(io.TextIOBase):
    """A stream that passes everything to the one it wraps and keeps a copy (stdout), or notes that something was
    said (stderr: a run that warned is not kept)."""

    def __init__(self, inner: Any):
        self.inner = inner
        self.parts: list[str] = []
        self.failed = False

    def write(self, text: str) -> int:
        try:
            written = self.inner.write(text)
        except BaseException:
            self.failed = True
            raise
        self.parts.append(text)
        return written

    def flush(self) -> None:
        self.inner.flush()

    def isatty(self) -> bool:
        return self.inner.isatty()

    def fileno(self) -> int:
        return self.inner.fileno()

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return self.inner.encoding

    @property
    def errors(self) -> str | None:  # type: ignore[override]
        return self.inner.errors


def underlying(stream: Any) -> Any:
    """The stream a tee wraps (a progress bar on stderr is no message of the run's)."""
    return stream.inner if isinstance(stream, _Tee) else stream
