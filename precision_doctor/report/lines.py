"""One line per finding: `--format concise` for terminals and editors, `--format github` for GitHub Actions'
workflow commands (an annotation on the pull request's diff, no code scanning needed)."""

from __future__ import annotations

import re
from pathlib import Path

from ..engine import Result
from ..model.errors import InputError
from ..model.facts import Location
from ..model.findings import Finding
from ..model.redact import printable, redact_text
from ..model.util import python_lines
from ..system.notebooks import cell_line, file_line, is_notebook
from ..system.sources import read_notebook, read_notebook_json


class SourceLines:
    """Source lines for excerpts and fingerprints; files that are not here (a --facts snapshot) just have none. A
    notebook's lines are its code cells' (system/notebooks.py), and its places name the cell."""

    def __init__(self):
        self._cache: dict[str, list[str]] = {}
        self._json: dict[str, str] = {}

    def _lines(self, path: str) -> list[str]:
        if path not in self._cache:
            try:
                if is_notebook(path):
                    self._cache[path] = python_lines(read_notebook(path).text)
                else:
                    self._cache[path] = python_lines(Path(path).read_text(encoding="utf-8-sig", errors="replace"))
            except (OSError, InputError):
                self._cache[path] = []
        return self._cache[path]

    def get(self, path: str, line: int) -> str:
        lines = self._lines(path)
        return lines[line - 1].strip() if 0 < line <= len(lines) else ""

    def cell(self, path: str, line: int) -> tuple[int, int] | None:
        """A notebook line's (cell, line in the cell); None for any other file."""
        return cell_line("\n".join(self._lines(path)), line) if is_notebook(path) else None

    def file_line(self, path: str, line: int) -> int:
        """The line of the file itself: for a notebook, the line of its JSON that holds this code line (what a
        code-scanning UI or a pull request's diff shows); the line unchanged for any other file, or when the
        notebook cannot be followed."""
        found = self.cell(path, line)
        if found is None:
            return line
        if path not in self._json:
            try:
                self._json[path] = read_notebook_json(path)
            except (OSError, InputError):
                self._json[path] = ""
        return file_line(self._json[path], *found) or line

    def place(self, path: str, line: int | None, column: int | None = None) -> str:
        """`train.py:12` (`:12:5` with the column), `nb.ipynb:cell 3:4` for a notebook."""
        if line is None:
            return path
        found = self.cell(path, line)
        shown = f"{path}:cell {found[0]}:{found[1]}" if found else f"{path}:{line}"
        return f"{shown}:{column}" if column is not None else shown

    def in_text(self, text: str) -> str:
        """Text that names notebook lines (`via nb.ipynb:26 ...`) with each named by its cell."""
        if ".ipynb:" not in text:
            return text
        return _NOTEBOOK_PLACE.sub(lambda m: self.place(m.group(1), int(m.group(2))), text)


_NOTEBOOK_PLACE = re.compile(r"(\S+?\.ipynb):(\d+)")
PLACES = SourceLines()  # one per process: reports read each notebook once


_GITHUB_LEVEL = {"error": "error", "warning": "warning", "info": "notice"}


def primary_location(f: Finding) -> Location:
    """Where a finding points: its first located evidence, else its file (line 1)."""
    return f.locations[0] if f.locations else Location(f.path or ".", 1, 1)


def render_concise(result: Result) -> str:
    out = []
    for f in result.findings:
        loc = primary_location(f)
        out.append(f"{PLACES.place(loc.path, loc.line, loc.column)}: {f.rule_id} [{f.severity}] {f.message}")
    return "".join(line + "\n" for line in (printable(redact_text(line)) for line in out))


def _escape_data(text: str) -> str:
    """A workflow command's message: GitHub's escaping of %, CR and LF."""
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_property(text: str) -> str:
    """A workflow command's property value: the message escaping plus `:` and `,`."""
    return _escape_data(text).replace(":", "%3A").replace(",", "%2C")


def render_github(result: Result) -> str:
    out = []
    for f in result.findings:
        loc = primary_location(f)
        message = (
            f.message
            + (f"\nThe job would fail with: {f.error}" if f.error else "")
            + (f"\nFix: {f.fix.description}" if f.fix else "")
        )
        cell = PLACES.cell(loc.path, loc.line)
        line = PLACES.file_line(loc.path, loc.line)  # a notebook's: the line of its JSON (GitHub shows the file)
        if cell:
            message = f"cell {cell[0]}, line {cell[1]}: {message}"
        props = (
            f"file={_escape_property(printable(loc.path))},line={line},col={1 if cell else loc.column},"
            f"title={_escape_property(f'{f.rule_id} {f.name}')}"
        )
        out.append(f"::{_GITHUB_LEVEL[f.severity]} {props}::{_escape_data(printable(redact_text(message), True))}")
    return "".join(line + "\n" for line in out)
