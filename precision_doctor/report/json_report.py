"""`--format json`: one stable JSON object on stdout (schema documented in the README)."""

from __future__ import annotations

from dataclasses import asdict

from ..engine import Result
from ..facts import Facts
from ..findings import SEVERITIES, Finding
from ..redact import redact_data
from ..strict_json import dumps

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
        "evidence": [{"path": e.location.path if e.location else None,
                      "line": e.location.line if e.location else None,
                      "column": e.location.column if e.location else None,
                      "excerpt": e.excerpt, "note": e.note, "origin": e.origin, "via": list(e.trail)}
                     for e in f.evidence],
        "error": f.error,
        "why": f.why,
        "fix": None if f.fix is None else {
            "description": f.fix.description, "applicability": f.fix.applicability, "safe": f.fix.safe,
            "edits": [asdict(e) for e in f.fix.edits], "commands": list(f.fix.commands),
            "notes": list(f.fix.notes)},
    }


def render(result: Result, facts: Facts) -> str:
    unknowns = [{"what": u.what, "reason": u.reason,
                 "path": u.location.path if u.location else s.path,
                 "line": u.location.line if u.location else None}
                for s in facts.scripts for u in s.unknowns if not (u.hardware and facts.machine.known)]
    counts = {s: sum(1 for f in result.findings if f.severity == s) for s in SEVERITIES}
    doc = {
        "version": SCHEMA_VERSION,
        "findings": [finding_json(f) for f in result.findings],
        "unknowns": unknowns,
        "skipped": [{"id": s.rule_id, "reason": s.reason} for s in result.skipped],
        "crashed": [{"id": s.rule_id, "reason": s.reason} for s in result.crashed],
        "withdrawn": [{"id": w.rule_id, "message": w.message, "path": w.path, "reason": w.reason}
                      for w in result.withdrawn],
        "summary": counts,
        "facts": facts.to_json(),
    }
    return dumps(redact_data(doc), indent=2, sort_keys=False)
