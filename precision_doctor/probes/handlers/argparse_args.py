"""argparse: `parser.parse_args()` read by building the script's parser for real (from its add_argument
calls, never running the script) and parsing the command line the doctor was given."""

from __future__ import annotations

import argparse
import ast

from ...model.facts import Origin
from ..scopes import Scope, dotted, walk
from ..symbols import Dyn, Known, Namespace, Seq
from ._command_line import BOOL_STRINGS

METHODS = {"parse_args", "parse_known_args"}
GROUP_METHODS = ("add_argument_group", "add_mutually_exclusive_group")
FLAG_ACTIONS = ("store_true", "store_false", "count", "append", "store_const", "append_const")


def resolve(r, node, scope, ctx, depth):
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
        return None
    ns = namespace(r, node.func.value, scope, ctx)
    if node.func.attr == "parse_known_args" and not isinstance(ns, Dyn):
        return Seq((ns, Dyn("remaining arguments")))
    return ns


def namespace(r, parser_node: ast.AST, scope: Scope, ctx) -> Namespace | Dyn:
    parser_name = dotted(parser_node)
    if isinstance(parser_node, ast.Call):  # build_parser().parse_args(): the parser that function returns
        fn = r.index.functions.get(dotted(parser_node.func), [])
        if len(fn) == 1 and len(fn[0].returns) == 1 and dotted(fn[0].returns[0]):
            scope, parser_name = fn[0], dotted(fn[0].returns[0])
    if not parser_name:
        return Dyn("an argument parser that is not a plain variable")
    key = ("argparse", id(scope), parser_name)  # one parser, built once per script
    if key not in r.memo:
        r.memo[key] = _build(r, parser_name, scope, ctx)
    return r.memo[key]


def _build(r, parser_name: str, scope: Scope, ctx) -> Namespace | Dyn:
    receivers = {parser_name}
    scope_nodes = None if scope.node is r.tree else walk(scope.node)
    calls = r.call_nodes() if scope_nodes is None else [n for n in scope_nodes if isinstance(n, ast.Call)]
    assigns = r.nodes_of(ast.Assign) if scope_nodes is None else [n for n in scope_nodes if isinstance(n, ast.Assign)]
    for node in assigns:  # argument groups add options to the same parser
        if (
            isinstance(node.value, ast.Call)
            and isinstance(node.value.func, ast.Attribute)
            and node.value.func.attr in GROUP_METHODS
            and dotted(node.value.func.value) in receivers
        ):
            for t in node.targets:
                if dotted(t):
                    receivers.add(dotted(t))
    real = _SilentParser(add_help=False, exit_on_error=False, allow_abbrev=False)
    defaults: dict[str, object] = {}
    sentinel = object()
    for node in calls:
        if not (
            isinstance(node.func, ast.Attribute)
            and node.func.attr == "add_argument"
            and dotted(node.func.value) in receivers
        ):
            continue
        flags = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
        if not flags:
            continue
        kw = {k.arg: k.value for k in node.keywords if k.arg}
        action = kw.get("action")
        action_name = action.value if isinstance(action, ast.Constant) else None
        if action is not None and action_name is None:
            action_name = "store_true" if "BooleanOptional" in r.text(action) else None
        options: dict[str, object] = {"default": sentinel}
        if "dest" in kw and isinstance(kw["dest"], ast.Constant):
            options["dest"] = kw["dest"].value
        if action_name in FLAG_ACTIONS:
            options["action"] = action_name
            if action_name in ("store_const", "append_const") and "const" in kw:
                const = r.sym(kw["const"], scope, ctx, 0)
                options["const"] = const.value if isinstance(const, Known) else None
        else:
            nargs = kw.get("nargs")
            if isinstance(nargs, ast.Constant):
                options["nargs"] = nargs.value
            if "const" in kw:
                const = r.sym(kw["const"], scope, ctx, 0)
                options["const"] = const.value if isinstance(const, Known) else None
            options["type"] = _type(r.text(kw["type"])) if "type" in kw else str
        try:
            action_obj = real.add_argument(*flags, **options)
        except Exception:
            continue
        dest = action_obj.dest
        loc = r.loc(node)
        if "default" in kw:
            d = r.sym(kw["default"], scope, ctx, 0)
            if isinstance(d, Known):
                d = Known(d.value, (Origin("default", f"default of {flags[-1]}", loc),), r.loc(kw["default"]))
            defaults[dest] = d
        else:
            implicit = {"store_true": False, "store_false": True}.get(action_name)
            defaults[dest] = Known(implicit, (Origin("default", f"default of {flags[-1]}", loc),), loc)
    try:
        parsed, _ = real.parse_known_args(list(ctx.script_args))
    except (argparse.ArgumentError, SystemExit, Exception) as exc:  # noqa: BLE001 - the script's parser
        return Dyn(f"the script arguments do not parse: {exc}")
    finally:
        real.dismantle()
    fields: dict[str, object] = {}
    for dest, default in defaults.items():
        got = getattr(parsed, dest, sentinel)
        if got is sentinel:
            fields[dest] = default
        else:
            fields[dest] = Known(got, (Origin("script-arg", f"--{dest.replace('_', '-')} on the command line"),))
    return Namespace(fields, f"the argparse options of {parser_name}")


class _SilentParser(argparse.ArgumentParser):
    """The script's parser, rebuilt: a missing required argument raises instead of printing usage to stderr."""

    def error(self, message: str):
        raise ValueError(message)

    def _get_formatter(self):
        # add_argument asks for one per option only to check its metavar (this parser never formats help): one
        # for every parser is enough, and a fixed width spares the terminal query
        return _METAVAR_FORMATTER

    def dismantle(self) -> None:
        """Drop the links from each option back to its parser: without these cycles, a parser built for each
        script is freed when it is done with, not by the cyclic collector scanning everything the probe made."""
        for action in self._actions:
            action.container = None
        self._actions.clear()
        self._option_string_actions.clear()
        self._action_groups.clear()
        self._mutually_exclusive_groups.clear()
        self._registries.clear()


_METAVAR_FORMATTER = argparse.HelpFormatter(prog="script", width=80)


def _type(text: str):
    """The converter an option's `type=` names; anything that reads a bool parses the usual spellings."""
    if text in ("int", "float", "str"):
        return {"int": int, "float": float, "str": str}[text]
    if "bool" in text.lower():
        return lambda s: BOOL_STRINGS.get(str(s).lower(), s)
    return str
