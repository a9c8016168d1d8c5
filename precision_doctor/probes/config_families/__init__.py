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
from typing import Any

from ...model.errors import InputError
from ...model.facts import ScriptFacts
from ...model.util import CONFIG_SUFFIXES as CONFIG_SUFFIXES
from ...model.util import is_config_path as is_config_path
from ...system.sources import Unreadable
from ..config_files import ConfigDoc, ConfigError, read_config
from . import accelerate, axolotl, llamafactory, trl
from ._builder import Builder

FAMILIES: tuple[ModuleType, ...] = (axolotl, llamafactory, trl, accelerate)  # the first whose keys match


def family_of(doc: ConfigDoc) -> ModuleType | None:
    return next((family for family in FAMILIES if family.detects(doc)), None)


def probe_config(path: Path, shown: str, args: tuple[str, ...] = ()) -> ScriptFacts:
    """A config's facts; InputError when it cannot be read or is no family the doctor knows. `args`: the words
    after it on the launch line, which its tool's CLI merges over it (`llamafactory-cli train x.yaml lr=1e-5`,
    `axolotl train x.yml --micro-batch-size 2`)."""
    try:
        doc = read_config(path, shown)
    except Unreadable:
        raise
    except ConfigError as exc:
        raise InputError(f"{shown}: {exc}; pass an Axolotl, LLaMA-Factory, TRL or accelerate config") from None
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
            f"model_name_or_path with stage/finetuning_type; TRL: model_name_or_path with dataset_name; "
            f"accelerate: compute_environment); "
            f"pass a training script or one of those configs"
        )
    if args:
        doc = doc.overridden(dotlist_overrides(args) if family is llamafactory else launch_overrides(args))
    return family.build(Builder(doc, family.NAME, family.VERSION, path))


def dotlist_overrides(args: tuple[str, ...]) -> dict[tuple, tuple[Any, str]]:
    """The words after an LLaMA-Factory recipe as OmegaConf.from_cli reads them (hparams/parser.py read_args, from
    0.9.3): `key=value` and `a.b=value`; any other word is a key of its own with no value, `--lr 1e-4` two keys
    `--lr` and `1e-4`, which its parser then refuses."""
    out: dict[tuple, tuple[Any, str]] = {}
    for word in args:
        key, eq, raw = word.partition("=")
        out[tuple(key.split(".")) if eq else (word,)] = (_scalar(raw) if eq else None, word)
    return out


def launch_overrides(args: tuple[str, ...]) -> dict[tuple, tuple[Any, str]]:
    """Settings on the launch line as Axolotl's CLI reads them: `--key value` / `--key=value` with dashes for
    underscores, `--no-key` for a false boolean, and `key=value` / `a.b=value`."""
    out: dict[tuple, tuple[Any, str]] = {}
    i = 0
    while i < len(args):
        word = args[i]
        if word.startswith("--") and len(word) > 2:
            name, eq, raw = word[2:].partition("=")
            if not eq and name.startswith("no-"):  # Axolotl's --no-flag for a boolean field (cli/utils/args.py)
                out[(name[3:].replace("-", "_"),)] = (False, word)
                i += 1
                continue
            if not eq and i + 1 < len(args) and not args[i + 1].startswith("--"):
                raw, i = args[i + 1], i + 1
                word = f"{word} {raw}"
            elif not eq:
                raw = "true"
            out[(name.replace("-", "_"),)] = (_scalar(raw), word)
        elif "=" in word and not word.startswith("-"):
            key, _, raw = word.partition("=")
            out[tuple(key.split("."))] = (_scalar(raw), word)
        i += 1
    return out


def _scalar(raw: str) -> Any:
    """A command-line value as YAML reads it: true/false, null, numbers (`2e-5`), else the text."""
    lowered = raw.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    if lowered in ("null", "none", "~"):
        return None
    for convert in (int, float):
        try:
            return convert(raw)
        except ValueError:
            pass
    return raw
