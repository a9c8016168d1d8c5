"""`--format sarif`: SARIF 2.1.0 for code-scanning UIs (GitHub, GitLab, VS Code SARIF viewer)."""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path

from .. import __version__
from ..engine import Result
from ..model.facts import Facts
from ..model.findings import Finding
from ..model.redact import shown_data
from ..model.strict_json import dumps
from ..rules.catalog import rules
from ..rules.registry import Rule
from .lines import SourceLines
from .ruledoc import help_uri

SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
LEVEL = {"error": "error", "warning": "warning", "info": "note"}
SRCROOT = "%SRCROOT%"  # the folder the doctor ran in: every relative path is relative to it


def _rule_descriptor(r: Rule) -> dict:
    from .ruledoc import rule_doc

    return {
        "id": r.id,
        "name": r.name,
        "shortDescription": {"text": r.summary},
        "helpUri": help_uri(r.id),
        "fullDescription": {"text": r.what},
        "help": {"text": rule_doc(r), "markdown": _markdown(r)},
        "defaultConfiguration": {"level": LEVEL[r.severity]},
        "properties": {
            "tags": ["precision" if r.id.startswith("PD2") else "machine" if r.id.startswith("PD1") else "meta"],
            "phase": r.phase,
            "problem.severity": r.severity,
        },
    }


def _markdown(r: Rule) -> str:
    return (
        f"**{r.summary}**\n\n**Why is this bad?** {r.why}\n\n**Error:** `{r.error}`\n\n"
        f"**Fix:** {r.fix}\n\n**Fix safety:** {r.fix_safety or 'display only'}"
    )


def _artifact(path: str) -> dict:
    """A relative path under %SRCROOT%; a file outside the folder the doctor ran in, as an absolute file URI."""
    if os.path.isabs(path):
        return {"uri": Path(path).as_uri()}
    return {"uri": Path(path).as_posix(), "uriBaseId": SRCROOT}


def _location(path: str, line: int, column: int, message: str = "", lines: SourceLines | None = None) -> dict:
    """A place in a file; a notebook's code line is given as the line of its JSON that holds it (what the
    viewer shows), the cell and its line named in the message."""
    cell = lines.cell(path, line) if lines is not None else None
    if cell is not None and lines is not None:
        line, column = lines.file_line(path, line), 1
        message = f"cell {cell[0]}, line {cell[1]}" + (f": {message}" if message else "")
    loc = {
        "physicalLocation": {
            "artifactLocation": _artifact(path),
            "region": {"startLine": max(line, 1), "startColumn": max(column, 1)},
        }
    }
    if message:
        loc["message"] = {"text": message}
    return loc


def fingerprint(rule_id: str, path: str, source_line: str) -> str:
    """Stable when code moves: the rule, the file and the line's text with its whitespace normalised (no line
    number), so inserting lines above a finding does not make code scanning see a new alert."""
    normalised = re.sub(r"\s+", " ", source_line).strip()
    return hashlib.sha256(f"{rule_id}\0{Path(path).as_posix()}\0{normalised}".encode()).hexdigest()[:32]


def _result(f: Finding, index: dict[str, int], lines: SourceLines, seen: dict[str, int]) -> dict:
    located = [e for e in f.evidence if e.location is not None]
    primary = located[0].location if located else None
    text = (
        f.message
        + (f"\nThe job would fail with: {f.error}" if f.error else "")
        + (f"\nFix: {f.fix.description}" if f.fix else "")
    )
    result = {
        "ruleId": f.rule_id,
        "ruleIndex": index[f.rule_id],
        "level": LEVEL[f.severity],
        "message": {"text": text},
        "locations": [
            _location(primary.path, primary.line, primary.column, lines=lines)
            if primary
            else _location(f.path or ".", 1, 1)
        ],
        "properties": {"confidence": f.confidence, "phase": f.phase},
    }
    related = [_location(e.location.path, e.location.line, e.location.column, e.note, lines) for e in located[1:]]
    if related:
        for i, r in enumerate(related):
            r["id"] = i
        result["relatedLocations"] = related
    if f.fix and f.fix.edits:
        result["properties"]["fixEdits"] = [e.describe() for e in f.fix.edits]
    path = primary.path if primary else (f.path or ".")
    source = (lines.get(primary.path, primary.line) or located[0].excerpt) if primary else f.message
    key = fingerprint(f.rule_id, path, source)
    seen[key] = seen.get(key, 0) + 1  # the same rule twice on identical lines of a file: told apart by order
    result["partialFingerprints"] = {"precisionDoctor/v2": f"{key}:{seen[key]}"}
    return result


def render(result: Result, facts: Facts, exit_code: int = 0) -> str:
    all_rules = rules()
    index = {r.id: i for i, r in enumerate(all_rules)}
    lines: SourceLines = SourceLines()
    seen: dict[str, int] = {}
    run = {
        "tool": {
            "driver": {
                "name": "precision-doctor",
                "version": __version__,
                "semanticVersion": __version__,
                "rules": [_rule_descriptor(r) for r in all_rules],
            }
        },
        "originalUriBaseIds": {SRCROOT: {"uri": Path(os.getcwd()).as_uri() + "/"}},
        "results": shown_data([_result(f, index, lines, seen) for f in result.findings]),
        "invocations": shown_data(
            [
                {
                    "executionSuccessful": not result.crashed,
                    "exitCode": exit_code,
                    "toolExecutionNotifications": [
                        {"level": "error", "message": {"text": f"check {c.rule_id} crashed: {c.reason}"}}
                        for c in result.crashed
                    ],
                }
            ]
        ),
        "properties": {"machine": shown_data(facts.machine.describe())},
    }
    return dumps({"$schema": SARIF_SCHEMA, "version": "2.1.0", "runs": [run]}, indent=2)
