"""What a probe read: every file, folder listing, link and environment variable, recorded while it runs, so that
a cached answer (system/content_cache.py) is trusted exactly as long as every one of them is unchanged.

Recording interposes on the functions every read goes through (os.stat, os.lstat, os.open, open, os.listdir,
os.scandir, os.readlink, os.environ's lookups) for the thread that records, so a read a probe gains later is
recorded without anyone remembering to: the manifest is complete by construction. A file looked for and not found
is recorded as much as one read (a config created later changes the answer). Memo tables that keep a value for
several scripts (script.py's sibling modules and folder listings) hold the reads behind it and replay them.
"""

from __future__ import annotations

import builtins
import functools
import hashlib
import io
import itertools
import os
import pathlib
import stat
import threading
import weakref
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, TypeVar

T = TypeVar("T")

# (kind, key): kind is stat | lstat | open | list (key: the path as the probe named it, made absolute without
# resolving `..`, which the kernel resolves through links) or env | env* (os.environ: a name, or all of it) or
# jobenv | jobenv* (the job's environment the probe was given)
Read = tuple[str, str]
Manifest = tuple[tuple[str, str, Any], ...]  # each read with its fingerprint

MAX_HASHED_BYTES = 16 * 1024 * 1024  # larger files (weights a probe only peeks into) by size, time and inode


_moments = itertools.count()  # orders frames' starts and fingerprints


class Frame:
    __slots__ = ("reads", "seen", "unsafe", "start", "kept")

    def __init__(self) -> None:
        self.start = next(_moments)  # fingerprints taken before this may stand for its reads
        self.reads: set[Read] = set()
        self.seen: dict[Read, Any] = {}  # the fingerprint of what the probe itself got, where known as it read
        self.unsafe = ""  # why what was read cannot be fingerprinted (then nothing is cached)
        # the manifests of cache entries used inside it, each checked unchanged when used: their reads, kept whole
        # (a folder run's answer uses a thousand entries of fifty reads each; adding them one by one cost 0.1 s)
        self.kept: list[Manifest] = []

    def saw(self, read: Read, got: Any) -> None:
        self.reads.add(read)
        before = self.seen.setdefault(read, got)
        if before != got:
            self.unsafe = f"{read[1]} changed while it was read"

    def merge(self, other: Frame) -> None:
        self.reads |= other.reads
        for read, got in other.seen.items():
            self.saw(read, got)
        self.kept.extend(other.kept)
        self.unsafe = self.unsafe or other.unsafe


_OWN_FILES = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_frames: list[Frame] = []
_owner: list[int | None] = [None]  # the thread that records: another thread's reads (a progress bar) are not its
_real: dict[str, Any] = {}


def _note(kind: str, path: Any, dir_fd: Any = None, got: Any = None) -> None:
    """Record a read of `path` (with `got`, the fingerprint of what it gave, when known as it is read)."""
    if not _frames or threading.get_ident() != _owner[0]:
        return
    if isinstance(path, int):  # a descriptor opened before (fstat, scandir(fd)): its open was recorded
        if kind == "list":
            _frames[-1].unsafe = "a folder listed by descriptor"
        return
    if dir_fd is not None:
        _frames[-1].unsafe = "a path relative to a folder descriptor"
        return
    try:
        name = os.fsdecode(os.fspath(path))
    except TypeError:
        return  # the call itself will refuse it
    if not os.path.isabs(name):
        try:
            name = os.path.join(os.getcwd(), name)
        except OSError:  # the working directory is gone: the read stands, its entry is not kept
            _frames[-1].unsafe = "the working directory cannot be read"
            return
    if name.startswith(_OWN_FILES):  # the doctor's own code and data: in every cache key already
        return
    if ".." not in name.split(os.sep):  # `a/../b` is resolved through links by the kernel: kept as named
        name = os.path.normpath(name)
    if got is None:
        _frames[-1].reads.add((kind, name))
    else:
        _frames[-1].saw((kind, name), got)


