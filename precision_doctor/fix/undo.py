"""Undo data for `fix`: before a file is first changed, a byte-for-byte copy of it goes into the run's undo folder,
with a manifest of what was copied and of every digest `fix` wrote since. So the backup exists whatever ends the run
(Ctrl-C, Ctrl-D, a refusal, a kill) after some fixes, and `precision-doctor fix --undo` restores the files byte for
byte from any directory, instead of a patch that fails when two fixes touched one line.

The undo folders live in the user's state directory, `$XDG_STATE_HOME/precision-doctor/undo/<run>/` (default
`~/.local/state/precision-doctor/undo/<run>/`), never in the checked tree: a repository written by someone else
could plant links there. Each folder of that chain is opened without following links and must be the user's own
(safe_io.OwnFolder). A run that wrote nothing (another run changed the file first) keeps no undo folder.
"""

from __future__ import annotations

import json
import os
import shlex
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from ..model.errors import InputError
from ..system import safe_io
from ..system.safe_io import OwnFolder
from ..system.state import APP, checked_state_home, state_home

UNDO = "undo"
MANIFEST = "manifest.json"
FILES = "files"
_PROJECT_MARKERS = ("pyproject.toml", ".git")


def undo_folder_path() -> str:
    return os.path.join(state_home(), APP, UNDO)


def project_root(path: Path) -> Path:
    """The nearest folder at or above `path` (a file's folder, or a folder) with a pyproject.toml or .git."""
    start = path if path.is_dir() else path.parent
    for folder in (start, *start.parents):
        if any((folder / marker).exists() for marker in _PROJECT_MARKERS):
            return folder
    return start


def _stamp() -> str:
    return datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S.%fZ")


@dataclass
class Backup:
    """One fix run's undo data, written as the run goes: its folder is made when the first file is kept."""

    stamp: str = field(default_factory=lambda: f"{_stamp()}-{os.getpid()}")
    manifest: dict = field(default_factory=dict)

    def keep(self, path: str, before: bytes, after: bytes) -> None:
        """Call before writing `after` over `path`, whose content is `before`: copies the original the first time,
        and records `after`'s digest, so undo knows the file still holds what fix wrote."""
        real = os.path.realpath(path)
        if not self.manifest:
            self.manifest = {
                "version": 2,
                "created": self.stamp,
                "cwd": os.getcwd(),
                "roots": [],
                "files": [],
                "undone": None,
            }
        entry = next((e for e in self.manifest["files"] if e["path"] == real), None)
        with self._folder(create=True) as run, run.folder(FILES, create=True) as files:
            if entry is None:
                name = str(len(self.manifest["files"]))
                files.write(name, before)
                entry = {
                    "path": real,
                    "backup": f"{FILES}/{name}",
                    "original_sha256": safe_io.digest(before),
                    "written_sha256": [],
                }
                self.manifest["files"].append(entry)
                root = str(project_root(Path(real)))
                if root not in self.manifest["roots"]:
                    self.manifest["roots"].append(root)
            entry["written_sha256"].append(safe_io.digest(after))
            _save(run, self.manifest)

    def forget(self, path: str) -> None:
        """The write `keep` prepared did not happen (the file changed meanwhile, the disk is full): its digest is
        dropped, the copy too when nothing was written to that file, and the whole folder when nothing was written
        at all, so that `fix --undo` never picks a run that changed nothing."""
        real = os.path.realpath(path)
        entry = next((e for e in self.manifest.get("files", []) if e["path"] == real), None)
        if entry is None:
            return
        entry["written_sha256"].pop()
        with self._folder(create=False) as run:
            if run is None:
                return
            if entry["written_sha256"]:
                _save(run, self.manifest)
                return
            self.manifest["files"].remove(entry)
            with run.folder(FILES, create=False) or _NullFolder(None) as files:
                if files is not None:
                    files.remove(entry["backup"].split("/", 1)[1])
            if self.manifest["files"]:
                _save(run, self.manifest)
                return
            run.remove(MANIFEST)
            run.remove(FILES, folder=True)
        with OwnFolder.open(checked_state_home(), (APP, UNDO), create=False) or _NullFolder(None) as runs:
            if runs is not None:
                runs.remove(self.stamp, folder=True)
        self.manifest = {}

    def folders(self) -> list[str]:
        return [os.path.join(undo_folder_path(), self.stamp)] if self.manifest.get("files") else []

    def command(self) -> str:
        """The command that undoes this run, from any directory."""
        return "precision-doctor fix --undo " + " ".join(shlex.quote(f) for f in self.folders())

    def _folder(self, create: bool) -> OwnFolder:
        return _NullFolder.around(OwnFolder.open(checked_state_home(), (APP, UNDO, self.stamp), create))


class _NullFolder:
    """`with` over an OwnFolder that may be None."""

    def __init__(self, folder: OwnFolder | None):
        self.inner = folder

    @classmethod
    def around(cls, folder: OwnFolder | None):
        return folder if folder is not None else cls(None)

    def __enter__(self):
        return None

    def __exit__(self, *exc) -> None:
        return None


def _save(run: OwnFolder, manifest: dict) -> None:
    run.write(MANIFEST, (json.dumps(manifest, indent=2) + "\n").encode("utf-8"))


# --- fix --undo ------------------------------------------------------------------------------------


