"""What a script gives as keywords beyond its calls: the classes it defines (a dataclass of arguments, a subclass of
TrainingArguments or of a Trainer: what their constructor adds) and what its HfArgumentParser / TrlParser is
given at run time (each key of a recipe it reads, each option on the command line after `--`).

Read from the AST and the recipe files the resolver already reads; the rule that judges them against the version's
fields is checks/keywords.py.
"""

from __future__ import annotations

import ast
from dataclasses import replace

from ..model.facts import ClassFacts, Origin, ParsedArguments, Value
from .handlers._recipes import CONFIG_FLAG, recipe_from_call, recipe_from_command_line
from .library_source import dataclass_fields, signature
from .scopes import dotted
from .symbols import Context, Dyn, Known, ObjSym

PARSERS = ("HfArgumentParser", "TrlParser")
PARSER_PACKAGES = ("transformers", "trl")
FILE_METHODS = ("parse_yaml_file", "parse_json_file", "parse_dict")  # a recipe, no command line
COMMAND_LINE_METHODS = ("parse_args_into_dataclasses", "parse_args_and_config")
LIBRARIES = ("transformers", "trl", "peft", "sentence_transformers")


def local_classes(r) -> dict[str, ClassFacts]:
    """The script's dataclasses and its subclasses of library (or its own such) classes, by name."""
    out: dict[str, ClassFacts] = {}
    for name, node in r.index.classes.items():
        is_dataclass = any(
            dotted(d.func if isinstance(d, ast.Call) else d).endswith("dataclass") for d in node.decorator_list
        )
        bases = tuple(r.qualified(b.value if isinstance(b, ast.Subscript) else b) for b in node.bases)
        derived = any(b.split(".", 1)[0] in LIBRARIES or b in r.index.classes for b in bases)
        if not (is_dataclass or derived):
            continue
        init = next((s for s in node.body if isinstance(s, ast.FunctionDef) and s.name == "__init__"), None)
        if init is not None:
            fields, open_, _ = signature(init)
            out[name] = ClassFacts(name, r.loc(node), bases, tuple(fields), is_dataclass, True, open_ == "forwards")
        else:
            fields = dataclass_fields(node) if is_dataclass else {}
            out[name] = ClassFacts(name, r.loc(node), bases, tuple(fields), is_dataclass)
    return out


def parsed_arguments(r, calls: list[ast.Call]) -> tuple[ParsedArguments, ...]:
    """Each `parser.parse_*()` of an HfArgumentParser / TrlParser the script builds, with what it is given."""
    out: list[ParsedArguments] = []
    for node in calls:
        func = node.func
        if not isinstance(func, ast.Attribute) or func.attr not in FILE_METHODS + COMMAND_LINE_METHODS:
            continue
        scope = r.scope_of(node)
        ctx = Context(r.script_args)
        parser = r.sym(func.value, scope, ctx)
        if not isinstance(parser, ObjSym) or not _is_parser(parser.callee):
            continue
        classes = _dataclasses(r, parser)
        if not classes:
            continue
        parser_name = f"{parser.callee.split('.', 1)[0]}.{parser.callee.rsplit('.', 1)[-1]}"
        options = _added_options(r, parser, calls)
        common = dict(parser=parser_name, method=func.attr, location=r.loc(node), classes=classes, options=options)
        if func.attr in FILE_METHODS:
            recipe = recipe_from_call(r, node, func.attr, scope, ctx, 0)
            if isinstance(recipe, dict):
                arg = node.args[0] if node.args else None
                via = f"{func.attr}({r.text(arg)[:40]})" if arg is not None else func.attr
                out.append(
                    ParsedArguments(
                        **common,
                        keys=_values(r, recipe, node),
                        source="recipe",
                        via=via,
                        strict=_flag(r, node, "allow_extra_keys", 1, scope) is False,
                    )
                )
            continue
        if _given_args(node):
            continue  # the arguments are written in the script, not taken from the command line
        remaining = _flag(r, node, "return_remaining_strings", 0 if func.attr == COMMAND_LINE_METHODS[0] else 1, scope)
        args = list(r.script_args)
        if func.attr == "parse_args_and_config":
            recipe = recipe_from_command_line(r, args)
            if isinstance(recipe, dict) and recipe:
                unknown_ok = _flag(r, node, "fail_with_unknown_args", 2, scope, default=True) is not True
                legacy_ok = _flag(r, parser.call, "ignore_extra_args", -1, parser.scope) is not False
                name = _config_name(args)
                out.append(
                    ParsedArguments(
                        **common,
                        keys=_values(r, recipe, node),
                        source="recipe",
                        via=f"{CONFIG_FLAG} {name}",
                        strict=remaining is False and not unknown_ok and not legacy_ok,
                    )
                )
            args = _without_config(args)
        keys = _command_line_keys(args)
        if keys:
            out.append(
                ParsedArguments(
                    **common, keys=keys, source="command line", via="the arguments after --", strict=remaining is False
                )
            )
    return tuple(out)