def saw_content(path: Any, data: bytes) -> None:
    """A file's whole content as a probe read it (system/sources.py): the entry is kept only if the file still
    holds it when the entry is written, so an edit made while the probe ran is never paired with the old facts."""
    if _frames and threading.get_ident() == _owner[0] and len(data) <= MAX_HASHED_BYTES:
        _note("open", path, got=("content", hashlib.blake2b(data, digest_size=20).hexdigest()))


def note(kind: str, path: Any, got: Any = None) -> None:
    """A read of `path` made earlier and reused now (a memo table's folder listing), with what it gave then where
    known: an entry is then kept only if it still gives that when written."""
    _note(kind, path, got=got)


def _listed(path: Any) -> list:
    """A folder's entries, listed once, past any recording (raises OSError as os.scandir does)."""
    with _real.get("scandir", os.scandir)(path) as found:
        return list(found)


def list_folder(path: Any) -> tuple[list[str], str]:
    """A folder's names and their listing_digest, as one listing (raises OSError as os.listdir does)."""
    entries = _listed(path)
    return [os.fsdecode(e.name) for e in entries], listing_digest(entries)


def note_read(kind: str, key: str) -> None:
    """A read made other than through the interposed functions (a variable looked up, a time asked for)."""
    if _frames and threading.get_ident() == _owner[0]:
        _frames[-1].reads.add((kind, key))


def note_manifest(entries: Manifest) -> None:
    """A cache entry's reads, each with what it gave, found unchanged just now: part of the computation using it."""
    if _frames and threading.get_ident() == _owner[0]:
        _frames[-1].kept.append(entries)


def modified_time(path: str) -> int:
    """A file's modification time (ns), recorded as read: a probe that orders files by it (the newest snapshot)
    gives another answer when it changes."""
    st = os.stat(path)
    note_read("mtime", os.path.abspath(path))
    return st.st_mtime_ns


def not_cacheable(why: str) -> None:
    """What the probe learnt cannot be fingerprinted (it came over the network): nothing recorded now is cached."""
    if _frames and threading.get_ident() == _owner[0]:
        _frames[-1].unsafe = why


def worker_frame_state(frame: Frame | None) -> tuple | None:
    """What a worker process recorded while it computed one item, to send back (None: it recorded nothing)."""
    return None if frame is None else (frame.reads, frame.seen, frame.unsafe, frame.kept)


def merge_worker_reads(state: tuple | None) -> None:
    """A worker process's reads for one item, as if this process had made them: a run computed in workers is then
    known as fully as one computed here. A worker that recorded nothing (started without this process's recording)
    leaves the run's reads unknown."""
    if not recording_now():
        return
    if state is None:
        not_cacheable("computed in a worker process that did not record its reads")
        return
    frame = Frame()
    frame.reads, frame.seen, frame.unsafe, frame.kept = state  # (one item's reads: the worker saw each once)
    _frames[-1].merge(frame)


def recording_now() -> bool:
    return bool(_frames) and threading.get_ident() == _owner[0]


class _Entries:
    """What os.scandir gives (an iterator that is also a context manager), over entries already listed."""

    def __init__(self, entries: list) -> None:
        self._rest = iter(entries)

    def __iter__(self) -> _Entries:
        return self

    def __next__(self) -> Any:
        return next(self._rest)

    def __enter__(self) -> _Entries:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        self._rest = iter(())


