"""Every registered rule, with the check modules loaded."""

from __future__ import annotations

from .. import rules as checks  # noqa: F401  (importing the package registers every rule)
from .registry import REGISTRY, Rule


def rules() -> list[Rule]:
    return sorted(REGISTRY.values(), key=lambda r: r.id)


def get_rule(rule_id: str) -> Rule | None:
    """A rule by id (any case) or by name."""
    found = REGISTRY.get(rule_id.upper())
    if found is None:
        found = next((r for r in REGISTRY.values() if r.name == rule_id), None)
    return found


def related(rule_id: str) -> set[str]:
    """The rule and the rules it declares to share its error text (declared on both sides: a test checks)."""
    r = REGISTRY.get(rule_id)
    return {rule_id} | set(r.related if r else ())
