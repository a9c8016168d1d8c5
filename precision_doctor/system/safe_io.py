"""Every file the doctor writes goes through here: reports and snapshots (`-o FILE`), the files `fix` changes,
its undo backups and `fix --undo`'s restores.

The rules, for a repository (and a folder) written by strangers:
- A regular file is replaced whole: a temp file in the target's folder, created exclusively (O_EXCL, O_NOFOLLOW)
  under an unpredictable name, written, fsynced, then renamed over the target. A link planted at any temp name
  is never followed, and a reader never sees half a file.
- A target that is a link is written where it points (as shell redirection does; `/dev/stdout` is one), and the
  link stays a link. Owner, group and mode are kept; so are hard links (see `_write_in_place`).
- A target that is not a regular file (a pipe, a FIFO, a terminal, `/dev/full`) is written in place: no rename,
  which would turn a device node into a file; a write error (ENOSPC) is reported.
- Every failure is one line (InputError, exit 2), and no temp file survives an exception or Ctrl-C. A SIGKILL
  cannot be caught: temp files carry the writer's pid, so a later write to the same target removes the ones
  whose writer is gone.
- With `unchanged_since`, the target's digest is checked again immediately before it is replaced, so an edit
  made meanwhile is never overwritten.
"""

from __future__ import annotations

import errno
import hashlib
import os
import re
import stat
import sys

from ..model.errors import InputError

TEMP_TAG = "precision-doctor"
_TEMP = re.compile(rf"^\.(?P<name>.*)\.{TEMP_TAG}-(?P<pid>\d+)-[A-Za-z0-9_]+\.tmp$")
_OWN_DESCRIPTOR = re.compile(r"^/(?:dev/fd|proc/self/fd)/(\d+)$")
_STANDARD_STREAMS = {"/dev/stdout": 1, "/dev/stderr": 2}
_NAME_ROOM = 160  # of NAME_MAX (255): the rest is the tag, the pid and mkstemp's random part


class NotWritten(InputError):
    """The target changed (or went) since it was checked: refused before a byte of it was written."""


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def write_file(
    target: str | os.PathLike,
    data: bytes,
    *,
    what: str = "",
    unchanged_since: str | None = None,
    new_mode: int | None = None,
) -> None:
    """Write `data` to `target` by the rules above. `what` names the target in errors (default: the path);
    `unchanged_since` is the digest the current content must still have; `new_mode` the mode of a file that does
    not exist yet (default: 0o666 less the umask)."""
    path = os.fspath(target)
    what = what or path
    try:
        fd = _own_descriptor(path)
        if fd is not None:
            _write_descriptor(fd, data)
            return
        try:
            st = os.stat(path)  # follows links, /proc's included
        except FileNotFoundError:
            st = None
        if st is not None and stat.S_ISDIR(st.st_mode):
            raise InputError(f"{what}: is a directory; name a file")
        if st is not None and not stat.S_ISREG(st.st_mode):
            _check_unchanged(path, unchanged_since, what)
            _write_special(path, data)
            return
        real = os.path.realpath(path)  # the file a link points to: it is replaced, the link kept
        if st is not None and not os.access(real, os.W_OK):
            raise InputError(f"{what}: the file is read-only; make it writable first")  # as `>` would refuse
        if st is not None and st.st_nlink > 1:
            _write_in_place(real, data, unchanged_since, what)
            return
        if st is None and unchanged_since is not None:
            raise NotWritten(f"{what}: was removed since it was checked; nothing written")
        _replace(real, data, st, unchanged_since, what, new_mode)
    except OSError as exc:
        raise InputError(_describe(what, path, exc)) from None


def make_folder(path: str | os.PathLike, what: str = "", mode: int = 0o777) -> None:
    """`mkdir -p`, as one line on failure."""
    try:
        os.makedirs(path, mode=mode, exist_ok=True)
    except OSError as exc:
        raise InputError(_describe(what or os.fspath(path), os.fspath(path), exc, folder=True)) from None


