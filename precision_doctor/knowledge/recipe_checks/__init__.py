"""What recipe frameworks themselves refuse or warn about when they read a recipe, mirrored from their source: each
check names the file and lines it mirrors, the framework's own message, the settings it reads, and a recipe it
fires on with its accepted twin (tests run both). Rules PD701 (refuses) and PD702 (warns) report them; the
readers in probes/config_families model what the frameworks silently change.

A check reads the recipe as written (`RecipeView`): its settings by dotted path, and where the framework asks the
machine (a GPU's compute capability, bf16 support, the torch release), the target or this machine's GPU and the
job's stack. A check whose answer needs a GPU the doctor does not know stays silent."""

from __future__ import annotations

from . import axolotl, llamafactory
from ._check import RecipeCheck, RecipeView

__all__ = ["RecipeCheck", "RecipeView", "checks_for"]

_BY_FAMILY = {axolotl.FAMILY: axolotl.CHECKS, llamafactory.FAMILY: llamafactory.CHECKS}


def checks_for(family: str) -> tuple[RecipeCheck, ...]:
    return _BY_FAMILY.get(family, ())
