"""Every read of a file from the tree being checked (scripts, sibling modules, JSON/TOML/YAML configs).

A file is read only when it is a regular file, opened so that the open itself cannot block (a FIFO swapped in
between the check and the open reads as empty instead of waiting for a writer), and never past a size cap: a
link to /dev/zero or a FIFO planted in a folder can neither hang the doctor nor fill its memory. Source is
decoded the way Python decodes it (BOM, `# -*- coding: ... -*-` cookie), so a file Python refuses is refused.
"""

from __future__ import annotations

import errno
import io
import os
import stat
import sys
import tokenize
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path
from typing import Any

from ..model.errors import InputError
from .notebooks import NotebookCode, NotFound, is_notebook, notebook_code
from .reads import not_cacheable, saw_content

MAX_SOURCE_BYTES = 2 * 1024 * 1024  # a training script or a module it imports
MAX_CONFIG_BYTES = 4 * 1024 * 1024  # pyproject.toml, requirements, accelerate YAML, DeepSpeed/model JSON

_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a named pipe"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)
# non-blocking: opening a FIFO never waits for a writer, and no device becomes our controlling terminal
_OPEN_FLAGS = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0)


class Unreadable(InputError):
    """A file the doctor will not or cannot read. `reason` is the message without the path (for a folder run's
    "not checked" list); the full text adds what to do."""

    def __init__(self, path: os.PathLike | str, reason: str, hint: str = ""):
        self.path = str(path)
        self.reason = reason
        super().__init__(f"{path}: {reason}" + (f"; {hint}" if hint else ""))


class EmptySource(Unreadable):
    """A file with nothing in it (an empty `__init__.py`): nothing to check, which is no error."""

    def __init__(self, path: os.PathLike | str):
        super().__init__(path, "the file is empty")


def kind(mode: int) -> str:
    """'a regular file', 'a directory', 'a named pipe (FIFO)', ... for an st_mode."""
    if stat.S_ISREG(mode):
        return "a regular file"
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def os_reason(exc: OSError) -> str:
    """An OSError as the few words a user needs: 'permission denied', 'a symbolic link loop', ..."""
    if exc.errno == errno.ELOOP:
        return "a symbolic link loop (or too many links)"
    if exc.errno in (errno.EACCES, errno.EPERM):
        return "permission denied"
    if exc.errno == errno.ENOENT:
        return "no such file (a broken link?)" if os.path.islink(exc.filename or "") else "no such file"
    if exc.errno == errno.ENAMETOOLONG:
        return "the name is too long"
    return (exc.strerror or type(exc).__name__).lower()


def status(path: os.PathLike | str) -> os.stat_result:
    """os.stat (following links) with every failure turned into Unreadable."""
    try:
        return os.stat(path)
    except OSError as exc:
        raise Unreadable(path, os_reason(exc)) from None
    except ValueError:  # a NUL byte in the name
        raise Unreadable(path, "not a valid file name") from None


def read_bytes_bounded(path: os.PathLike | str, limit: int, what: str = "file") -> bytes:
    """The whole content of a regular file of at most `limit` bytes."""
    mode = status(path).st_mode
    if not stat.S_ISREG(mode):
        raise Unreadable(path, f"not a regular file ({kind(mode)})", f"pass the {what} itself")
    try:
        fd = os.open(path, _OPEN_FLAGS)
    except OSError as exc:
        raise Unreadable(
            path, os_reason(exc), "run the doctor as a user who can read it" if isinstance(exc, PermissionError) else ""
        ) from None
    try:
        info = os.fstat(fd)  # what was opened, not what was checked a moment ago
        if not stat.S_ISREG(info.st_mode):
            raise Unreadable(path, f"not a regular file ({kind(info.st_mode)})", f"pass the {what} itself")
        if info.st_size > limit:
            raise _too_large(path, info.st_size, limit, what)
        # os.read allocates the size it is asked for: ask for what fstat says is there (+1 to see the end),
        # then in small steps for a file that grows
        chunks, size, want = [], 0, info.st_size + 1
        while size <= limit:
            chunk = os.read(fd, min(want, limit + 1 - size))
            want = 1 << 16
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > limit:  # it grew while being read
            raise _too_large(path, size, limit, what)
        data = b"".join(chunks)
        saw_content(path, data)  # for the content cache: this content, not whatever the file holds later
        return data
    except OSError as exc:
        raise Unreadable(path, os_reason(exc)) from None
    finally:
        os.close(fd)


def read_prefix(path: os.PathLike | str, size: int) -> bytes:
    """The first `size` bytes of a regular file (fewer when it is shorter): headers of large binary files."""
    fd = os.open(path, _OPEN_FLAGS)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise Unreadable(path, "not a regular file", "")
        chunks, got = [], 0
        while got < size:
            chunk = os.read(fd, min(1 << 20, size - got))
            if not chunk:
                break
            chunks.append(chunk)
            got += len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def _too_large(path, size: int, limit: int, what: str) -> Unreadable:
    return Unreadable(
        path,
        f"{size / 2**20:.1f} MiB is too large for a {what} (limit {limit / 2**20:g} MiB)",
        "is it generated? pass the file that matters" if what == "training script" else "",
    )


