"""Settings from `[tool.precision-doctor]` in pyproject.toml, merged under the command-line flags.

Unknown keys and rule ids are errors that name what is wrong: a typo in a CI gate must not silently turn
a check off.
"""

from __future__ import annotations

import fnmatch
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import InputError, did_you_mean, rule_id_key
from .sources import Unreadable, read_text_bounded, worth_reading

SECTION = "precision-doctor"
KEYS = ("target", "facts", "launcher", "fail-on", "select", "ignore", "per-file-ignores", "exclude")


@dataclass(frozen=True)
class Policy:
    """Which rules run and where their findings count."""

    select: frozenset[str] | None = None  # None: every rule
    ignore: frozenset[str] = frozenset()
    per_file_ignores: tuple[tuple[str, frozenset[str]], ...] = ()  # (glob, rule ids)
    root: str = "."  # per-file globs are relative to the pyproject.toml that holds them

    def enabled(self, rule_id: str) -> bool:
        return (self.select is None or rule_id in self.select) and rule_id not in self.ignore

    def ignored_in(self, rule_id: str, path: str) -> bool:
        rel = _relative(path, self.root)
        return any(rule_id in ids and (fnmatch.fnmatch(rel, pattern) or fnmatch.fnmatch(Path(rel).name, pattern))
                   for pattern, ids in self.per_file_ignores)


@dataclass(frozen=True)
class Settings:
    target: str | None = None
    facts: str | None = None
    launcher: str | None = None
    fail_on: str = "error"
    policy: Policy = field(default_factory=Policy)
    exclude: tuple[str, ...] = ()
    source: str = ""  # the pyproject.toml read, if any


def find_pyproject(start: Path) -> Path | None:
    """The nearest pyproject.toml with a [tool.precision-doctor] table, from `start` upwards. One that is there
    but cannot be read is an error (exit 2): the settings it may hold must not be skipped silently."""
    here = Path(os.path.realpath(start))
    for folder in [here, *here.parents] if os.path.isdir(here) else [here.parent, *here.parent.parents]:
        candidate = folder / "pyproject.toml"
        if worth_reading(candidate):
            if f"[tool.{SECTION}" in _read(candidate, errors="replace"):
                return candidate
    return None


def read_table(path: Path) -> dict[str, Any]:
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib  # type: ignore[no-redef]
    try:
        data = tomllib.loads(_read(path))
    except tomllib.TOMLDecodeError as exc:
        raise InputError(f"{path}: not valid TOML ({exc})") from None
    return data.get("tool", {}).get(SECTION, {})


def _read(path: Path, errors: str = "strict") -> str:
    try:
        return read_text_bounded(path, what="pyproject.toml", errors=errors)
    except Unreadable as exc:
        raise InputError(f"{path}: cannot be read ({exc.reason}); fix it or pass --config FILE") from None


def resolve_ids(values: list[str], known: set[str], where: str) -> frozenset[str]:
    """Exact ids or prefixes (`PD2` = every PD2xx); anything matching no rule is an error that names it."""
    out: set[str] = set()
    for raw in values:
        key = str(raw).strip().upper()
        if not key:
            continue
        matched = {r for r in known if r == key or (len(key) < 5 and r.startswith(key))}
        if not matched:
            hint = did_you_mean(key, known, rule_id_key)
            raise InputError(f"{where}: unknown rule id {raw!r}{hint or ';'} `precision-doctor rules` lists them")
        out |= matched
    return frozenset(out)


def _canonical_keys(table: dict[str, Any], source: str) -> dict[str, Any]:
    """Keys as people type them: `fail_on` and `fail-on` are the same key (TOML tables in the wild use both)."""
    out: dict[str, Any] = {}
    for key, value in table.items():
        name = str(key).strip().lower().replace("_", "-")
        if name not in KEYS:
            raise InputError(f"{source}: [tool.{SECTION}] has unknown key {key!r}"
                             f"{did_you_mean(name, KEYS) or ';'} known keys: {', '.join(KEYS)}")
        if name in out:
            raise InputError(f"{source}: [tool.{SECTION}] sets {name} twice (as {key!r} too); keep one")
        out[name] = value
    return out


def load_settings(table: dict[str, Any], source: str, known_rules: set[str], root: str) -> Settings:
    table = _canonical_keys(table, source)

    def ids(key: str) -> frozenset[str] | None:
        value = table.get(key)
        if value is None:
            return None
        if not isinstance(value, list):
            raise InputError(f"{source}: [tool.{SECTION}] {key} must be a list of rule ids, e.g. [\"PD2\"]")
        return resolve_ids(value, known_rules, f"{source}: {key}")

    per_file = table.get("per-file-ignores", {})
    if not isinstance(per_file, dict):
        raise InputError(f"{source}: [tool.{SECTION}] per-file-ignores must map a glob to rule ids")
    pfi = tuple((str(glob), resolve_ids(list(v), known_rules, f"{source}: per-file-ignores {glob!r}"))
                for glob, v in per_file.items())
    fail_on = table.get("fail-on", "error")
    if fail_on not in ("error", "warning", "info", "never"):
        raise InputError(f"{source}: fail-on = {fail_on!r}; choose error, warning, info or never")
    exclude = table.get("exclude", [])
    if not isinstance(exclude, list):
        raise InputError(f"{source}: [tool.{SECTION}] exclude must be a list of globs")
    return Settings(target=table.get("target"), facts=table.get("facts"), launcher=table.get("launcher"),
                    fail_on=fail_on, exclude=tuple(map(str, exclude)), source=source,
                    policy=Policy(select=ids("select"), ignore=ids("ignore") or frozenset(), per_file_ignores=pfi,
                                  root=root))


def excluded(path: Path, patterns: tuple[str, ...], root: str) -> bool:
    rel = _relative(str(path), root)
    parts = Path(rel).parts
    return any(fnmatch.fnmatch(rel, p) or any(fnmatch.fnmatch(part, p) for part in parts) for p in patterns)


def _relative(path: str, root: str) -> str:
    try:
        return Path(os.path.realpath(path)).relative_to(os.path.realpath(root)).as_posix()  # never raises on a link loop
    except ValueError:
        return Path(path).as_posix()
