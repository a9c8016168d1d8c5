"""Frameworks that check the library versions as they start, and what each release checks: read from the installed
framework's source (probes/installed_signatures.py), else from data/version_gates.json, built from each release's
wheel by tools/gen_version_gates.py."""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

from ..model.facts import GateRequirement, ScriptFacts, VersionGate

# package -> the file whose check_dependencies() runs as the framework starts (llamafactory-cli train imports
# hparams/parser.py, which calls it at module level: parser.py:47 in 0.9.5)
GATED = {"llamafactory": "llamafactory/extras/misc.py"}
# package -> (its recipes' family, the modules whose import runs the check: each imports hparams/parser.py; before
# 0.9.0 the package's __init__ imports its cli, so any import of it does)
_STARTED_BY = {
    "llamafactory": (
        "LLaMA-Factory",
        ("llamafactory.hparams", "llamafactory.train", "llamafactory.cli", "llamafactory.chat", "llamafactory.api"),
    )
}
_ANY_IMPORT_BEFORE = {"llamafactory": "0.9.0"}


def family_of(package: str) -> str:
    """The framework's name as its recipes' family is known: "LLaMA-Factory"."""
    return _STARTED_BY[package][0]


def runs_framework(script: ScriptFacts, package: str, version: str) -> bool:
    """Whether the job starts this framework at this release: a recipe of its family, or a script importing what
    runs its check."""
    from .versions import version_tuple

    family, starting = _STARTED_BY[package]
    if script.recipe is not None:
        return script.recipe.family == family
    modules: tuple[str, ...] = starting
    if version_tuple(version) < version_tuple(_ANY_IMPORT_BEFORE[package]):
        modules = (package,)
    return any(i == m or i.startswith(m + ".") for i in script.imports for m in modules)


@lru_cache(maxsize=1)
def _table() -> dict:
    path = Path(__file__).resolve().parent / "data" / "version_gates.json"
    return json.loads(path.read_text(encoding="utf-8"))["frameworks"]


def shipped_gate(package: str, version: str) -> VersionGate | None:
    """The check that release `version` of `package` runs, from the doctor's table; None for a release it lacks."""
    entry = _table().get(package, {})
    row = entry.get("releases", {}).get(version)
    if row is None:
        return None
    return VersionGate(
        package,
        version,
        tuple(GateRequirement(r, line, mandatory) for r, line, mandatory in row["requirements"]),
        tuple(row["disable_values"]),
        f"{package} {version} ({entry['file']}, the doctor's table of its releases)",
    )


def newest_accepting(package: str, versions: dict[str, str]) -> str:
    """The newest release of `package` in the table whose check accepts every one of these library versions; ""
    when none does."""
    from .versions import requirement_holds, requirement_name, version_tuple

    accepting = [
        release
        for release, row in _table().get(package, {}).get("releases", {}).items()
        if all(
            requirement_holds(r, versions[requirement_name(r)]) is not False
            for r, _, _ in row["requirements"]
            if requirement_name(r) in versions
        )
    ]
    return max(accepting, key=version_tuple, default="")
