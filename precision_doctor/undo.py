"""Undo data for `fix`: before a file is first changed, a byte-for-byte copy of it goes into
`<root>/.precision-doctor/backup/<run>/`, with a manifest of what was copied and of every digest `fix` wrote since.
So the backup exists whatever ends the run (Ctrl-C, Ctrl-D, a refusal, a kill) after some fixes, and
`precision-doctor fix --undo` restores the files byte for byte from any directory, instead of a patch that fails
when two fixes touched one line.

The root is the file's project (the nearest folder up with a pyproject.toml or .git), else the file's own folder:
the backup sits with the code it belongs to and is found from it. The folder holds a `.gitignore` of `*`.
"""

from __future__ import annotations

import json
import os
import shlex
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from . import safe_io
from .errors import InputError

FOLDER = ".precision-doctor"
BACKUPS = f"{FOLDER}/backup"
MANIFEST = "manifest.json"
_PROJECT_MARKERS = ("pyproject.toml", ".git")


def project_root(path: Path) -> Path:
    """The nearest folder at or above `path` (a file's folder, or a folder) with a pyproject.toml or .git."""
    start = path if path.is_dir() else path.parent
    for folder in (start, *start.parents):
        if any((folder / marker).exists() for marker in _PROJECT_MARKERS):
            return folder
    return start


@dataclass
class _Run:
    root: Path
    folder: Path
    manifest: dict


@dataclass
class Backup:
    """One fix run's undo data, written as the run goes (one backup folder per project root it touches)."""

    stamp: str = field(default_factory=lambda: datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S.%fZ")
                       + f"-{os.getpid()}")
    runs: dict[Path, _Run] = field(default_factory=dict)

    def keep(self, path: str, before: bytes, after: bytes) -> None:
        """Call before writing `after` over `path`, whose content is `before`: copies the original the first time,
        and records `after`'s digest, so undo knows the file still holds what fix wrote."""
        real = Path(os.path.realpath(path))
        run = self._run_for(real)
        entry = next((e for e in run.manifest["files"] if e["path"] == str(real)), None)
        if entry is None:
            copy = run.folder / "files" / real.relative_to(run.root)
            safe_io.make_folder(copy.parent, what=f"undo backup {copy.parent}", mode=0o700)
            safe_io.write_file(copy, before, what=f"undo backup {copy}", new_mode=0o600)
            entry = {"path": str(real), "backup": str(copy.relative_to(run.folder)),
                     "original_sha256": safe_io.digest(before), "written_sha256": []}
            run.manifest["files"].append(entry)
        entry["written_sha256"].append(safe_io.digest(after))
        self._save(run)

    def folders(self) -> list[Path]:
        return [run.folder for run in self.runs.values()]

    def command(self) -> str:
        """The command that undoes this run, from any directory."""
        return "precision-doctor fix --undo " + " ".join(shlex.quote(str(f)) for f in self.folders())

    def _run_for(self, real: Path) -> _Run:
        root = project_root(real)
        if root not in self.runs:
            top = root / FOLDER
            safe_io.make_folder(top / "backup", what=f"undo backup {top}", mode=0o700)
            if not (top / ".gitignore").exists():
                safe_io.write_file(top / ".gitignore", b"*\n", what=f"undo backup {top}")
            folder = top / "backup" / self.stamp
            safe_io.make_folder(folder, what=f"undo backup {folder}", mode=0o700)
            self.runs[root] = _Run(root, folder, {"version": 1, "created": self.stamp, "cwd": os.getcwd(),
                                            "files": [], "undone": None})
        return self.runs[root]

    @staticmethod
    def _save(run: _Run) -> None:
        safe_io.write_file(run.folder / MANIFEST, (json.dumps(run.manifest, indent=2) + "\n").encode("utf-8"),
                           what=f"undo manifest {run.folder / MANIFEST}", new_mode=0o600)


# --- fix --undo ------------------------------------------------------------------------------------

