"""One line per finding: `--format concise` for terminals and editors, `--format github` for GitHub Actions'
workflow commands (an annotation on the pull request's diff, no code scanning needed)."""

from __future__ import annotations

from pathlib import Path

from ..engine import Result
from ..model.facts import Location
from ..model.findings import Finding
from ..model.redact import printable, redact_text
from ..model.util import python_lines


class SourceLines:
    """Source lines for excerpts and fingerprints; files that are not here (a --facts snapshot) just have none."""

    def __init__(self):
        self._cache: dict[str, list[str]] = {}

    def get(self, path: str, line: int) -> str:
        if path not in self._cache:
            try:
                self._cache[path] = python_lines(Path(path).read_text(encoding="utf-8-sig", errors="replace"))
            except OSError:
                self._cache[path] = []
        lines = self._cache[path]
        return lines[line - 1].strip() if 0 < line <= len(lines) else ""


_GITHUB_LEVEL = {"error": "error", "warning": "warning", "info": "notice"}


def primary_location(f: Finding) -> Location:
    """Where a finding points: its first located evidence, else its file (line 1)."""
    return f.locations[0] if f.locations else Location(f.path or ".", 1, 1)


def render_concise(result: Result) -> str:
    out = []
    for f in result.findings:
        loc = primary_location(f)
        out.append(f"{loc.path}:{loc.line}:{loc.column}: {f.rule_id} [{f.severity}] {f.message}")
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
        props = (
            f"file={_escape_property(printable(loc.path))},line={loc.line},col={loc.column},"
            f"title={_escape_property(f'{f.rule_id} {f.name}')}"
        )
        out.append(f"::{_GITHUB_LEVEL[f.severity]} {props}::{_escape_data(printable(redact_text(message), True))}")
    return "".join(line + "\n" for line in out)