def read_bytes(path: str | os.PathLike, what: str = "") -> bytes:
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except OSError as exc:
        raise InputError(f"{what or os.fspath(path)}: cannot be read ({exc.strerror})") from None


# --- the three ways to write ----------------------------------------------------------------------


def _replace(
    real: str, data: bytes, st: os.stat_result | None, unchanged_since: str | None, what: str, new_mode: int | None
) -> None:
    folder, name = os.path.split(real)
    folder = folder or "."
    _remove_stale_temps(folder, name)
    import tempfile  # here: a check that writes no report file never needs it (4 ms of every start)

    fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{name[:_NAME_ROOM]}.{TEMP_TAG}-{os.getpid()}-", suffix=".tmp")
    try:
        try:
            _write_all(fd, data)
            if st is None:
                os.fchmod(fd, _default_mode() if new_mode is None else new_mode)
            else:
                _keep_owner(fd, st)
                os.fchmod(fd, stat.S_IMODE(st.st_mode))  # after chown, which clears set-id bits
            os.fsync(fd)
        finally:
            os.close(fd)
        _check_unchanged(real, unchanged_since, what)
        os.replace(tmp, real)
    except BaseException:
        _unlink_quietly(tmp)
        raise
    _sync_folder(folder)


def _write_in_place(real: str, data: bytes, unchanged_since: str | None, what: str) -> None:
    """A file with hard links is rewritten through its own inode: a rename would leave the other names holding the
    old content. The price is atomicity: a crash in the middle of the write leaves a partial file. So the content
    is complete before the file is opened, the space is reserved before the first byte changes (a full disk fails
    before anything is lost), and `fix` keeps its undo backup first."""
    fd = os.open(real, os.O_WRONLY | os.O_CLOEXEC | os.O_NOCTTY)
    try:
        try:
            os.posix_fallocate(fd, 0, max(len(data), 1))
        except OSError as exc:
            if exc.errno not in (errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS):
                raise
        _check_unchanged(real, unchanged_since, what)
        _write_all(fd, data, at=0)
        os.ftruncate(fd, len(data))
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_special(path: str, data: bytes) -> None:
    """A pipe, FIFO, terminal or device: opened for writing as it is (a FIFO waits for its reader), never replaced
    and never truncated."""
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC | os.O_NOCTTY)
    try:
        _write_all(fd, data)
    finally:
        os.close(fd)


def _write_descriptor(fd: int, data: bytes) -> None:
    """`/dev/stdout` and friends name this process's own descriptors: writing to the descriptor keeps what the shell
    set up (`>>` appends, a pipe stays a pipe)."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    _write_all(fd, data)


def _own_descriptor(path: str) -> int | None:
    """The descriptor `path` names, if it is (or is a link to) /dev/stdout, /dev/stderr, /dev/fd/N or
    /proc/self/fd/N and that descriptor is open here."""
    for _ in range(40):  # the kernel's own limit on links followed
        fd = _STANDARD_STREAMS.get(path)
        if fd is None:
            match = _OWN_DESCRIPTOR.match(path)
            fd = int(match.group(1)) if match else None
        if fd is not None:
            try:
                os.fstat(fd)
            except OSError:
                return None  # not open here: the path is opened as any other
            return fd
        try:
            path = os.path.normpath(os.path.join(os.path.dirname(path), os.readlink(path)))
        except OSError:
            return None
    return None


# --- helpers ---------------------------------------------------------------------------------------


def _write_all(fd: int, data: bytes, at: int | None = None) -> None:
    view = memoryview(data)
    offset = 0
    while offset < len(view):
        if at is None:
            offset += os.write(fd, view[offset:])
        else:
            offset += os.pwrite(fd, view[offset:], at + offset)


def _check_unchanged(path: str, expected: str | None, what: str) -> None:
    if expected is None:
        return
    try:
        with open(path, "rb") as handle:
            current = handle.read()
    except FileNotFoundError:
        raise NotWritten(f"{what}: was removed since it was checked; nothing written") from None
    if digest(current) != expected:
        raise NotWritten(f"{what}: changed since it was checked; nothing written (run `precision-doctor fix` again)")


def _keep_owner(fd: int, st: os.stat_result) -> None:
    """Root keeps the owner and group (a file root rewrites stays its owner's); anyone else keeps the group when
    they may (they are in it), and owns the file otherwise, as any editor that saves by rename does."""
    if os.geteuid() == 0:
        os.fchown(fd, st.st_uid, st.st_gid)
        return
    try:
        os.fchown(fd, -1, st.st_gid)
    except OSError:
        pass


def _default_mode() -> int:
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


def _remove_stale_temps(folder: str, name: str) -> None:
    """Temp files this user left for this target when a writer was killed (its pid is gone)."""
    try:
        entries = os.listdir(folder)
    except OSError:
        return
    for entry in entries:
        match = _killed_writers_temp(entry)
        if not match or match.group("name") != name[:_NAME_ROOM]:
            continue
        full = os.path.join(folder, entry)
        try:
            st = os.lstat(full)
            if stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid():
                os.unlink(full)
        except OSError:
            pass


def _killed_writers_temp(entry: str) -> re.Match | None:
    """A temp file's name, matched, when the writer that made it is gone."""
    match = _TEMP.match(entry)
    return match if match and not _alive(int(match.group("pid"))) else None


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, ValueError):
        return True  # someone else's: leave it
    return True