def undo(targets: list[str], force: bool, say) -> int:
    """Restore the runs named (an undo folder `fix` printed, or a file or folder of a project: the latest run that
    changed files there, or in a project inside that folder, and is not yet undone; none: the current directory's
    project). Every file is checked before any is restored: one that changed since the fix refuses the whole undo
    unless `force`."""
    from ..system.programs import distrust

    distrust(targets or ["."])
    runs = list(dict.fromkeys(_run_for(t) for t in (targets or ["."])))
    manifests = {stamp: _load(stamp) for stamp in runs}
    restores = [
        _restore_plan(stamp, entry, manifest["roots"], force)
        for stamp, manifest in manifests.items()
        for entry in manifest["files"]
    ]
    for path, current, original in restores:
        if current == original:
            say(f"{path}: already as before the fix")
            continue
        unchanged = None if current is None else safe_io.digest(current)
        safe_io.write_file(path, original, what=str(path), unchanged_since=unchanged)  # owner, mode, links kept
        say(f"restored {path}")
    for stamp, manifest in manifests.items():
        manifest["undone"] = _stamp()
        with _open_run(stamp) as run:
            _save(run, manifest)
    return 0


def _open_run(stamp: str) -> OwnFolder:
    run = OwnFolder.open(checked_state_home(), (APP, UNDO, stamp), create=False)
    if run is None:
        raise InputError(f"fix --undo: {os.path.join(undo_folder_path(), stamp)}: no such undo folder")
    return run


def _run_for(target: str) -> str:
    """The run (its folder's name) a target of `fix --undo` names."""
    shown = target if len(target) <= 200 else f"{target[:197]}..."
    try:
        path = Path(target).absolute()
        folders = Path(undo_folder_path())
        if path.parent == folders or Path(os.path.realpath(path)).parent == Path(os.path.realpath(folders)):
            return path.name
        exists = path.exists()
    except (OSError, ValueError):  # a name too long, a NUL byte
        exists = False
    if not exists:
        raise InputError(f"fix --undo {shown}: no such file or folder; pass the folder `fix` printed")
    root = str(project_root(Path(os.path.realpath(path))))
    with OwnFolder.open(checked_state_home(), (APP, UNDO), create=False) or _NullFolder(None) as runs:
        stamps = runs.names() if runs is not None else []
    for stamp in sorted(stamps, reverse=True):
        if stamp.startswith("."):
            continue
        try:
            manifest = _load(stamp)
        except InputError:
            continue  # another run's folder being written, or one tampered with: not this project's latest
        within = any(r == root or r.startswith(root.rstrip(os.sep) + os.sep) for r in manifest.get("roots", ()))
        if manifest["files"] and not manifest.get("undone") and within:  # this project, or one inside the folder
            return stamp
    raise InputError(
        f"fix --undo: nothing to undo for {root} (undo folders: {undo_folder_path()}); pass the folder `fix` printed"
    )


def _restore_plan(stamp: str, entry: dict, roots: list, force: bool) -> tuple[Path, bytes | None, bytes]:
    """(the file, its current bytes or None when it is gone, the original bytes), or InputError."""
    from ..system.programs import inside

    folder = os.path.join(undo_folder_path(), stamp)
    tampered = InputError(
        f"{folder}/{MANIFEST}: names {entry['path'][:200]!r} in a way `fix` never writes; nothing restored"
    )
    try:
        path = Path(entry["path"])
        sound = (
            path.is_absolute()
            and os.path.realpath(path) == str(path)
            and inside(str(path), [str(r) for r in roots if isinstance(r, str)])
        )
        exists = path.exists()
    except (OSError, ValueError):  # a NUL byte, a name too long
        raise tampered from None
    if not sound or not entry["backup"].startswith(f"{FILES}/") or not entry["backup"][len(FILES) + 1 :].isdigit():
        raise tampered
    if exists and not path.is_file():
        raise InputError(f"{path}: is no longer a regular file; nothing restored")
    try:
        current = path.read_bytes() if exists else None
    except OSError as exc:
        raise InputError(f"{path}: cannot be read ({exc.strerror}); nothing restored") from None
    known = {entry["original_sha256"], *entry["written_sha256"]}
    if (current is None or safe_io.digest(current) not in known) and not force:
        what = "was removed" if current is None else "changed"
        raise InputError(
            f"{path}: {what} since `fix` wrote it; nothing restored (add --force to restore the backup over it)"
        )
    with _open_run(stamp) as run, run.folder(FILES, create=False) or _NullFolder(None) as files:
        if files is None:
            raise InputError(f"{folder}: its copies are gone; nothing restored")
        original = files.read(entry["backup"][len(FILES) + 1 :])
    if safe_io.digest(original) != entry["original_sha256"]:
        raise InputError(f"{folder}/{entry['backup']}: the backup itself changed; nothing restored")
    return path, current, original


def _load(stamp: str) -> dict:
    with _open_run(stamp) as run:
        raw = run.read(MANIFEST)
    where = os.path.join(undo_folder_path(), stamp, MANIFEST)
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError):
        raise InputError(f"{where}: not an undo manifest of precision-doctor") from None
    if (
        not isinstance(data, dict)
        or data.get("version") != 2
        or not isinstance(data.get("files"), list)
        or not isinstance(data.get("roots"), list)
        or not all(_sound_entry(e) for e in data["files"])
    ):
        raise InputError(f"{where}: not an undo manifest of precision-doctor")
    return data


def _sound_entry(entry) -> bool:
    if not isinstance(entry, dict) or not isinstance(entry.get("written_sha256"), list):
        return False
    return all(isinstance(entry.get(k), str) for k in ("path", "backup", "original_sha256")) and all(
        isinstance(d, str) for d in entry["written_sha256"]
    )