def _is_parser(callee: str) -> bool:
    return callee.split(".", 1)[0] in PARSER_PACKAGES and callee.rsplit(".", 1)[-1] in PARSERS


def _dataclasses(r, parser: ObjSym) -> tuple[str, ...]:
    call = parser.call
    spec = call.args[0] if call.args else next((k.value for k in call.keywords if k.arg == "dataclass_types"), None)
    if spec is None:
        return ()
    if isinstance(spec, ast.Name):  # dataclass_types = (ScriptArguments, SFTConfig, ModelConfig)
        spec = r.assigned_node(spec.id, parser.scope) or spec
    items = spec.elts if isinstance(spec, (ast.Tuple, ast.List)) else [spec]
    names = tuple(r.qualified(e) for e in items)
    return names if all(names) else ()


def _added_options(r, parser: ObjSym, calls: list[ast.Call]) -> tuple[str, ...]:
    """Options the script adds to the same parser itself (`parser.add_argument("--seed")`): their dests."""
    out = []
    for node in calls:
        func = node.func
        if not isinstance(func, ast.Attribute) or func.attr != "add_argument":
            continue
        owner = r.sym(func.value, r.scope_of(node), Context(r.script_args))
        if not isinstance(owner, ObjSym) or owner.call is not parser.call:
            continue
        for arg in node.args:
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str) and arg.value.startswith("--"):
                out.append(arg.value[2:].replace("-", "_"))
        dest = next((k.value for k in node.keywords if k.arg == "dest"), None)
        if isinstance(dest, ast.Constant) and isinstance(dest.value, str):
            out.append(dest.value)
    return tuple(out)


def _flag(r, call: ast.Call, name: str, position: int, scope, default: bool = False) -> bool | None:
    """A boolean argument of a call: its value when known, `default` when not passed, None when computed."""
    node = next((k.value for k in call.keywords if k.arg == name), None)
    if node is None and 0 <= position < len(call.args):
        node = call.args[position]
    if node is None:
        return default
    found = r.sym(node, scope, Context(r.script_args))
    return bool(found.value) if isinstance(found, Known) else None


def _given_args(call: ast.Call) -> bool:
    node = call.args[0] if call.args else next((k.value for k in call.keywords if k.arg == "args"), None)
    return node is not None and not (isinstance(node, ast.Constant) and node.value is None)


def _values(r, recipe: dict, node: ast.Call) -> dict[str, Value]:
    out = {}
    for key, sym in recipe.items():
        if not isinstance(key, str):
            continue
        if isinstance(sym, Dyn):
            out[key] = Value(state="dynamic", text=key, reason=sym.reason)
            continue
        value = r.to_value(sym, node)
        out[key] = replace(value, text=f"{key}: {value.value}" if value.state == "known" else key)
    return out


def _config_name(args: list[str]) -> str:
    for i, word in enumerate(args):
        if word == CONFIG_FLAG and i + 1 < len(args):
            return args[i + 1]
        if word.startswith(CONFIG_FLAG + "="):
            return word.split("=", 1)[1]
    return ""


def _without_config(args: list[str]) -> list[str]:
    """The command line TrlParser hands to argparse: `--config FILE` taken out."""
    out, skip = [], False
    for word in args:
        if skip:
            skip = False
            continue
        if word == CONFIG_FLAG:
            skip = True
            continue
        if not word.startswith(CONFIG_FLAG + "="):
            out.append(word)
    return out


def _command_line_keys(args: list[str]) -> dict[str, Value]:
    """Each `--option` of the command line, as written (argparse's matching is the rule's business)."""
    out: dict[str, Value] = {}
    for i, word in enumerate(args):
        if not word.startswith("--") or word == "--":
            continue
        name = word[2:].split("=", 1)[0]
        following = args[i + 1] if i + 1 < len(args) and "=" not in word else None
        words = (word,) + ((following,) if following is not None and not following.startswith("--") else ())
        if name and name not in out:  # the words argparse leaves over when no option takes them
            out[name] = Value(
                state="known",
                value=words,
                text=" ".join(words),
                origins=(Origin("script-arg", f"{word.split('=', 1)[0]} on the command line"),),
            )
    return out
