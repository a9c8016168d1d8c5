"""Every registered rule, with the rule modules loaded: importing a rule's file registers it, so adding a rule is
adding a file in its series' folder, never a list."""

from __future__ import annotations

import importlib
import pkgutil
from functools import lru_cache

from .registry import REGISTRY, Rule


@lru_cache(maxsize=1)
def _load() -> None:
    from . import __path__ as here

    for info in pkgutil.walk_packages(here, prefix=f"{__package__}."):
        parts = info.name.split(".")[2:]  # below precision_doctor.rules
        if not info.ispkg and len(parts) == 2 and parts[0].startswith("pd") and not parts[1].startswith("_"):
            importlib.import_module(info.name)


def rules() -> list[Rule]:
    _load()
    return sorted(REGISTRY.values(), key=lambda r: r.id)


def get_rule(rule_id: str) -> Rule | None:
    """A rule by id (any case) or by name."""
    _load()
    found = REGISTRY.get(rule_id.upper())
    if found is None:
        found = next((r for r in REGISTRY.values() if r.name == rule_id), None)
    return found


def related(rule_id: str) -> set[str]:
    """The rule and the rules it declares to share its error text (declared on both sides: a test checks)."""
    _load()
    r = REGISTRY.get(rule_id)
    return {rule_id} | set(r.related if r else ())
