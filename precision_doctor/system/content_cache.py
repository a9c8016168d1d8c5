"""The content cache: each file's probed facts, kept between runs and reused while nothing they were read from has
changed.

What is cached is the static, per-file part of a check (the script's AST facts, the sibling modules it imports,
the recipes and configs it reads, the checkpoints' config.json): the largest part of a run's cost. An entry is
found by what the probe was asked (the path, the launch's script arguments, the job environment's source, the
working directory, --model-config, the doctor's own code and Python) and trusted only while every read the probe
made gives what it gave then (system/reads.py: file contents, files looked for and missing, folder listings,
environment variables). A folder run judged where its scripts are probed also keeps each script's whole answer
(facts, versions, verdict), found by what the judge was given too (the run's machine, launch, job, launch plan and
rules); machine probes are never cached.

Entries live in the user's cache folder ($XDG_CACHE_HOME/precision-doctor, or --cache-dir), never in a
repository being checked: a cache planted in a checked tree is refused, as the doctor runs nothing from it.
Folders are made 0700 and must belong to the user; an entry is replaced whole (written beside it, then renamed),
so concurrent runs never see half of one; an entry that cannot be read or decoded is a miss. Entries not written
for UNUSED_DAYS are dropped, once a day at most, before a run's first write (a hit does not renew one: an entry in
daily use is rebuilt once a month).
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from ..model.errors import InputError
from . import reads

if TYPE_CHECKING:
    from .safe_io import OwnFolder

T = TypeVar("T")  # safe_io and pickle are imported when a cache is used: --no-cache and the API pay nothing

FORMAT = "facts-1"  # the entries' folder: a change to what an entry holds takes a new name
MAX_ENTRY_BYTES = 16 * 1024 * 1024
UNUSED_DAYS = 30  # an entry not written again for this long goes (a hit does not touch it: it is rebuilt once)
_PRUNED = ".pruned"  # its time: when entries were last pruned (at most once a day)


class _Settings:
    folder: str | None = None  # --cache-dir; None: the user's cache folder
    enabled = False  # the command line turns it on (the API and the tests' in-process runs read afresh)


_settings = _Settings()
_open: list[OwnFolder | None] = [None]
_untidy = [False]  # the open folder has not been tidied this run (done before its first write)
_counts: dict[tuple[str, str], int] = {}  # (kind, "hits" | "misses") -> how many


def configure(enabled: bool, folder: str | None = None) -> None:
    """What the command line asked: --no-cache, --cache-dir. Takes effect at the next prepare()."""
    close()
    _settings.enabled, _settings.folder = enabled, folder


def cache_home() -> tuple[str, tuple[str, ...]]:
    """The folder that holds the entries, as (a folder, the names below it the doctor makes and owns)."""
    from .state import APP

    if _settings.folder:
        return os.path.abspath(os.path.expanduser(_settings.folder)), (FORMAT,)
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    home = xdg if os.path.isabs(xdg) else os.path.join(os.path.expanduser("~"), ".cache")
    return home, (APP, FORMAT)


def prepare(create: bool = True) -> None:
    """Open the cache for this run, once the run's trees are known (a cache inside one is refused). A folder the
    user named (--cache-dir) that cannot be used is bad input (exit 2); the default one is left unused, said once
    on stderr, and the run goes on reading every file afresh."""
    if not _settings.enabled or _open[0] is not None:
        return
    try:
        with reads.unrecorded():  # the cache's own folder, opened inside a recorded run: not what the run read
            _open[0] = _open_folder(create)
    except InputError as exc:
        if _settings.folder:
            raise
        _settings.enabled = False
        print(f"precision-doctor: running without the content cache: {exc}", file=sys.stderr)


def _open_folder(create: bool) -> OwnFolder | None:
    from .programs import checked_trees, inside
    from .safe_io import OwnFolder

    home, parts = cache_home()
    where = os.path.join(home, *parts)
    real = os.path.realpath(where)
    tree = next((t for t in checked_trees() if inside(real, [t])), None)
    if tree is not None:
        raise InputError(
            f"the cache folder {where} is inside {tree}, which this run checks or stands in: the doctor loads "
            f"nothing of its own from there; use a folder outside it (--cache-dir, XDG_CACHE_HOME) or --no-cache"
        )
    folder = OwnFolder.open(home, parts, create=create, label="cache folder", setting="--cache-dir or XDG_CACHE_HOME")
    if folder is not None and folder.writable_by_others():
        folder.close()
        raise InputError(f"the cache folder {where} is writable by other users; chmod 700 it, or use another")
    _untidy[0] = folder is not None
    return folder


def close() -> None:
    if _open[0] is not None:
        _open[0].close()
        _open[0] = None


def counts(kind: str = "") -> dict[str, int]:
    """Hits and misses in this process, of one kind of entry ("probe", "judged" ...) or of all (a run's workers
    count their own)."""
    return {
        outcome: sum(n for (k, o), n in _counts.items() if o == outcome and kind in ("", k))
        for outcome in ("hits", "misses")
    }


MISS = object()  # what peek() gives when there is no entry to use


def is_open() -> bool:
    return _open[0] is not None


def open_folder() -> OwnFolder | None:
    """The cache folder this run uses, once prepare() opened it."""
    return _open[0]


def digest(value: object) -> str | None:
    """A digest of value, for a key that must change whenever any part of value does (a pure function's whole
    input, such as a judge's context); None where value does not pickle. Pickled without a memo, so the bytes do
    not depend on which equal parts are one object, and with every set in sorted order (a set's own order follows
    the process's string hash seed). Equal values built differently may still differ: a miss, never a wrong hit."""
    import io
    import pickle

    out = io.BytesIO()
    pickler = pickle.Pickler(out, protocol=pickle.HIGHEST_PROTOCOL)
    pickler.fast = True  # no memo: identity-free bytes (a cycle raises, and the value goes undigested)
    try:
        pickler.dump(_canonical(value))
    except Exception:  # noqa: BLE001
        return None
    return hashlib.blake2b(out.getbuffer(), digest_size=32).hexdigest()


def _canonical(value: Any) -> Any:
    """value with each set a sorted tuple, each record (dataclass) its class name and fields, at any depth."""
    if isinstance(value, (set, frozenset)):
        items = [_canonical(v) for v in value]
        try:
            return ("set", tuple(sorted(items)))
        except TypeError:
            return ("set", tuple(sorted(items, key=repr)))
    if type(value) in (list, tuple):
        return type(value)(_canonical(v) for v in value)
    if type(value) is dict:
        return {k: _canonical(v) for k, v in value.items()}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = tuple((f.name, _canonical(getattr(value, f.name))) for f in dataclasses.fields(value))
        return (type(value).__qualname__, fields)
    return value


def peek(kind: str, asked: tuple, job_env: Mapping[str, str] | None, returns: type | tuple = object) -> Any:
    """What cached() would give without computing: the entry's value while nothing it read has changed, else
    MISS (a run decides which files need workers before starting them)."""
    return _peek_entry(kind, entry_name(kind, asked), job_env, returns)


def _peek_entry(kind: str, name: str, job_env: Mapping[str, str] | None, returns: type | tuple) -> Any:
    folder = _open[0]
    if folder is None:
        return MISS
    found = _hit(folder, name, job_env, returns)
    if found is None:
        return MISS
    _counts[kind, "hits"] = _counts.get((kind, "hits"), 0) + 1
    manifest, value = found
    reads.note_manifest(manifest)  # inside a recorded computation: its reads count there too, as they were
    return value


def cached(
    kind: str, asked: tuple, job_env: Mapping[str, str] | None, compute: Callable[[], T], returns: type | tuple = object
) -> T:
    """compute(), or what it gave before while nothing it read has changed. `asked` is everything compute depends
    on besides what it reads (hashed by repr); `job_env` the job's environment it reads variables from; `returns`
    the type(s) of what compute gives (an entry holding anything else is a miss)."""
    folder = _open[0]
    if folder is None:
        return compute()
    name = entry_name(kind, asked)
    found = _peek_entry(kind, name, job_env, returns)
    if found is not MISS:
        return found
    _counts[kind, "misses"] = _counts.get((kind, "misses"), 0) + 1
    with reads.recording() as frame:
        value = compute()
    manifest = reads.manifest(frame, job_env)  # None: a file changed while it was read, or cannot be fingerprinted
    if manifest is not None:
        _store(folder, name, (doctor_fingerprint(), name, manifest, value))
    return value


def entry_name(kind: str, asked: tuple) -> str:
    """An entry's name: what was asked, where (the doctor's own version is checked inside the entry, so an upgrade
    replaces entries instead of leaving them behind)."""
    return hashlib.sha256(repr((FORMAT, os.getcwd(), kind, asked)).encode()).hexdigest()


def _hit(folder: OwnFolder, name: str, job_env: Mapping[str, str] | None, returns: type | tuple) -> Any:
    """(manifest, value) of a well-formed entry of this doctor whose reads are all unchanged, else None."""
    import pickle

    try:
        with reads.unrecorded():
            data = folder.read(name, MAX_ENTRY_BYTES, private=True)
        entry = pickle.loads(data)
        fingerprint, stored_as, manifest, value = entry
        if fingerprint != doctor_fingerprint() or stored_as != name or not isinstance(value, returns):
            return None  # another release's, another question's (a file renamed into place), or another type
        if not isinstance(manifest, tuple) or not all(
            isinstance(m, tuple) and len(m) == 3 and isinstance(m[0], str) and isinstance(m[1], str) for m in manifest
        ):
            return None
        return (manifest, value) if reads.unchanged(manifest, job_env) else None
    except Exception:  # missing, not the user's own, torn or foreign: a miss, replaced below  # noqa: BLE001
        return None


def _store(folder: OwnFolder, name: str, entry: tuple) -> None:
    import pickle

    try:
        data = pickle.dumps(entry, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception:  # a value that does not pickle is recomputed next time  # noqa: BLE001
        return
    store_bytes(folder, name, data)


def store_bytes(folder: OwnFolder, name: str, data: bytes) -> None:
    """An entry written whole, or not at all (too large, a full disk, a read-only cache)."""
    if len(data) > MAX_ENTRY_BYTES:
        return
    try:
        with reads.unrecorded():
            if _untidy[0]:
                _untidy[0] = False
                try:
                    _tidy(folder)
                except InputError:  # a mark it cannot replace: the entry is written all the same
                    pass
            folder.write(name, data, durable=False)  # a torn entry after a crash is a miss, not worth an fsync each
    except InputError:
        pass  # a full disk or a read-only cache: the run goes on uncached


def _tidy(folder: OwnFolder) -> None:
    """Before a run's first write (a run that only reads lists nothing: on a large cache that listing would cost
    more than its answers): killed writers' temp files, and once a day the entries not written for UNUSED_DAYS."""
    import stat
    import time

    folder.remove_stale_temps()
    now = time.time()
    try:
        mark = os.stat(_PRUNED, dir_fd=folder.fd, follow_symlinks=False)
    except OSError:
        mark = None
    if mark is not None and not stat.S_ISREG(mark.st_mode):  # planted: removed (an empty folder too), no pruning now
        folder.remove(_PRUNED, folder=stat.S_ISDIR(mark.st_mode))
        return
    if mark is not None and 0 <= now - mark.st_mtime < 86400:  # a mark from the future (a restored cache) is stale
        return
    cutoff = now - UNUSED_DAYS * 86400
    for name in folder.names():
        if name.startswith("."):
            continue
        try:
            st = os.stat(name, dir_fd=folder.fd, follow_symlinks=False)
        except OSError:
            continue
        if stat.S_ISREG(st.st_mode) and st.st_mtime < cutoff:
            folder.remove(name)
    folder.write(_PRUNED, b"", durable=False)


_FINGERPRINT: list[str] = []


def doctor_files(with_folders: bool = False) -> list[str]:
    """The doctor's own code and data files, what its fingerprint covers (and, with `with_folders`, the folders
    that hold them: a file added changes its folder's)."""
    package = str(Path(__file__).resolve().parent.parent)
    out: list[str] = []
    for root, dirs, files in os.walk(package):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        out += [root] if with_folders else []
        out += [os.path.join(root, f) for f in sorted(files) if f.endswith((".py", ".json"))]
    return out


def doctor_fingerprint() -> str:
    """The doctor's own code and data (each file's name, size and time), Python's version and the YAML parser it
    reads recipes with: a new release, an edit or a reinstall starts afresh."""
    if not _FINGERPRINT:
        from importlib.util import find_spec

        package = Path(__file__).resolve().parent.parent
        parts: list[tuple] = []
        for path in doctor_files():
            st = os.stat(path)
            parts.append((os.path.relpath(path, package), st.st_size, st.st_mtime_ns))
        spec = find_spec("yaml")
        origin = spec.origin if spec else None
        parts.append(("yaml", origin, os.stat(origin).st_mtime_ns if origin else None))
        parts.append(("python", sys.version))
        _FINGERPRINT.append(hashlib.sha256(repr(parts).encode()).hexdigest())
    return _FINGERPRINT[0]