def _install() -> None:
    real: dict[str, Any] = {name: getattr(os, name) for name in ("stat", "lstat", "open", "listdir", "scandir")}
    real["readlink"] = os.readlink
    real["file_open"] = builtins.open
    environ_class: Any = type(os.environ)
    real["env_getitem"], real["env_iter"] = environ_class.__getitem__, environ_class.__iter__
    _real.update(real)

    def stat_(path, *args, dir_fd=None, follow_symlinks=True):
        kind = "stat" if follow_symlinks else "lstat"
        try:
            st = real["stat"](path, *args, dir_fd=dir_fd, follow_symlinks=follow_symlinks)
        except OSError as exc:
            _note(kind, path, dir_fd, ("error", exc.errno))
            raise
        _note(kind, path, dir_fd, _link_seen(path, dir_fd) if stat.S_ISLNK(st.st_mode) else _kind_and_size(st))
        return st

    def _link_seen(path, dir_fd) -> Any:
        """A link as it was when looked at (its target), so that one retargeted later in the run is not recorded
        with the new target beside what the run made of the old."""
        try:
            return ("link", os.fsdecode(real["readlink"](path, dir_fd=dir_fd)))
        except (OSError, TypeError, ValueError):
            return None

    def lstat_(path, *args, dir_fd=None):
        return stat_(path, *args, dir_fd=dir_fd, follow_symlinks=False)

    def open_(path, flags, *args, dir_fd=None, **kwargs):
        _note("open" if flags & (os.O_WRONLY | os.O_RDWR) == 0 else "written", path, dir_fd)
        return real["open"](path, flags, *args, dir_fd=dir_fd, **kwargs)

    def listed(path: Any) -> list:
        """The folder's entries, recorded with what they were as listed."""
        try:
            entries = _listed(path)
        except OSError as exc:
            _note("list", path, got=("error", exc.errno))
            raise
        _note("list", path, got=listing_digest(entries))
        return entries

    def listdir_(path="."):
        if isinstance(path, int):  # a descriptor: refused for the cache by _note
            _note("list", path)
            return real["listdir"](path)
        return [e.name for e in listed(path)]

    def scandir_(path="."):
        if isinstance(path, int):
            _note("list", path)
            return real["scandir"](path)
        return _Entries(listed(path))

    def readlink_(path, *args, dir_fd=None):
        try:
            target = real["readlink"](path, *args, dir_fd=dir_fd)
        except OSError:
            _note("lstat", path, dir_fd)
            raise
        _note("lstat", path, dir_fd, ("link", os.fsdecode(target)))
        return target

    def file_open(file, mode="r", *args, **kwargs):
        _note("open" if set(str(mode)) <= set("rbt") else "written", file)
        return real["file_open"](file, mode, *args, **kwargs)

    def env_getitem(self, key):
        if self is os.environ:
            note_read("env", key)
        return real["env_getitem"](self, key)

    def env_iter(self):
        if self is os.environ:
            note_read("env*", "")
        return real["env_iter"](self)

    wrappers: dict[str, Any] = {"stat": stat_, "lstat": lstat_, "open": open_, "listdir": listdir_}
    wrappers.update(scandir=scandir_, readlink=readlink_)
    for name, wrapper in wrappers.items():
        setattr(os, name, wrapper)
    builtins.open = io.open = file_open
    environ_class.__getitem__, environ_class.__iter__ = env_getitem, env_iter
    accessor: Any = getattr(pathlib, "_NormalAccessor", None)  # Python 3.10 bound these at import
    if accessor is not None:
        wrappers["open"] = file_open
        real["accessor_class"] = accessor
        real["accessor"] = {n: accessor.__dict__[n] for n in wrappers if n in accessor.__dict__}
        for n in real["accessor"]:
            setattr(accessor, n, staticmethod(wrappers[n]))


def _uninstall() -> None:
    for name in ("stat", "lstat", "open", "listdir", "scandir", "readlink"):
        setattr(os, name, _real[name])
    builtins.open = io.open = _real["file_open"]
    environ_class: Any = type(os.environ)
    environ_class.__getitem__, environ_class.__iter__ = _real["env_getitem"], _real["env_iter"]
    if "accessor" in _real:
        for n, f in _real["accessor"].items():
            setattr(_real["accessor_class"], n, f)
    _real.clear()


@contextmanager
def recording() -> Iterator[Frame]:
    """Record this thread's reads into a new frame; on leaving, they are added to the frame around it (a memo
    value computed inside a probe is part of that probe's reads)."""
    if _frames and threading.get_ident() != _owner[0]:
        raise RuntimeError("reads are recorded by one thread at a time")
    frame = Frame()
    outermost = not _frames
    if outermost:
        _owner[0] = threading.get_ident()
        _install()
    _frames.append(frame)
    try:
        yield frame
    finally:
        _frames.pop()
        if _frames:
            _frames[-1].merge(frame)
        else:
            _uninstall()
            _owner[0] = None


