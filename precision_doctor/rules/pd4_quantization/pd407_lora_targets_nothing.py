"""PD407 lora-targets-nothing: the LoRA config names no module peft can find, so attaching the adapters fails."""

from __future__ import annotations

import re

from ...derive import Setup, evidence_of
from ...derive.setup import adapter_config
from ...model.facts import ABSENT, KNOWN, ScriptFacts
from ...model.findings import Applicability, Draft, Fix
from ..registry import Example, LogSignature, rule

# Per-layer module names: each sits inside a block (`model.layers.0.self_attn.q_proj`), never at the top of a
# pretrained model, so peft's full match of a string target (peft 0.21 tuners/tuners_utils.py:2371, calling
# utils/other.py:1516 match_target_against_key: re.fullmatch) finds none of them
LAYER_MODULES = frozenset(
    {
        "q_proj",
        "k_proj",
        "v_proj",
        "o_proj",
        "qkv_proj",
        "gate_proj",
        "up_proj",
        "down_proj",
        "gate_up_proj",
        "c_attn",
        "c_proj",
        "c_fc",
        "query_key_value",
        "query",
        "key",
        "value",
        "dense",
        "dense_h_to_4h",
        "dense_4h_to_h",
        "fc1",
        "fc2",
        "w1",
        "w2",
        "w3",
        "Wqkv",
        "out_proj",
        "wq",
        "wk",
        "wv",
        "wo",
    }
)

_HEAD = (
    "from peft import LoraConfig, get_peft_model\n"
    "from transformers import AutoModelForCausalLM, Trainer, TrainingArguments\n\n"
    "model = AutoModelForCausalLM.from_pretrained('meta-llama/Llama-3.2-1B', dtype='bfloat16')\n"
)
_SCRIPT = _HEAD + (
    "model = get_peft_model(model, LoraConfig(r=16, target_modules={targets}))\n"
    "Trainer(model=model, args=TrainingArguments('out', bf16=True)).train()\n"
)
_AXOLOTL = "base_model: meta-llama/Llama-3.2-1B\nadapter: lora\nlora_r: 16\nbf16: true\nmicro_batch_size: 2\n"


def _layer_names(value: str) -> list[str]:
    """The module names a string lists ("q_proj", "q_proj,v_proj", "q_proj v_proj"), when it is only names every
    layer holds: none of them is a whole module name, so peft's one pattern over full names matches nothing."""
    names = [n for n in re.split(r"[,\s]+", value.strip()) if n]
    return names if names and all(n in LAYER_MODULES for n in names) else []


UNKNOWN_VALUE = object()  # a keyword written with a value the doctor cannot decide


def _known(config, name: str) -> object:
    """The keyword's value: None where it is not written, UNKNOWN_VALUE where it cannot be decided."""
    v = config.kwarg(name)
    return v.value if v.state == KNOWN else None if v.state == ABSENT else UNKNOWN_VALUE


