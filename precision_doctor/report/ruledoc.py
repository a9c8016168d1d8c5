"""A rule's full documentation, in the sections of ruff's rule pages."""

from __future__ import annotations

import os

from ..rules.registry import Example, Rule

# Where the rule pages (docs/rules/PDxxx.md, generated from the registry) are read: a repository-relative path by
# default, since the project has no public site; set PRECISION_DOCTOR_DOCS_URL to the folder's web address
# (e.g. https://github.com/OWNER/REPO/blob/REF/docs/rules/) to make SARIF's helpUri absolute.
DOCS_DIR = "docs/rules/"
DOCS_URL_VARIABLE = "PRECISION_DOCTOR_DOCS_URL"


def help_uri(rule_id: str) -> str:
    base = os.environ.get(DOCS_URL_VARIABLE, "").strip() or DOCS_DIR
    return f"{base.rstrip('/')}/{rule_id}.md"


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
        "Example" + _context(fires, silent) + (" job script" if fires.job else ""),
        _indent(fires.job or fires.code),
        *_beside_text(fires.files),
        "Use instead" + _context(silent, fires) + (" job script" if silent.job else ""),
        _indent(silent.job or silent.code),
        *_beside_text({k: v for k, v in silent.files.items() if fires.files.get(k) != v}),
        "Fix",
        f"  {r.fix}",
        "",
        "Fix safety",
        f"  {r.applicability}: {r.fix_safety or 'the fix is described, not applied automatically.'}",
    ]
    return "\n".join(parts)


def _context(example: Example, other: Example, quote: str = "") -> str:
    """What the example runs on besides its code, where the other example differs: ` (on --target t4, with
    transformers 5.24.0, DISABLE_VERSION_CHECK=1)`; `quote` marks the option and variables as code."""
    parts = [f"on {quote}--target {example.target}{quote}"] if example.target else []
    versions = [f"{name} {v}" for name, v in example.versions.items() if other.versions.get(name) != v]
    parts += [f"with {', '.join(versions)}"] if versions else []
    parts += [f"{quote}{name}={v}{quote}" for name, v in example.env.items() if other.env.get(name) != v]
    return f" ({', '.join(parts)})" if parts else ""


def _language(example: Example) -> str:
    return (
        "yaml" if example.name.endswith((".yaml", ".yml")) else "json" if example.name.endswith(".json") else "python"
    )


def _beside(files: dict[str, str]) -> list[str]:
    """The files an example needs beside its script (a checkpoint's config.json and code), each in its block."""
    out = []
    for path, text in files.items():
        lang = "python" if path.endswith(".py") else "json" if path.endswith(".json") else "text"
        out += [f"with `{path}`:", "", f"```{lang}", text.rstrip(), "```", ""]
    return out


def _beside_text(files: dict[str, str]) -> list[str]:
    out = []
    for path, text in files.items():
        out += [f"  with {path}:", _indent(text)]
    return out


def _indent(code: str) -> str:
    return "\n".join("    " + line for line in code.rstrip().splitlines()) + "\n"


def rule_page(r: Rule) -> str:
    """A rule's page under docs/rules/, in ruff's sections (generated; a test keeps the files current)."""
    fires, silent = r.fires[0], r.silent[0]
    parts = [
        f"# {r.id} `{r.name}`",
        "",
        f"*{severity_label(r)}; the job hits it {r.phase.replace('-', ' ')}.* "
        "Generated from the rule's declaration: do not edit by hand.",
        "",
        r.summary,
        "",
        "## What it does",
        "",
        r.what,
        "",
        "## Why is this bad?",
        "",
        r.why,
        "",
        "## The error",
        "",
        "```text",
        r.error,
        "```",
        "",
        "## Example" + _context(fires, silent, "`"),
        "",
        f"```{_language(fires)}",
        fires.code.rstrip(),
        "```",
        "",
        *_beside(fires.files),
        "## Use instead" + _context(silent, fires, "`"),
        "",
        f"```{_language(silent)}",
        silent.code.rstrip(),
        "```",
        "",
        *_beside({k: v for k, v in silent.files.items() if fires.files.get(k) != v}),
        "## Fix",
        "",
        r.fix,
        "",
        "## Fix safety",
        "",
        f"{r.applicability}: {r.fix_safety or 'the fix is described, not applied automatically.'}",
    ]
    if r.related:
        parts += ["", "## Related", "", ", ".join(f"[{i}]({i}.md)" for i in r.related)]
    return "\n".join(parts) + "\n"


def rule_pages(rules: list[Rule]) -> dict[str, str]:
    """Every file of docs/rules/: one page per rule and an index."""
    pages = {f"{r.id}.md": rule_page(r) for r in rules}
    index = [
        "# Rules",
        "",
        "Generated from the registry (`pytest tests/test_rule_docs.py --update-golden`).",
        "",
        "| id | name | severity | what it catches |",
        "|---|---|---|---|",
    ]
    index += [
        f"| [{r.id}]({r.id}.md) | `{r.name}` | {severity_label(r)} | {r.summary.replace('|', '/')} |" for r in rules
    ]
    pages["README.md"] = "\n".join(index) + "\n"
    return pages