@contextmanager
def unrecorded() -> Iterator[None]:
    """The doctor's own files (its cache entries), read or written inside a recording: not the computation's."""
    owner = _owner[0]
    _owner[0] = None
    try:
        yield
    finally:
        _owner[0] = owner


@contextmanager
def nested() -> Iterator[Frame | None]:
    """A frame of its own for a memo value's reads when a recording is on (None when none is)."""
    if not recording_now():
        yield None
        return
    with recording() as frame:
        yield frame


def replay(frame: Frame | None) -> None:
    """A memo value's reads, as if made again now."""
    if frame is not None and recording_now():
        _frames[-1].merge(frame)


class _Memo(dict):
    """A remembered() memo, held weakly by forget() (a resolver's own memos go with it)."""

    __slots__ = ("__weakref__",)
    __hash__ = object.__hash__  # type: ignore[assignment]  # by identity: a set of memos, not of their contents


_memos: weakref.WeakSet[_Memo] = weakref.WeakSet()


def remembered(compute: Callable[..., T]) -> Callable[..., T]:
    """A memo of `compute` by its (hashable) arguments that keeps the reads behind each value and replays them
    whenever it serves one, so a value computed for one cached answer is never missing from the next one's reads."""
    memo = _Memo()  # args -> (value, the frame of its reads)
    _memos.add(memo)

    @functools.wraps(compute)
    def served(*args):
        kept = memo.get(args)
        if kept is None or (recording_now() and kept[1] is None):
            with nested() as frame:
                value = compute(*args)
            kept = memo[args] = (value, frame)
        else:
            replay(kept[1])
        return kept[0]

    served.cache_clear = memo.clear  # type: ignore[attr-defined]
    return served


class RecordedEnviron(Mapping):
    """The job's environment as a probe sees it: each variable looked up is recorded (`jobenv`), and reading all of
    them records the whole. `digest` stands for the contents in keys without reading them."""

    def __init__(self, variables: Mapping[str, str]):
        self._variables = dict(variables)
        self.digest = hashlib.sha256(repr(sorted(self._variables.items())).encode()).hexdigest()

    def __getitem__(self, key: str) -> str:
        note_read("jobenv", key)
        return self._variables[key]

    def __iter__(self):
        note_read("jobenv*", "")
        return iter(self._variables)

    def __len__(self) -> int:
        note_read("jobenv*", "")
        return len(self._variables)

    def __reduce__(self):
        return (RecordedEnviron, (self._variables,))


# --- fingerprints ------------------------------------------------------------------------------------------------


def manifest(frame: Frame, job_env: Mapping[str, str] | None, skip: tuple[str, ...] = ()) -> Manifest | None:
    """Each read with its fingerprint: what the probe itself got where that is known as it read (a file's content
    hash, a listing), else taken now; None when something read cannot be fingerprinted. A file that changed after
    the probe read it keeps the fingerprint of what was read, so the entry is a miss from then on (the content is
    not hashed a second time: on a whole run's answer that doubled the hashing). Reads of the kinds in `skip` are
    left out (a whole run's answer: the job environment follows from what it read)."""
    if frame.unsafe or any(kind == "written" for kind, _ in frame.reads):
        return None
    seen = dict(frame.seen)
    if frame.kept:
        for kind, key, then in set().union(*frame.kept):
            if seen.setdefault((kind, key), then) != then:
                return None  # two entries, or an entry and this computation, saw it differently
    out = []
    for kind, key in sorted(frame.reads | seen.keys()):
        if kind in skip:
            continue
        got = seen.get((kind, key), _UNSEEN)
        out.append((kind, key, _fingerprint_once(kind, key, job_env, before=frame.start) if got is _UNSEEN else got))
    return tuple(out)


_UNSEEN = object()


