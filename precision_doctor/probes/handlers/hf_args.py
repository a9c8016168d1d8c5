"""HfArgumentParser / TrlParser and TRL's config helpers: dataclass fields with their defaults, overridden
by the command line the doctor was given, the way HfArgumentParser reads it."""

from __future__ import annotations

import ast

from ...model.facts import Origin
from ..dataclass_defaults import dataclass_fields
from ..symbols import Dyn, Known, Namespace, ObjSym, Seq
from ._command_line import BOOL_STRINGS, coerce
from ._recipes import recipe_from_call, recipe_from_command_line

PARSE_METHODS = {"parse_args_into_dataclasses", "parse_args_and_config"}  # these read the command line
FILE_METHODS = {"parse_dict", "parse_yaml_file", "parse_json_file"}  # these read a file or dict at run time
# TRL recipes: None unless the model config turns the feature on
TRL_HELPERS = {"trl.get_peft_config": ("use_peft",), "trl.get_quantization_config": ("load_in_4bit", "load_in_8bit")}

METHODS = PARSE_METHODS | FILE_METHODS
CALLS = set(TRL_HELPERS)


def resolve(r, node, scope, ctx, depth):
    if not isinstance(node, ast.Call):
        return None
    callee = r.qualified(node.func)
    if callee in TRL_HELPERS:
        return _trl_helper(r, node, callee, scope, ctx, depth) if node.args else None
    if not isinstance(node.func, ast.Attribute):
        return None
    return _dataclasses(r, node, node.func.value, scope, ctx, depth, node.func.attr)


def _trl_helper(r, node, callee, scope, ctx, depth):
    config = r.sym(node.args[0], scope, ctx, depth)
    flags = [r.member(config, f, node, ctx, depth) for f in TRL_HELPERS[callee]]
    if all(isinstance(f, Known) and not f.value for f in flags):
        return Known(None, tuple(o for f in flags for o in f.origins), r.loc(node))
    if any(isinstance(f, Known) and f.value for f in flags):
        return ObjSym(node, scope, callee)
    return Dyn(f"{r.text(node)} depends on run-time options")


def _dataclasses(r, call: ast.Call, parser_node: ast.AST, scope, ctx, depth, method: str):
    parser = r.sym(parser_node, scope, ctx, depth)
    if not isinstance(parser, ObjSym) or not parser.call.args:
        return Dyn("an argument parser that cannot be followed")
    spec = parser.call.args[0]
    if isinstance(spec, ast.Name):  # dataclass_types = (ScriptArguments, SFTConfig, ...); TrlParser(dataclass_types)
        spec = r.assigned_node(spec.id, parser.scope) or spec
    classes = spec.elts if isinstance(spec, (ast.Tuple, ast.List)) else [spec]
    args = list(ctx.script_args)
    if method in PARSE_METHODS:
        config = recipe_from_command_line(r, args) if method == "parse_args_and_config" else {}
    else:  # parse_yaml_file / parse_json_file / parse_dict: the file or dict alone, no command line
        config, args = recipe_from_call(r, call, method, scope, ctx, depth), []
    if isinstance(config, Dyn):
        return Seq(tuple(config for _ in classes))
    out = []
    for cls in classes:
        name = r.qualified(cls)
        fields, bools = dataclass_fields(r, name, cls)
        fields = {**fields, **{k: v for k, v in config.items() if k in fields or not fields}}
        out.append(
            Namespace(
                apply_command_line(fields, bools, args),
                f"the {name.rsplit('.', 1)[-1]} fields",
                class_name=name,
                location=r.loc(call),
            )
        )
    return Seq(tuple(out))


def apply_command_line(fields: dict, bools: frozenset[str], args: list[str]) -> dict:
    """Apply `--name value` / `--flag` / `--flag True` / `--no_flag` the way HfArgumentParser reads them."""
    out = dict(fields)
    i = 0
    while i < len(args):
        tok = args[i]
        if not tok.startswith("--"):
            i += 1
            continue
        name, eq, inline = tok[2:].partition("=")
        name = name.replace("-", "_")
        negated = name.startswith("no_") and name[3:] in fields
        key = name[3:] if negated else name
        if key not in fields:
            i += 1
            continue
        current = fields[key]
        is_bool = key in bools or isinstance(current, Known) and isinstance(current.value, bool)
        origin = (Origin("script-arg", f"{tok if not eq else tok.split('=')[0]} on the command line"),)
        if negated:
            out[key] = Known(False, origin)
            i += 1
        elif eq:
            out[key] = Known(coerce(inline, is_bool), origin)
            i += 1
        elif is_bool:
            nxt = args[i + 1] if i + 1 < len(args) else None
            if nxt is not None and nxt.lower() in BOOL_STRINGS:
                out[key] = Known(BOOL_STRINGS[nxt.lower()], origin)
                i += 2
            else:
                out[key] = Known(True, origin)
                i += 1
        else:
            nxt = args[i + 1] if i + 1 < len(args) else ""
            out[key] = Known(coerce(nxt, False), origin)
            i += 2
    return out