def read_text_bounded(
    path: os.PathLike | str, limit: int = MAX_CONFIG_BYTES, what: str = "config file", errors: str = "strict"
) -> str:
    """A UTF-8 text file (JSON, TOML, YAML, requirements) of at most `limit` bytes; a BOM is dropped."""
    data = read_bytes_bounded(path, limit, what)
    try:
        return data.decode("utf-8-sig", errors)
    except UnicodeDecodeError as exc:
        raise Unreadable(
            path, f"not UTF-8 (byte 0x{data[exc.start]:02x} at offset {exc.start})", f"save the {what} as UTF-8"
        ) from None


_PROPOSED: dict[str, str] = {}  # real path -> text: what `fix` would write, checked before it is written


@contextmanager
def proposed(texts: Mapping[str, str]) -> Iterator[None]:
    """Within the block, read_source returns these texts for these files (a fix checked in memory)."""
    saved = dict(_PROPOSED)
    _PROPOSED.update({os.path.realpath(p): t for p, t in texts.items()})
    try:
        yield
    finally:
        _PROPOSED.clear()
        _PROPOSED.update(saved)


def read_source(path: os.PathLike | str, limit: int = MAX_SOURCE_BYTES) -> str:
    """Python source as Python reads it: the BOM and coding cookie decide the encoding, and a file Python
    would refuse (unknown or contradictory encoding, bytes the encoding cannot decode, NUL bytes) is refused."""
    if _PROPOSED and os.path.realpath(path) in _PROPOSED:
        not_cacheable("a fix's proposed text, not the file's")
        return _PROPOSED[os.path.realpath(path)]
    if is_notebook(path):  # its code cells, as one Python text (notebooks.py)
        return read_notebook(path).text
    data = read_bytes_bounded(path, limit, "training script")
    if not data.strip():
        raise EmptySource(path)
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    except SyntaxError as exc:
        _decode(path, data, "utf-8")  # undecodable first lines without a cookie: name the byte
        raise Unreadable(
            path,
            f"bad encoding declaration ({exc.msg})",
            "Python refuses this file too: fix or remove the `# coding:` line",
        ) from None
    text = _decode(path, data, encoding)
    if "\x00" in text:
        raise Unreadable(path, "contains NUL bytes, so it is not Python source", "pass the training script")
    return text


MAX_NOTEBOOK_BYTES = 64 * 1024 * 1024  # outputs (plots, logs) make notebooks far larger than their code


def read_notebook_json(path: os.PathLike | str) -> str:
    """A notebook file's JSON text, bounded."""
    return _decode(path, read_bytes_bounded(path, MAX_NOTEBOOK_BYTES, "notebook"), "utf-8-sig")


def read_notebook(path: os.PathLike | str) -> NotebookCode:
    """A notebook's code cells; Unreadable with the reason when it is no notebook the doctor reads."""
    raw = read_notebook_json(path)
    try:
        code = notebook_code(raw)
    except NotFound as exc:
        raise Unreadable(path, str(exc), "open and save it in Jupyter, or check the code as a .py file") from None
    if not code.text.strip():
        raise Unreadable(path, "the notebook has no code cells", "pass the training notebook itself")
    if len(code.text) > MAX_SOURCE_BYTES:
        raise Unreadable(path, f"code cells over {MAX_SOURCE_BYTES // (1024 * 1024)} MiB", "pass the training code")
    if "\x00" in code.text:
        raise Unreadable(path, "a code cell contains NUL bytes, so it is not Python source", "pass the notebook")
    return code


def _decode(path, data: bytes, encoding: str) -> str:
    try:
        return data.decode(encoding)
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        name = "UTF-8" if encoding.replace("-sig", "") in ("utf-8", "utf8") else f"{encoding} (its coding line)"
        raise Unreadable(
            f"{path}:{line}",
            f"not {name} (byte 0x{data[exc.start]:02x} at offset {exc.start})",
            "save the script as UTF-8",
        ) from None
    except LookupError as exc:  # a codec that is not a text encoding (rot13, ...)
        raise Unreadable(
            path,
            f"bad encoding declaration ({exc})",
            "Python refuses this file too: fix or remove the `# coding:` line",
        ) from None


def parse_json(text: str | bytes) -> Any:
    """json.loads for a document from outside: nesting too deep for the parser (`[[[[...` 100,000 deep) is a
    ValueError, as any other text that is not JSON."""
    import json

    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError("nested too deeply") from None


def parse_toml(text: str) -> dict[str, Any]:
    """tomllib.loads for a document from outside: arrays nested too deep for the parser are a ValueError, as any other
    text that is not TOML (tomllib's own error is a ValueError too). A run reads one pyproject.toml for its settings
    and again for its pins: the same text is parsed once (callers only read the tables)."""
    return _parsed_toml(text)


@lru_cache(maxsize=32)
def _parsed_toml(text: str) -> dict[str, Any]:
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - the declared dependency on 3.10
        import tomli as tomllib
    try:
        return tomllib.loads(text)
    except RecursionError:
        raise ValueError("nested too deeply") from None


def is_regular_file(path: Path) -> bool:
    """True for a regular file (links followed); False for anything else, including what cannot be looked at."""
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except (OSError, ValueError):
        return False


def worth_reading(path: Path) -> bool:
    """Something that is not a folder is there, or something is there that cannot be looked at: reading it
    either succeeds or says why (a FIFO, a link loop, permission denied) instead of the file going unmentioned."""
    try:
        return not stat.S_ISDIR(os.stat(path).st_mode)
    except PermissionError:
        return True
    except OSError as exc:
        return exc.errno == errno.ELOOP
    except ValueError:
        return False
