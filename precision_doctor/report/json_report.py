"""`--format json`: one stable JSON object on stdout (schema documented in the README)."""

from __future__ import annotations

from dataclasses import asdict

from ..engine import Result
from ..model.facts import Facts, _to_jsonable
from ..model.findings import SEVERITIES, Finding
from ..model.redact import shown_data
from ..model.strict_json import dumps
from .unknowns import unknown_entries

SCHEMA_VERSION = 1


def finding_json(f: Finding) -> dict:
    return {
        "id": f.rule_id,
        "name": f.name,
        "severity": f.severity,
        "confidence": f.confidence,
        "phase": f.phase,
        "message": f.message,
        "path": f.path,
        "locations": [{"path": loc.path, "line": loc.line, "column": loc.column} for loc in f.locations],
        "evidence": [
            {
                "path": e.location.path if e.location else None,
                "line": e.location.line if e.location else None,
                "column": e.location.column if e.location else None,
                "excerpt": e.excerpt,
                "note": e.note,
                "origin": e.origin,
                "via": list(e.trail),
            }
            for e in f.evidence
        ],
        "error": f.error,
        "why": f.why,
        "fix": None
        if f.fix is None
        else {
            "description": f.fix.description,
            "applicability": f.fix.applicability,
            "safe": f.fix.safe,
            "edits": [asdict(e) for e in f.fix.edits],
            "commands": list(f.fix.commands),
            "notes": list(f.fix.notes),
        },
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
        "files": {"checked": len(facts.scripts), "with_findings": len({f.path for f in result.findings if f.path})},
    }
    if include_facts:  # the engine judged every script here, keeping each one's setup
        doc["facts"] = facts.to_json()
        doc["setups"] = {s.path: _to_jsonable(result.setups[s.path]) for s in facts.scripts}
    return dumps(shown_data(doc), indent=2, default=_plain)


def _plain(value):
    """What json cannot write on its own, from the derived setups: sets of names."""
    if isinstance(value, (set, frozenset)):
        return sorted(map(str, value))
    return str(value)
