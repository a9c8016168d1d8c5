"""The unknowns of a run, for people and tools: deduplicated (a module imported by many scripts is read once
per script), grouped by the file they are written in, each with the rules it kept silent.

A rule is counted as silenced by an unknown when the engine saw it read a derived fact that was unknown for
that value and stay silent on the script (engine.Silenced). A derived fact that is unknown for a reason no
listed unknown carries (a value the derivation, not the probe, gave up on) becomes an entry of its own.
"""

from __future__ import annotations

from ..engine import Result
from ..model.facts import NOTHING_TO_CHECK, Facts, Location
from ..model.util import record

LAUNCH_PATH = "(launch command)"  # where the launch's own unknowns are listed
NOT_CHECKED = "not checked"  # the unknown a folder run records for a file it could not read: shown on its line


@record
class UnknownEntry:
    what: str
    reason: str
    path: str
    line: int | None
    silences: tuple[str, ...]  # rule ids, sorted


def _key(loc: Location | None) -> tuple | None:
    return (loc.path, loc.line, loc.column) if loc is not None else None


def unknown_entries(result: Result, facts: Facts, not_checked: bool = False) -> list[UnknownEntry]:
    """Every distinct unknown, by file then line (with `not_checked`, the files a folder run could not read, and
    the empty files it had nothing to check in, too)."""
    silenced: dict[tuple, set[str]] = {}
    derived_only: dict[tuple, tuple] = {}
    for s in result.silenced:
        for loc in s.locations:
            silenced.setdefault(_key(loc), set()).add(s.rule_id)
            derived_only.setdefault(_key(loc), (s.fact, s.reason, loc))
    seen: dict[tuple, UnknownEntry] = {}
    listed: set[tuple] = set()
    for script in facts.all_scripts:
        for u in script.unknowns:
            if (u.what in (NOT_CHECKED, NOTHING_TO_CHECK) and not not_checked) or (u.hardware and facts.machine.known):
                continue
            key = (u.what, u.reason, _key(u.location) or script.path)
            if key in seen:
                continue
            where = _key(u.location)
            listed.add(where)
            seen[key] = UnknownEntry(
                u.what,
                u.reason,
                u.location.path if u.location else script.path,
                u.location.line if u.location else None,
                _launch_rules(result) if u.launch else tuple(sorted(silenced.get(where, ()))) if where else (),
            )
    for u in facts.launch.unknowns:  # the launch's own, where no script carries them (none was checked)
        if not any((u.what, u.reason) == key[:2] for key in seen):
            seen[(u.what, u.reason, LAUNCH_PATH)] = UnknownEntry(
                u.what, u.reason, LAUNCH_PATH, None, _launch_rules(result) if u.launch else ()
            )
    for where, (fact, reason, loc) in derived_only.items():
        if where not in listed:
            seen[("", reason, where)] = UnknownEntry(
                f"{fact.replace('_', ' ')} (derived)", reason, loc.path, loc.line, tuple(sorted(silenced[where]))
            )
    return sorted(seen.values(), key=lambda e: (e.path, e.line or 0, e.what))


def _launch_rules(result: Result) -> tuple[str, ...]:
    """The rules that read the launch (its facts or its plan) and found nothing: silent for want of it."""
    from ..rules.registry import REGISTRY

    fired = {f.rule_id for f in result.findings}
    return tuple(sorted(r.id for r in REGISTRY.values() if {"launch", "plan"} & set(r.params) and r.id not in fired))


def by_file(entries: list[UnknownEntry]) -> dict[str, list[UnknownEntry]]:
    out: dict[str, list[UnknownEntry]] = {}
    for e in entries:
        out.setdefault(e.path, []).append(e)
    return out
