"""`check CONFIG.yaml`: a training config checked as the tool that consumes it would run it.

The family is recognised by its keys, and the config becomes the calls that tool makes: a model load (with its
dtype, quantization and attention implementation), PEFT wrapping, TrainingArguments and a Trainer, each value
pointing at the YAML line that writes it (or named as the tool's default). Every existing rule then reads it
like a script. One module per family (its detection, the keys it reads, the release it mirrors, `build`), tried in
the order of FAMILIES; how a family's own CLI launches lives in knowledge/launchers.py (RECIPE_CLIS), which the
derivation reads. Adding a family is a module here, its entry in FAMILIES, and its CLI's row there.
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

from ...model.errors import InputError
from ...model.facts import ScriptFacts
from ...system.sources import Unreadable
from ..config_files import ConfigDoc, ConfigError, read_config
from . import accelerate, axolotl, llamafactory
from ._builder import Builder

FAMILIES: tuple[ModuleType, ...] = (axolotl, llamafactory, accelerate)  # the first whose keys match
CONFIG_SUFFIXES = (".yaml", ".yml", ".json")


def is_config_path(path: Path) -> bool:
    return path.suffix.lower() in CONFIG_SUFFIXES


def family_of(doc: ConfigDoc) -> ModuleType | None:
    return next((family for family in FAMILIES if family.detects(doc)), None)


def probe_config(path: Path, shown: str) -> ScriptFacts:
    """A config's facts; InputError when it cannot be read or is no family the doctor knows."""
    try:
        doc = read_config(path, shown)
    except Unreadable:
        raise
    except ConfigError as exc:
        raise InputError(f"{shown}: {exc}; pass an Axolotl, LLaMA-Factory or accelerate config") from None
    family = family_of(doc)
    if family is None and doc.has("model") and doc.has("model_class"):
        raise InputError(
            f"{shown}: a LLaMA-Factory v1 config (model, model_class), a format the doctor does not "
            f"model yet; check a config in the 0.9 format (model_name_or_path, stage, finetuning_type) "
            f"or the training script"
        )
    if family is None:
        raise InputError(
            f"{shown}: not a config the doctor recognises (Axolotl: base_model; LLaMA-Factory: "
            f"model_name_or_path with stage/finetuning_type; accelerate: compute_environment); "
            f"pass a training script or one of those configs"
        )
    return family.build(Builder(doc, family.NAME, family.VERSION, path))