@rule(
    "PD407",
    "lora-targets-nothing",
    severity="error",
    phase="load",
    summary="The LoRA config names no module peft can find: attaching the adapters fails.",
    what="`LoraConfig(target_modules=...)` that matches nothing: one module name written as a string "
    '(`target_modules="q_proj"`), which peft reads as a regular expression over each module\'s full name '
    "(`model.layers.0.self_attn.q_proj`), or an empty list without `target_parameters`. An Axolotl recipe with "
    "an adapter and neither `lora_target_modules` nor `lora_target_linear` is the empty list: Axolotl passes "
    "`cfg.lora_target_modules or []`, never peft's per-architecture default (loaders/adapter.py:171-190).",
    why="A list names modules by their last name (`['q_proj']` matches every layer's `...q_proj`); a string is "
    "one pattern that must match the whole name, and a bare name matches only a top-level module. peft raises "
    "when nothing matched, at `get_peft_model` (or the trainer's `peft_config=`), after the model has loaded. "
    "Reproduced on the CPU with peft 0.21 on a small Llama.",
    error="peft.utils.error.NoMatchingPeftModuleError: Target modules q_proj not found in the base model. Please "
    "check the target modules and try again.",
    fix='Write the module names as a list (`target_modules=["q_proj", "v_proj"]`), or `"all-linear"`; in an Axolotl '
    "recipe, `lora_target_modules: [q_proj, v_proj]` or `lora_target_linear: true`.",
    applicability=Applicability.DISPLAY,
    log=LogSignature(
        patterns=(
            r"Target modules .* not found in the base model",
            r"No `target_modules` passed but also no `target_parameters` found",
        )
    ),
    fires=[
        Example(_SCRIPT.format(targets="'q_proj'"), note="one name as a string: a pattern over the full names"),
        Example(_SCRIPT.format(targets="[]"), note="an empty list"),
        Example(_AXOLOTL, target="a100", name="config.yml", note="Axolotl: an adapter and no target at all"),
        Example(_AXOLOTL + "lora_target_modules: q_proj\n", target="a100", name="config.yml"),
    ],
    silent=[
        Example(_SCRIPT.format(targets="['q_proj']"), note="a list of names"),
        Example(_SCRIPT.format(targets="'all-linear'")),
        Example(_SCRIPT.format(targets="r'.*\\.(q_proj|v_proj)'"), note="a pattern over the full names"),
        Example(
            _HEAD + "model = get_peft_model(model, LoraConfig(r=16))\n"
            "Trainer(model=model, args=TrainingArguments('out', bf16=True)).train()\n",
            note="no target_modules: peft's default for the architecture",
        ),
        Example(_AXOLOTL + "lora_target_linear: true\n", target="a100", name="config.yml"),
        Example(
            _AXOLOTL + "lora_target_modules: q_proj\nlora_target_linear: true\n",
            target="a100",
            name="config.yml",
            note="Axolotl wraps the string in a list beside the linear names",
        ),
        Example(_AXOLOTL + "lora_target_modules:\n  - q_proj\n  - v_proj\n", target="a100", name="config.yml"),
    ],
)
def lora_targets_nothing(script: ScriptFacts, setup: Setup):
    if not setup.peft.value or setup.peft.call is None:
        return
    if script.recipe is None and setup.model_load is None:
        return  # a model the script builds itself may hold a layer by that name at its top (`self.fc1`)
    config = adapter_config(setup.peft.call, {c.key: c for c in script.calls})
    if config is None or not config.callee.endswith("LoraConfig"):
        return
    parameters = _known(config, "target_parameters")
    if parameters is UNKNOWN_VALUE or parameters:
        return  # parameters targeted instead (MoE experts), or not known
    targets = config.kwarg("target_modules")
    if targets.state != KNOWN:
        return
    value = targets.value
    excluded = [_known(config, "modules_to_save"), _known(config, "exclude_modules")]
    if any(e is UNKNOWN_VALUE for e in excluded):
        return
    skipped = (
        "No modules were targeted for adaptation. This might be caused by a combination of mismatched target "
        "modules and excluded modules. Please check your `target_modules` and `exclude_modules` configuration. You "
        "may also have only targeted modules that are marked to be saved (`modules_to_save`)."
    )
    if isinstance(value, (list, tuple, set)) and not value:
        said = "an empty list: no module is targeted"
        error = (
            skipped
            if any(excluded)
            else "No `target_modules` passed but also no `target_parameters` found. Please check the values for "
            "these arguments."
        )
        fix = 'name the modules: target_modules=["q_proj", "v_proj"] (or "all-linear")'
    elif isinstance(value, str) and _layer_names(value):
        names = _layer_names(value)
        said = (
            f"\"{value}\", a string: peft matches it as one pattern against each module's full name (a layer's "
            f"`...{names[0]}`) and finds none"
        )
        error = (
            skipped
            if any(excluded)
            else f"Target modules {value} not found in the base model. Please check the target modules and try again."
        )
        fix = f"target_modules={names!r} (a list matches the name in every layer)"
        layers = _known(config, "layers_to_transform")
        if layers is not UNKNOWN_VALUE and layers is not None:  # refused as the config is built
            yield Draft(
                f'LoraConfig\'s target_modules is "{value}", a string, beside layers_to_transform: peft refuses '
                "the config",
                evidence=(evidence_of(targets, f"target_modules={value!r}", config),),
                error="ValueError: `layers_to_transform` cannot be used when `target_modules` is a str.",
                fix=Fix(fix, Applicability.DISPLAY),
                phase="config",
            )
            return
    else:
        return
    if script.recipe is not None:  # said in the recipe's own keys
        said = (
            "empty: the recipe names no lora_target_modules and no lora_target_linear"
            if not value
            else f'"{value}", one string: {script.recipe.family} passes it to peft as written, a pattern over each '
            "module's full name"
        )
        fix = "list the modules (lora_target_modules: [q_proj, v_proj]) or set lora_target_linear: true"
    yield Draft(
        f"LoraConfig's target_modules is {said}: peft finds no module to attach the adapters to, once the model "
        "has loaded",
        evidence=(evidence_of(targets, f"target_modules={value!r}", config), *setup.peft.evidence),
        error=f"peft.utils.error.NoMatchingPeftModuleError: {error}",
        fix=Fix(fix, Applicability.DISPLAY),
    )