# this run's fingerprints (forget() empties it), each with the moment it was taken: the entries of a
# folder's scripts share the libraries, requirements and folders they read, fingerprinted once
_checked: dict[tuple, tuple[Any, int]] = {}


def _fingerprint_once(kind: str, key: str, job_env: Mapping[str, str] | None, before: int | None = None) -> Any:
    """fingerprint(), taken once a run; with `before`, only one taken before that moment counts (a manifest may
    record what a file gave before a computation read it, never after: a change in between is then a miss)."""
    memo = (kind, key, id(job_env)) if kind.startswith("jobenv") else (kind, key)
    found = _checked.get(memo)
    if found is not None and (before is None or found[1] < before):
        return found[0]
    now = fingerprint(kind, key, job_env)
    _checked[memo] = (now, next(_moments))
    return now


def unchanged(entries: Manifest, job_env: Mapping[str, str] | None) -> bool:
    """Every read gives what it gave when the manifest was taken (as first fingerprinted this run). The loop is
    the cached run's inner loop: a folder's entries hold tens of thousands of reads, most already fingerprinted."""
    known = _checked.get
    for kind, key, then in entries:
        found = None if kind.startswith("jobenv") else known((kind, key))
        if (found[0] if found is not None else _fingerprint_once(kind, key, job_env)) != then:
            return False
    return True


def forget() -> None:
    """Files may have changed since the last run in this process: its fingerprints and memo values go."""
    _checked.clear()
    for memo in list(_memos):
        memo.clear()


def fingerprint(kind: str, key: str, job_env: Mapping[str, str] | None) -> Any:
    """What a read gave, in a few bytes: a file's content hash, a folder's names, a variable's value, or the error."""
    if kind == "env":  # values by their hash: a cache entry never holds a token
        return _value_digest(os.environ.get(key))
    if kind == "env*":
        return _digest(repr(sorted(os.environ.items())).encode())
    if kind in ("jobenv", "jobenv*"):
        plain = job_env._variables if isinstance(job_env, RecordedEnviron) else job_env
        if plain is None:
            return None
        return _value_digest(plain.get(key)) if kind == "jobenv" else _digest(repr(sorted(plain.items())).encode())
    stat_ = _real.get("stat", os.stat)
    try:
        if kind == "mtime":
            return stat_(key).st_mtime_ns
        if kind == "list":
            return listing_digest(_listed(key))
        if kind == "lstat":
            st = _real.get("lstat", os.lstat)(key)
            if stat.S_ISLNK(st.st_mode):
                return ("link", _real.get("readlink", os.readlink)(key))
            return _kind_and_size(st)
        st = stat_(key)
        if kind == "stat" or not stat.S_ISREG(st.st_mode):
            return _kind_and_size(st)
        if st.st_size > MAX_HASHED_BYTES:
            return ("large", st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)  # a write moves the ctime
        return ("content", _content_digest(key))
    except OSError as exc:
        return ("error", exc.errno)
    except ValueError:
        return ("error", "invalid name")


def listing_digest(entries: list) -> str:
    """A folder's names, each with what it is (a link, a folder, anything else), in a few bytes. "/" cannot be
    part of a name, so `helper.py@` (a file) and `helper.py` (a link) never read alike."""
    names = sorted(os.fsdecode(e.name) + ("/l" if e.is_symlink() else "/d" if e.is_dir() else "/f") for e in entries)
    return _digest("\0".join(names).encode(errors="surrogateescape"))


def _kind_and_size(st: os.stat_result) -> tuple:
    return (stat.S_IFMT(st.st_mode), st.st_size if stat.S_ISREG(st.st_mode) else 0)


def _content_digest(path: str) -> str:
    fd = _real.get("open", os.open)(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    try:
        h = hashlib.blake2b(digest_size=20)
        while chunk := os.read(fd, 1 << 20):
            h.update(chunk)
        return h.hexdigest()
    finally:
        os.close(fd)


def _value_digest(value: str | None) -> str | None:
    return None if value is None else _digest(value.encode(errors="surrogateescape"))


def _digest(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=20).hexdigest()
