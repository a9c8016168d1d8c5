"""Fields of the argument dataclasses that HfArgumentParser / TrlParser fill: their defaults and which are bool.

Library classes (TrainingArguments, TRL configs, TRL ModelConfig): the type and default of the fields the
checks read, as the current releases declare them (transformers 5.x `training_args.py`, TRL
`trainer/base_config.py` and `trainer/model_config.py`). Classes defined in the script: read from their AST.
A bool field parses `--flag`, `--flag False` and `--no_flag` (HfArgumentParser's rules); whether a field is
bool comes from these declarations, never from its name.
"""

from __future__ import annotations

import ast
from typing import Any

from ..call_kinds import TRAINING_ARGUMENT_CLASSES, is_trl_config
from ..facts import Origin
from .scopes import dotted
from .symbols import Context, Dyn, Known

# name -> (type, default)
TRAINING_ARGUMENTS_FIELDS: dict[str, tuple[type, Any]] = {
    "fp16": (bool, False), "bf16": (bool, False), "fp16_full_eval": (bool, False), "bf16_full_eval": (bool, False),
    "tf32": (bool, None), "gradient_checkpointing": (bool, False), "gradient_checkpointing_kwargs": (dict, None),
    "optim": (str, "adamw_torch"), "deepspeed": (str, None), "use_cpu": (bool, False),
    "half_precision_backend": (str, "auto"), "max_grad_norm": (float, 1.0), "ddp_find_unused_parameters": (bool, None),
    "fsdp": (str, ""), "fsdp_config": (str, None),
}

# TRL's base config: `bf16 = not fp16` when unset, gradient checkpointing on by default.
TRL_CONFIG_FIELDS: dict[str, tuple[type, Any]] = {**TRAINING_ARGUMENTS_FIELDS, "bf16": (bool, None),
                                                   "gradient_checkpointing": (bool, True)}

TRL_MODEL_CONFIG_FIELDS: dict[str, tuple[type, Any]] = {
    "model_name_or_path": (str, None), "dtype": (str, "float32"), "torch_dtype": (str, "float32"),
    "attn_implementation": (str, None), "use_peft": (bool, False), "load_in_8bit": (bool, False),
    "load_in_4bit": (bool, False), "bnb_4bit_quant_type": (str, "nf4"), "use_bnb_nested_quant": (bool, False),
    "lora_modules_to_save": (list, None),
}

BOOL_ANNOTATIONS = {"bool", "Optional[bool]", "bool | None", "None | bool", "Union[bool, None]",
                    "typing.Optional[bool]", "Union[None, bool]"}


def library_fields(qualified: str) -> dict[str, tuple[type, Any]] | None:
    last = qualified.rsplit(".", 1)[-1]
    if is_trl_config(qualified):
        return TRL_CONFIG_FIELDS
    if last in TRAINING_ARGUMENT_CLASSES:
        return TRAINING_ARGUMENTS_FIELDS
    if last == "ModelConfig" and qualified.startswith("trl"):
        return TRL_MODEL_CONFIG_FIELDS
    return None


def dataclass_fields(resolver, qualified: str, class_node: ast.AST) -> tuple[dict[str, Any], frozenset[str]]:
    """Defaults of a dataclass's fields as resolver symbols, and the names of its bool fields."""
    lib = library_fields(qualified)
    if lib is not None:
        short = qualified.rsplit(".", 1)[-1]
        return ({k: Known(v, (Origin("default", f"{short} default"),)) for k, (_, v) in lib.items()},
                frozenset(k for k, (t, _) in lib.items() if t is bool))
    local = resolver.index.classes.get(dotted(class_node))
    if local is None:
        return {}, frozenset()
    fields: dict[str, Any] = {}
    bools: set[str] = set()
    for base in local.bases:  # a local subclass of TrainingArguments inherits its fields
        inherited = library_fields(resolver.qualified(base))
        if inherited:
            fields.update({k: Known(v, (Origin("default", f"{dotted(base)} default"),))
                           for k, (_, v) in inherited.items()})
            bools.update(k for k, (t, _) in inherited.items() if t is bool)
    scope = resolver.index.module
    for stmt in local.body:
        if not isinstance(stmt, ast.AnnAssign) or not isinstance(stmt.target, ast.Name):
            continue
        name = stmt.target.id
        if resolver.text(stmt.annotation).replace("'", "").replace('"', "") in BOOL_ANNOTATIONS:
            bools.add(name)
        default = stmt.value
        if isinstance(default, ast.Call) and dotted(default.func).endswith("field"):
            default = next((k.value for k in default.keywords if k.arg == "default"), None)
        if default is None:
            fields[name] = Dyn(f"{name} has no default and comes from the command line")
            continue
        sym = resolver.sym(default, scope, Context(resolver.script_args))
        if isinstance(sym, Known):
            sym = Known(sym.value, (Origin("default", f"default of {local.name}.{name}", resolver.loc(default)),),
                        resolver.loc(default))
        fields[name] = sym
    return fields, frozenset(bools)
