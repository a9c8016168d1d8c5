"""Field defaults of the argument dataclasses that HfArgumentParser / TrlParser fill.

Library classes (TrainingArguments, TRL configs, TRL ModelConfig): the defaults of the fields the
checks read, as the current releases declare them (transformers 5.x `training_args.py`, TRL
`trainer/base_config.py` and `trainer/model_config.py`). Classes defined in the script: read from
their AST.
"""

from __future__ import annotations

import ast
from typing import Any

from ..facts import Origin
from .scopes import dotted

TRAINING_ARGUMENTS_DEFAULTS: dict[str, Any] = {
    "fp16": False, "bf16": False, "fp16_full_eval": False, "bf16_full_eval": False, "tf32": None,
    "gradient_checkpointing": False, "gradient_checkpointing_kwargs": None, "optim": "adamw_torch",
    "deepspeed": None, "use_cpu": False, "half_precision_backend": "auto", "max_grad_norm": 1.0,
    "ddp_find_unused_parameters": None, "fsdp": "", "fsdp_config": None,
}

# TRL's base config: `bf16 = not fp16` when unset, gradient checkpointing on by default.
TRL_CONFIG_DEFAULTS: dict[str, Any] = {**TRAINING_ARGUMENTS_DEFAULTS, "bf16": None, "gradient_checkpointing": True}

TRL_MODEL_CONFIG_DEFAULTS: dict[str, Any] = {
    "model_name_or_path": None, "dtype": "float32", "torch_dtype": "float32", "attn_implementation": None,
    "use_peft": False, "load_in_8bit": False, "load_in_4bit": False, "bnb_4bit_quant_type": "nf4",
    "use_bnb_nested_quant": False, "lora_modules_to_save": None,
}

TRAINING_ARGUMENT_CLASSES = {
    "TrainingArguments", "Seq2SeqTrainingArguments",
}


def is_trl_config(qualified: str) -> bool:
    last = qualified.rsplit(".", 1)[-1]
    return qualified.startswith("trl") and last.endswith("Config") and last not in ("ModelConfig", "ScriptArguments")


def is_training_arguments(qualified: str) -> bool:
    return qualified.rsplit(".", 1)[-1] in TRAINING_ARGUMENT_CLASSES or is_trl_config(qualified)


def library_defaults(qualified: str) -> dict[str, Any] | None:
    last = qualified.rsplit(".", 1)[-1]
    if is_trl_config(qualified):
        return TRL_CONFIG_DEFAULTS
    if last in TRAINING_ARGUMENT_CLASSES:
        return TRAINING_ARGUMENTS_DEFAULTS
    if last == "ModelConfig" and qualified.startswith("trl"):
        return TRL_MODEL_CONFIG_DEFAULTS
    return None


def dataclass_fields(resolver, qualified: str, class_node: ast.AST) -> dict[str, Any]:
    """Defaults of a dataclass's fields as resolver symbols."""
    from .resolve import Dyn, Known

    lib = library_defaults(qualified)
    if lib is not None:
        short = qualified.rsplit(".", 1)[-1]
        return {k: Known(v, (Origin("default", f"{short} default"),)) for k, v in lib.items()}
    local = resolver.index.classes.get(dotted(class_node))
    if local is None:
        return {}
    fields: dict[str, Any] = {}
    for base in local.bases:  # a local subclass of TrainingArguments inherits its defaults
        inherited = library_defaults(resolver.qualified(base))
        if inherited:
            fields.update({k: Known(v, (Origin("default", f"{dotted(base)} default"),)) for k, v in inherited.items()})
    scope = resolver.index.module
    for stmt in local.body:
        if not isinstance(stmt, ast.AnnAssign) or not isinstance(stmt.target, ast.Name):
            continue
        name = stmt.target.id
        default = stmt.value
        if isinstance(default, ast.Call) and dotted(default.func).endswith("field"):
            default = next((k.value for k in default.keywords if k.arg == "default"), None)
        if default is None:
            fields[name] = Dyn(f"{name} has no default and comes from the command line")
            continue
        sym = resolver.sym(default, scope, _ctx(resolver))
        if isinstance(sym, Known):
            sym = Known(sym.value, (Origin("default", f"default of {local.name}.{name}", resolver.loc(default)),),
                        resolver.loc(default))
        fields[name] = sym
    return fields


def _ctx(resolver):
    from .resolve import Context

    return Context(resolver.script_args)
