"""Recipes that fill HfArgumentParser / TrlParser dataclasses: `parser.parse_yaml_file("sft.yaml")`,
`parse_json_file`, `parse_dict(cfg)`, and TRL's `--config recipe.yaml` (the way TRL's scripts and the alignment
recipes are run). A recipe's values replace the dataclass defaults; command-line options then replace the
recipe's, the order TrlParser applies them in (`set_defaults_with_config`, then the arguments)."""

from __future__ import annotations

import ast
from pathlib import Path

from ...system.sources import Unreadable
from ..config_files import ConfigError, display, find_config, read_config
from ..symbols import DictSym, Dyn, Known
from .config_loaders import doc_symbol

CONFIG_FLAG = "--config"


def recipe_from_command_line(r, args: list[str]) -> dict | Dyn:
    """The values of the YAML `--config FILE` names in the script's arguments ({} when none is given)."""
    name = None
    for i, word in enumerate(args):
        if word == CONFIG_FLAG and i + 1 < len(args):
            name = args[i + 1]
        elif word.startswith(CONFIG_FLAG + "="):
            name = word.split("=", 1)[1]
    if name is None:
        return {}
    return _recipe_file(r, name, f"{CONFIG_FLAG} {name}", (Path.cwd(), Path(r.path).parent))


def recipe_from_call(r, call: ast.Call, method: str, scope, ctx, depth) -> dict | Dyn:
    arg = (
        call.args[0]
        if call.args
        else next((k.value for k in call.keywords if k.arg in ("json_file", "yaml_file", "args")), None)
    )
    if arg is None:
        return Dyn(f"{method}() without a file or dict")
    found = r.sym(arg, scope, ctx, depth)
    if method == "parse_dict":
        if isinstance(found, DictSym):
            return _flat(found)
        return Dyn(f"parse_dict({r.text(arg)[:40]}): the dict is built at run time")
    if isinstance(found, Known) and isinstance(found.value, (str, Path)):
        name = str(found.value)
        return _recipe_file(r, name, f"{r.path}:{call.lineno} {method}({name!r})", (Path(r.path).parent, Path.cwd()))
    return Dyn(f"{method}({r.text(arg)[:40]}): the file's path is not known; pass it after --")


def _recipe_file(r, name: str, via: str, bases: tuple[Path, ...]) -> dict | Dyn:
    found = find_config(name, bases)
    if found is None:
        return Dyn(f"the recipe {name} is not here (looked in the working directory and next to the script)")
    key = ("recipe", str(found))
    doc = r.memo.get(key)
    if doc is None:
        try:
            doc = read_config(found, display(found))
        except (Unreadable, ConfigError) as exc:
            return Dyn(f"the recipe {name}: {getattr(exc, 'reason', None) or exc}")
        r.memo[key] = doc
    return _flat(doc_symbol(doc, via))


def _flat(d: DictSym) -> dict:
    """A recipe's top-level keys are the dataclass fields; a nested mapping is one field's dict value."""
    out = {}
    for k, v in d.items.items():
        if isinstance(v, DictSym):
            plain = _plain(v)
            out[k] = Known(plain, (), v.location) if plain is not None else Dyn(f"{k} has run-time parts")
        else:
            out[k] = v
    return out


def _plain(d: DictSym):
    out = {}
    for k, v in d.items.items():
        if isinstance(v, DictSym):
            inner = _plain(v)
            if inner is None:
                return None
            out[k] = inner
        elif isinstance(v, Known):
            out[k] = v.value
        else:
            return None
    return out
