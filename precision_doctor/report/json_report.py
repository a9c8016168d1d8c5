"""`--format json`: one stable JSON object on stdout (schema documented in the README)."""

from __future__ import annotations

from dataclasses import asdict

from ..engine import Result
from ..model.facts import Facts, _to_jsonable
from ..model.findings import SEVERITIES, Finding
from ..model.redact import shown_data
from ..model.strict_json import dumps
from .lines import PLACES
from .unknowns import unknown_entries

SCHEMA_VERSION = 1


def _place(path: str, line: int) -> dict:
    """`line`, and for a notebook `cell` with `line` counted in that cell."""
    cell = PLACES.cell(path, line)
    return {"line": cell[1], "cell": cell[0]} if cell else {"line": line}


def finding_json(f: Finding) -> dict:
    return {
        "id": f.rule_id,
        "name": f.name,
        "severity": f.severity,
        "confidence": f.confidence,
        "phase": f.phase,
        "message": f.message,
        "path": f.path,
        "locations": [{"path": loc.path, **_place(loc.path, loc.line), "column": loc.column} for loc in f.locations],
        "evidence": [
            {
                "path": e.location.path if e.location else None,
                **(_place(e.location.path, e.location.line) if e.location else {"line": None}),
                "column": e.location.column if e.location else None,
                "excerpt": e.excerpt,
                "note": e.note,
                "origin": e.origin,
                "via": [PLACES.in_text(step) for step in e.trail],
            }
            for e in f.evidence
        ],
        "error": f.error,
        "why": f.why,
        "fix": None
        if f.fix is None
        else {
            "description": f.fix.description,
            "applicability": f.fix.effective,  # what `fix` does with it: display when it has no edits
            "safe": f.fix.safe,
            "edits": [asdict(e) for e in f.fix.edits],
            "commands": list(f.fix.commands),
            "notes": list(f.fix.notes),
        },
    }


def launch_json(result: Result, facts: Facts) -> dict:
    """The launch as given and as understood: the launcher, the layers around it, the processes per node."""
    launch = facts.launch
    plan = result.plan
    return {
        "command": launch.command or None,
        "understood": launch.known,
        "launcher": launch.launcher or None,
        "as": launch.describe(),
        "through": list(launch.through),
        "processes_per_node": plan.processes if plan is not None and launch.known else None,
        "unknown_launcher": launch.unknown_launcher or None,
    }


def render(result: Result, facts: Facts, include_facts: bool = False) -> str:
    """The report; the fact record the rules read (and each script's derived setup) only when asked: at a
    repository's scale it is most of the bytes and no CI step reads it."""
    unknowns = [
        {"what": e.what, "reason": e.reason, "path": e.path, "line": e.line, "silences": list(e.silences)}
        for e in unknown_entries(result, facts, not_checked=True)
    ]
    counts = {s: sum(1 for f in result.findings if f.severity == s) for s in SEVERITIES}
    doc = {
        "version": SCHEMA_VERSION,
        "findings": [finding_json(f) for f in result.findings],
        "unknowns": unknowns,
        "skipped": [{"id": s.rule_id, "reason": s.reason} for s in result.skipped],
        "crashed": [{"id": s.rule_id, "reason": s.reason} for s in result.crashed],
        "withdrawn": [
            {"id": w.rule_id, "message": w.message, "path": w.path, "reason": w.reason} for w in result.withdrawn
        ],
        "summary": counts,
        "files": {
            "checked": len(facts.all_scripts) + len(facts.jobs),
            "with_findings": len({f.path for f in result.findings if f.path}),
        },
        "launch": launch_json(result, facts),
    }
    if include_facts:  # the engine judged every script here, keeping each one's setup
        doc["facts"] = facts.to_json()
        doc["setups"] = {
            s.path: _to_jsonable(result.setups[s.path]) for s in facts.all_scripts if s.path in result.setups
        }
    return dumps(shown_data(doc), indent=2, default=_plain)


def _plain(value):
    """What json cannot write on its own, from the derived setups: sets of names."""
    if isinstance(value, (set, frozenset)):
        return sorted(map(str, value))
    return str(value)