def _unlink_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def _sync_folder(folder: str) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _describe(what: str, path: str, exc: OSError, folder: bool = False) -> str:
    reason = exc.strerror or type(exc).__name__
    if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        made = exc.filename if folder and exc.filename else path
        parent = os.path.dirname(os.path.realpath(made)) or "."
        action = f"cannot create {made}" if folder else "cannot write"
        return f"{what}: {action} ({reason}): {parent} is not writable here; write somewhere else or make it writable"
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return f"{what}: cannot write ({reason}); free some space and run it again"
    return f"{what}: cannot write ({reason})"


# --- the doctor's own state ----------------------------------------------------------------------------

_FOLDER_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_STATE_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
MAX_STATE_BYTES = 16 * 1024 * 1024  # an undo manifest, or the copy of one script (sources cap those at 2 MiB)


class OwnFolder:
    """A folder of the doctor's own state, held open: every folder in its chain below the state home was opened
    without following a link and is owned by this user, and every name in it is created, read, replaced and
    removed relative to it, never through a link. A planted link or someone else's folder is refused with one line
    (exit 2); a FIFO or a device is never read, and nothing is read past MAX_STATE_BYTES."""

    def __init__(self, fd: int, path: str, label: str = "state folder", setting: str = "XDG_STATE_HOME"):
        self.fd = fd
        self.path = path
        self.label = label  # "state folder", "cache folder": how messages name it
        self.setting = setting  # what the user sets to put it elsewhere

    @classmethod
    def open(
        cls,
        home: str,
        parts: tuple[str, ...],
        create: bool,
        label: str = "state folder",
        setting: str = "XDG_STATE_HOME",
    ) -> OwnFolder | None:
        """`home`/parts[0]/parts[1]/..., made (0700) where missing when `create`; None when one is missing and not
        `create`. `home` itself (the user's XDG state folder) is made as any folder is."""
        if create:
            make_folder(home, what=f"{label} {home}", mode=0o700)
        try:
            fd = os.open(home, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise InputError(_describe(f"{label} {home}", home, exc, folder=True)) from None
        folder = cls(fd, home, label, setting)
        try:
            for name in parts:
                inner = folder.folder(name, create)
                folder.close()
                if inner is None:
                    return None
                folder = inner
        except BaseException:
            folder.close()
            raise
        return folder

    def folder(self, name: str, create: bool) -> OwnFolder | None:
        path = os.path.join(self.path, name)
        if create:
            try:
                os.mkdir(name, 0o700, dir_fd=self.fd)
            except FileExistsError:
                pass
            except OSError as exc:
                raise InputError(_describe(f"{self.label} {path}", path, exc, folder=True)) from None
        try:
            fd = os.open(name, _FOLDER_FLAGS, dir_fd=self.fd)
        except FileNotFoundError:
            return None
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                raise InputError(
                    f"{path}: the doctor's {self.label} is a link or not a folder; remove it (the "
                    f"doctor never writes through a link)"
                ) from None
            raise InputError(_describe(f"{self.label} {path}", path, exc, folder=True)) from None
        owner = os.fstat(fd).st_uid
        if owner != os.geteuid():
            os.close(fd)
            raise InputError(
                f"{path}: the doctor's {self.label} belongs to another user (uid {owner}); remove it "
                f"or set {self.setting} to a folder of yours"
            )
        return OwnFolder(fd, path, self.label, self.setting)

    def writable_by_others(self) -> bool:
        return bool(os.fstat(self.fd).st_mode & 0o022)

    def remove_stale_temps(self) -> None:
        """Temp files of writers that were killed (their pid is gone)."""
        for entry in self.names():
            if _killed_writers_temp(entry):
                self.remove(entry)

    def names(self) -> list[str]:
        try:
            return sorted(entry.name for entry in os.scandir(self.fd))
        except OSError:
            return []

    def read(self, name: str, limit: int = MAX_STATE_BYTES, private: bool = False) -> bytes:
        """`private`: only a file this user owns that no one else may write (read as the doctor's own trusted
        data: a cache entry)."""
        path = os.path.join(self.path, name)
        try:
            fd = os.open(name, _STATE_READ_FLAGS, dir_fd=self.fd)
        except OSError as exc:
            reason = "a link" if exc.errno == errno.ELOOP else (exc.strerror or type(exc).__name__).lower()
            raise InputError(f"{path}: cannot be read ({reason})") from None
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                raise InputError(f"{path}: not a regular file; the doctor's state was tampered with")
            if private and (info.st_uid != os.geteuid() or info.st_mode & 0o022):
                raise InputError(f"{path}: not this user's own, or writable by others")
            if info.st_size > limit:
                raise InputError(f"{path}: larger than the doctor ever writes there; the state was tampered with")
            chunks, size = [], 0
            while size <= limit:
                chunk = os.read(fd, min(1 << 20, limit + 1 - size))
                if not chunk:
                    break
                chunks.append(chunk)
                size += len(chunk)
            if size > limit:
                raise InputError(f"{path}: larger than the doctor ever writes there; the state was tampered with")
            return b"".join(chunks)
        finally:
            os.close(fd)

    def write(self, name: str, data: bytes, durable: bool = True) -> None:
        """`name` replaced whole (0600): a temp file created exclusively beside it, then renamed over it; a link
        at `name` is replaced, never followed. `durable`: on the disk before the rename (undo data; a cache entry
        torn by a crash is only a miss)."""
        import secrets

        temp = f".{name}.{TEMP_TAG}-{os.getpid()}-{secrets.token_hex(6)}.tmp"
        path = os.path.join(self.path, name)
        try:
            fd = os.open(
                temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=self.fd
            )
            try:
                try:
                    _write_all(fd, data)
                    if durable:
                        os.fsync(fd)
                finally:
                    os.close(fd)
                os.replace(temp, name, src_dir_fd=self.fd, dst_dir_fd=self.fd)
            except BaseException:
                try:
                    os.unlink(temp, dir_fd=self.fd)
                except OSError:
                    pass
                raise
        except OSError as exc:
            raise InputError(_describe(f"{self.label} {path}", path, exc)) from None

    def remove(self, name: str, folder: bool = False) -> None:
        try:
            if folder:
                os.rmdir(name, dir_fd=self.fd)
            else:
                os.unlink(name, dir_fd=self.fd)
        except OSError:
            pass

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> OwnFolder:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