def undo(targets: list[str], force: bool, say) -> int:
    """Restore the backups named (a backup folder, or a file or folder of a project: its latest run not yet undone;
    none: the current directory's project). Every file is checked before any is restored: one that changed since
    the fix refuses the whole undo unless `force`."""
    folders = list(dict.fromkeys(_backup_folder(t) for t in (targets or ["."])))
    manifests = [(folder, _load(folder)) for folder in folders]
    restores = [_restore_plan(folder, entry, force) for folder, manifest in manifests for entry in manifest["files"]]
    for path, current, original in restores:
        if current == original:
            say(f"{path}: already as before the fix")
            continue
        unchanged = None if current is None else safe_io.digest(current)
        safe_io.write_file(path, original, what=str(path), unchanged_since=unchanged)  # owner, mode, links kept
        say(f"restored {path}")
    for folder, manifest in manifests:
        manifest["undone"] = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S.%fZ")
        safe_io.write_file(folder / MANIFEST, (json.dumps(manifest, indent=2) + "\n").encode("utf-8"),
                           what=f"undo manifest {folder / MANIFEST}")
    return 0


def _restore_plan(folder: Path, entry: dict, force: bool) -> tuple[Path, bytes | None, bytes]:
    """(the file, its current bytes or None when it is gone, the original bytes), or InputError."""
    path = _restorable(folder, entry)
    if path.exists() and not path.is_file():
        raise InputError(f"{path}: is no longer a regular file; nothing restored")
    try:
        current = path.read_bytes()
    except FileNotFoundError:
        current = None
    except OSError as exc:
        raise InputError(f"{path}: cannot be read ({exc.strerror}); nothing restored") from None
    known = {entry["original_sha256"], *entry["written_sha256"]}
    if (current is None or safe_io.digest(current) not in known) and not force:
        what = "was removed" if current is None else "changed"
        raise InputError(f"{path}: {what} since `fix` wrote it; nothing restored (add --force to restore the "
                         f"backup over it)")
    copy = folder / entry["backup"]
    original = safe_io.read_bytes(copy, what=f"undo backup {copy}")
    if safe_io.digest(original) != entry["original_sha256"]:
        raise InputError(f"{copy}: the backup itself changed; nothing restored")
    return path, current, original


def _backup_folder(target: str) -> Path:
    path = Path(target).resolve()
    if (path / MANIFEST).is_file():
        return path
    if not path.exists():
        raise InputError(f"fix --undo {target}: no such file or folder; pass the folder `fix` printed")
    root = project_root(path)
    runs = sorted((root / BACKUPS).glob(f"*/{MANIFEST}"), reverse=True) if (root / BACKUPS).is_dir() else []
    for manifest in runs:
        if not _load(manifest.parent).get("undone"):
            return manifest.parent
    raise InputError(f"fix --undo: nothing to undo under {root / BACKUPS}; pass the folder `fix` printed")


def _restorable(folder: Path, entry: dict) -> Path:
    """The file an entry restores, if the entry is sound: a manifest is data in someone's tree, so it may only
    restore files of the project it sits in, from copies inside its own folder."""
    root = folder.parent.parent.parent  # <root>/.precision-doctor/backup/<run>
    path = Path(entry["path"])
    copy = Path(os.path.normpath(folder / entry["backup"]))
    if not path.is_absolute() or os.path.realpath(path) != str(path) or not path.is_relative_to(root) \
            or path.is_relative_to(root / FOLDER) or not copy.is_relative_to(folder):
        raise InputError(f"{folder / MANIFEST}: names {path}, outside the project it belongs to; nothing restored")
    return path


def _load(folder: Path) -> dict:
    try:
        data = json.loads(safe_io.read_bytes(folder / MANIFEST, what=f"undo manifest {folder / MANIFEST}"))
    except ValueError:
        raise InputError(f"{folder / MANIFEST}: not an undo manifest of precision-doctor") from None
    if not isinstance(data, dict) or data.get("version") != 1 or not isinstance(data.get("files"), list) \
            or not all(_sound_entry(e) for e in data["files"]):
        raise InputError(f"{folder / MANIFEST}: not an undo manifest of precision-doctor")
    return data


def _sound_entry(entry) -> bool:
    if not isinstance(entry, dict) or not isinstance(entry.get("written_sha256"), list):
        return False
    return all(isinstance(entry.get(k), str) for k in ("path", "backup", "original_sha256")) \
        and all(isinstance(d, str) for d in entry["written_sha256"])
