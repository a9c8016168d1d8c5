"""A rule's full documentation, in the sections of ruff's rule pages."""

from __future__ import annotations

from .registry import Rule


def severity_label(r: Rule) -> str:
    return r.severity if r.escalates_to == r.severity else f"{r.severity} (up to {r.escalates_to})"


def rule_doc(r: Rule) -> str:
    fires = r.fires[0]
    silent = r.silent[0]
    parts = [
        f"{r.id} {r.name}  ({severity_label(r)}; hit {r.phase.replace('-', ' ')})",
        "",
        r.summary,
        "",
        "What it does",
        f"  {r.what}",
        "",
        "Why is this bad?",
        f"  {r.why}",
        "",
        "The error",
        f"  {r.error}",
        "",
        "Example" + (f" (on --target {fires.target})" if fires.target else "") + (" job script" if fires.job else ""),
        _indent(fires.job or fires.code),
        "Use instead" + (f" (on --target {silent.target})" if silent.target else "") +
        (" job script" if silent.job else ""),
        _indent(silent.job or silent.code),
        "Fix",
        f"  {r.fix}",
        "",
        "Fix safety",
        f"  {r.applicability}: {r.fix_safety or 'the fix is described, not applied automatically.'}",
    ]
    return "\n".join(parts)


def _indent(code: str) -> str:
    return "\n".join("    " + line for line in code.rstrip().splitlines()) + "\n"


def rules_markdown(rules: list[Rule]) -> str:
    """The README's rule table, generated from the registry (a test keeps the README in step)."""
    rows = ["| id | name | severity | what it catches |", "|---|---|---|---|"]
    for r in rules:
        rows.append(f"| {r.id} | `{r.name}` | {severity_label(r)} | {r.summary.replace('|', '/')} |")
    return "\n".join(rows)
