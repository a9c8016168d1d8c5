"""Settings from `[tool.precision-doctor]` in pyproject.toml, merged under the command-line flags.

Unknown keys and rule ids are errors that name what is wrong: a typo in a CI gate must not silently turn
a check off.
"""

from __future__ import annotations

import fnmatch
import os
from dataclasses import field, fields
from pathlib import Path
from typing import Any, Literal

from .model.errors import InputError, did_you_mean, rule_id_key
from .model.util import record
from .system.sources import Unreadable, parse_toml, read_text_bounded, worth_reading

SECTION = "precision-doctor"
FAIL_ON = ("error", "warning", "info", "never")


@record
class Table:
    """`[tool.precision-doctor]` as declared: each key's type is checked when the file is read (typed.py)."""

    target: str | None = None
    facts: str | None = None
    launcher: str | None = None
    fail_on: Literal["error", "warning", "info", "never"] = "error"
    select: list[str] | None = None
    ignore: list[str] | None = None
    per_file_ignores: dict[str, list[str]] = field(default_factory=dict)  # glob -> rule ids
    exclude: list[str] = field(default_factory=list)
    partitions: dict[str, Any] = field(default_factory=dict)  # checked by _partitions


KEYS = tuple(f.name.replace("_", "-") for f in fields(Table))


@record
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
        return any(
            rule_id in ids and (fnmatch.fnmatch(rel, pattern) or fnmatch.fnmatch(Path(rel).name, pattern))
            for pattern, ids in self.per_file_ignores
        )


@record
class Settings:
    target: str | None = None
    facts: str | None = None
    launcher: str | None = None
    fail_on: str = "error"
    policy: Policy = field(default_factory=Policy)
    exclude: tuple[str, ...] = ()
    source: str = ""  # the pyproject.toml read, if any
    partitions: dict[str, dict[str, Any]] = field(default_factory=dict)  # SLURM partition -> {"gpu", "count"}


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
        data = parse_toml(_read(path))
    except ValueError as exc:
        raise InputError(f"{path}: not valid TOML ({exc})") from None
    tool = data.get("tool", {})
    table = tool.get(SECTION, {}) if isinstance(tool, dict) else {}
    if not isinstance(table, dict):
        raise InputError(
            f"{path}: [tool.{SECTION}] is {type(table).__name__}, not a table; write it as "
            f"[tool.{SECTION}] with keys under it"
        )
    return table


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
            raise InputError(
                f"{source}: [tool.{SECTION}] has unknown key {key!r}"
                f"{did_you_mean(name, KEYS) or ';'} known keys: {', '.join(KEYS)}"
            )
        if name in out:
            raise InputError(f"{source}: [tool.{SECTION}] sets {name} twice (as {key!r} too); keep one")
        out[name] = value
    return out


def load_settings(table: dict[str, Any], source: str, known_rules: set[str], root: str) -> Settings:
    if not table:  # the defaults: nothing to check, so the type checker (msgspec) is not even imported
        return Settings(source=source, policy=Policy(root=root))
    from .model.typed import convert

    table = _canonical_keys(table, source)
    where = f"{source}: [tool.{SECTION}]"
    read = convert(
        {k.replace("-", "_"): v for k, v in table.items()},
        Table,
        where,
        key_name=lambda key: key.replace("_", "-"),
        null=False,
    )

    def ids(values: list[str] | None, key: str) -> frozenset[str] | None:
        return None if values is None else resolve_ids(values, known_rules, f"{source}: {key}")

    pfi = tuple(
        (glob, resolve_ids(v, known_rules, f"{source}: per-file-ignores {glob!r}"))
        for glob, v in read.per_file_ignores.items()
    )
    return Settings(
        target=read.target,
        facts=read.facts,
        launcher=read.launcher,
        fail_on=read.fail_on,
        exclude=tuple(read.exclude),
        source=source,
        partitions=_partitions(read.partitions, source),
        policy=Policy(
            select=ids(read.select, "select"),
            ignore=ids(read.ignore, "ignore") or frozenset(),
            per_file_ignores=pfi,
            root=root,
        ),
    )


def _partitions(value: Any, source: str) -> dict[str, dict[str, Any]]:
    """`[tool.precision-doctor.partitions]`: `gpu = { gpu = "a100-80gb", count = 8 }` per SLURM partition."""
    where = f"{source}: [tool.{SECTION}.partitions]"
    if not isinstance(value, dict):
        raise InputError(f'{where} must map a partition name to {{ gpu = "a100-80gb", count = 8 }}')
    for name, entry in value.items():
        if not isinstance(entry, dict) or not isinstance(entry.get("gpu"), str):
            raise InputError(f'{where} {name}: needs gpu = "PROFILE" (see `precision-doctor targets`)')
        if set(entry) - {"gpu", "count"}:
            raise InputError(
                f"{where} {name}: unknown key {sorted(set(entry) - {'gpu', 'count'})[0]!r}; known keys: gpu, count"
            )
        if "count" in entry and (
            not isinstance(entry["count"], int) or isinstance(entry["count"], bool) or entry["count"] < 1
        ):
            raise InputError(f"{where} {name}: count must be a positive integer (GPUs per node)")
    return {str(k): dict(v) for k, v in value.items()}


def excluded(path: Path, patterns: tuple[str, ...], root: str) -> bool:
    if not patterns:  # (the usual case: no resolving of every file's real path for nothing)
        return False
    rel = _relative(str(path), root)
    parts = Path(rel).parts
    return any(fnmatch.fnmatch(rel, p) or any(fnmatch.fnmatch(part, p) for part in parts) for p in patterns)


def _relative(path: str, root: str) -> str:
    try:
        return (
            Path(os.path.realpath(path)).relative_to(os.path.realpath(root)).as_posix()
        )  # never raises on a link loop
    except ValueError:
        return Path(path).as_posix()
