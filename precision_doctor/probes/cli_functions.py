"""Functions a command-line library calls with the job's arguments: `click` commands, `typer` commands,
`fire.Fire(f)` and `jsonargparse.CLI(f)`. Such a function is never called with its arguments in the file, so each
parameter's value is what its library makes of the arguments after the script (the launch line's, or those after
`--`), else the default it declares (`@click.option(default=)`, `typer.Option(8)`, the Python default).

Each library's spelling is its own: click and typer turn `batch_size` into `--batch-size` and booleans into
`--fp16/--no-fp16`; fire takes `--batch_size=4`, `--batch-size 4`, `--fp16` and `--nofp16`, parsing values as
Python literals; jsonargparse takes `--batch_size 4` and `--fp16 true`.
"""

from __future__ import annotations

import ast
from dataclasses import field
from pathlib import Path

from ..model.facts import Origin
from ..model.util import record
from .handlers._command_line import BOOL_STRINGS, coerce
from .scopes import Scope, dotted
from .symbols import DictSym, Dyn, Known

KINDS = ("click", "typer", "fire", "jsonargparse")
_RUNNERS = {  # module-level calls that run a function as a command line
    "typer.run": "typer",
    "fire.Fire": "fire",
    "jsonargparse.CLI": "jsonargparse",
    "jsonargparse.auto_cli": "jsonargparse",
    "jsonargparse.auto_parser": "jsonargparse",
}


@record
class Option:
    names: tuple[str, ...]  # `--batch-size`, `-b`; for a toggle the `--no-x` spelling is in `negations`
    default: ast.AST | None  # None: no default written
    is_bool: bool = False
    negations: tuple[str, ...] = ()


@record
class Entry:
    kind: str
    options: dict[str, Option] = field(default_factory=dict)  # by parameter name
    hydra: ast.Call | None = None  # `@hydra.main(config_path=..., config_name=...)`


def entry_of(r, scope: Scope) -> Entry | None:
    """The command-line library that calls this function with the job's arguments, and how it spells each
    parameter; None when none does."""
    node = scope.node
    if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) or scope.class_name:
        return None
    key = ("cli-entry", id(node))
    if key not in r.memo:
        r.memo[key] = _entry(r, node)
    return r.memo[key]


def _entry(r, node: ast.FunctionDef | ast.AsyncFunctionDef) -> Entry | None:
    decorators = [(d, r.qualified(d.func if isinstance(d, ast.Call) else d)) for d in node.decorator_list]
    hydra = next((d for d, q in decorators if q == "hydra.main" and isinstance(d, ast.Call)), None)
    if hydra is not None:
        return Entry("hydra", hydra=hydra)
    if any(q.startswith("click.") for _, q in decorators):
        return Entry("click", _click_options(r, node, decorators))
    typer_apps = _typer_apps(r)
    if any(isinstance(d, ast.Call) and dotted(d.func).rsplit(".", 1)[0] in typer_apps for d, _ in decorators):
        return Entry("typer", _typer_options(node))
    for call in r.call_nodes():
        kind = _RUNNERS.get(r.qualified(call.func))
        if kind is None:
            continue
        named = call.args[0] if call.args else None
        if (named is not None and dotted(named) == node.name) or (kind == "fire" and not call.args):
            return Entry(kind, _typer_options(node) if kind == "typer" else _python_options(node, kind))
    return None


def _typer_apps(r) -> set[str]:
    """The names bound to `typer.Typer()` in this file."""
    out: set[str] = set()
    for node in r.nodes_of(ast.Assign):
        if isinstance(node.value, ast.Call) and r.qualified(node.value.func) == "typer.Typer":
            out.update(dotted(t) for t in node.targets if dotted(t))
    return out


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _click_options(r, node, decorators) -> dict[str, Option]:
    params = [a.arg for a in node.args.args]
    out: dict[str, Option] = {}
    for d, qualified in decorators:
        if not isinstance(d, ast.Call) or qualified != "click.option":
            continue
        decls = [a.value for a in d.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
        kw: dict[str, ast.expr] = {k.arg: k.value for k in d.keywords if k.arg}
        names, negations, identifier = [], [], ""
        for decl in decls:
            if not decl.startswith("-"):
                identifier = decl
                continue
            on, _, off = decl.partition("/")
            names.append(on.strip())
            if off:
                negations.append(off.strip())
        if not names:
            continue
        longest = max(names, key=len)
        param = identifier or longest.lstrip("-").replace("-", "_").lower()
        if param not in params:
            continue
        is_flag = _value(kw.get("is_flag")) is True
        is_bool = bool(negations) or is_flag or (dotted(kw["type"]) == "bool" if "type" in kw else False)
        default = kw.get("default")
        if default is None and (is_flag or negations):
            default = ast.Constant(False)
        out[param] = Option(tuple(names), default, is_bool, tuple(negations))
    return out


def _typer_options(node) -> dict[str, Option]:
    """typer: a parameter's `typer.Option(default, "--name")` (or `Annotated[T, typer.Option("--name")] = d`),
    else `--param-name`; booleans toggle with `--no-param-name`."""
    out: dict[str, Option] = {}
    for arg, default in _with_defaults(node):
        names: list[str] = []
        written = default
        annotation = arg.annotation
        spec = None
        if isinstance(default, ast.Call) and dotted(default.func).rsplit(".", 1)[-1] in ("Option", "Argument"):
            spec = default
            written = spec.args[0] if spec.args and not _is_name_string(spec.args[0]) else None
            for kw in spec.keywords:
                if kw.arg == "default":
                    written = kw.value
        elif isinstance(annotation, ast.Subscript) and dotted(annotation.value).endswith("Annotated"):
            elements = annotation.slice.elts if isinstance(annotation.slice, ast.Tuple) else []
            spec = next((e for e in elements[1:] if isinstance(e, ast.Call)), None)
            annotation = elements[0] if elements else annotation
        if spec is not None:
            names = [str(_value(a)) for a in spec.args if _is_name_string(a)]
        is_bool = dotted(annotation) == "bool" if annotation is not None else isinstance(_value(written), bool)
        if isinstance(written, ast.Constant) and written.value is Ellipsis:
            written = None
        on = [n.split("/")[0] for n in names] or [_flag(arg.arg)]
        off = [n.split("/")[1] for n in names if "/" in n] or (["--no-" + _flag(arg.arg)[2:]] if is_bool else [])
        out[arg.arg] = Option(tuple(on), written, is_bool, tuple(off))
    return out


def _python_options(node, kind: str) -> dict[str, Option]:
    """fire and jsonargparse: every parameter by its own name (dashes or underscores), its Python default."""
    out: dict[str, Option] = {}
    for arg, default in _with_defaults(node):
        is_bool = (
            (dotted(arg.annotation) == "bool") if arg.annotation is not None else isinstance(_value(default), bool)
        )
        names = (f"--{arg.arg}", _flag(arg.arg))
        negations = (f"--no{arg.arg}",) if kind == "fire" and is_bool else ()
        out[arg.arg] = Option(tuple(dict.fromkeys(names)), default, is_bool, negations)
    return out


def _with_defaults(node) -> list[tuple[ast.arg, ast.AST | None]]:
    args = node.args.args
    defaults = [None] * (len(args) - len(node.args.defaults)) + list(node.args.defaults)
    pairs = list(zip(args, defaults, strict=True))
    pairs += list(zip(node.args.kwonlyargs, node.args.kw_defaults, strict=True))
    return [(a, d) for a, d in pairs if a.arg not in ("self", "cls")]


def _is_name_string(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith("-")


def _value(node: ast.AST | None) -> object:
    return node.value if isinstance(node, ast.Constant) else None


def parameter(r, entry: Entry, name: str, scope: Scope, ctx, depth: int):
    """The parameter's value as its library makes it from the command line, else its declared default."""
    if entry.kind == "hydra" and entry.hydra is not None:
        node = scope.node
        first = node.args.args[0].arg if isinstance(node, ast.FunctionDef) and node.args.args else ""
        if name != first:
            return Dyn(f"{name} of {scope.name}() is not the config Hydra passes")
        return hydra_config(r, entry.hydra, scope, ctx, depth)
    option = entry.options.get(name)
    if option is None:
        return Dyn(f"{name} of {scope.name}() is a {entry.kind} argument the doctor does not read")
    found = _from_command_line(entry.kind, option, list(ctx.script_args))
    if found is not None:
        raw, value = found
        return Known(value, (Origin("script-arg", f"{raw} on the command line"),))
    if option.default is None:
        return Dyn(f"{name} of {scope.name}() is set on the command line ({entry.kind}) and none is given")
    d = r.sym(option.default, scope.parent or scope, ctx, depth)
    if isinstance(d, Known):
        where = r.loc(option.default)
        note = f"default of {option.names[0]} ({entry.kind})"
        return Known(d.value, (Origin("default", note, where),), where)
    return d


def _from_command_line(kind: str, option: Option, words: list[str]) -> tuple[str, object] | None:
    """(the words as written, the value) of the last time the option is given; None when it is not."""
    found: tuple[str, object] | None = None
    i = 0
    while i < len(words):
        word = words[i]
        name, eq, inline = word.partition("=")
        if name in option.negations and not eq:
            found = (word, False)
        elif name in option.names:
            if option.is_bool and not eq and (kind in ("click", "typer") or _next_is_option(words, i)):
                found = (word, True)
            else:
                raw = inline if eq else (words[i + 1] if i + 1 < len(words) else "")
                found = (word if eq else f"{word} {raw}", _parsed(kind, raw, option.is_bool))
                i += 0 if eq else 1
        i += 1
    return found


def _next_is_option(words: list[str], i: int) -> bool:
    return i + 1 >= len(words) or words[i + 1].startswith("-") or words[i + 1].lower() not in BOOL_STRINGS


def _parsed(kind: str, raw: str, is_bool: bool) -> object:
    if kind == "fire":  # fire reads values as Python literals
        try:
            return ast.literal_eval(raw)
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            return raw
    return coerce(raw, is_bool)


# --- Hydra ----------------------------------------------------------------------------------------------------


def hydra_config(r, decorator: ast.Call, scope: Scope, ctx, depth: int) -> DictSym | Dyn:
    """The config `@hydra.main(config_path=, config_name=)` composes: the groups its `defaults:` list names
    (`- model: llama` reads `<config_path>/model/llama.yaml` under `model`), the primary config over them, then
    the overrides after the script (`trainer.lr=1e-4`, `+x=1`, `model=mistral`). What Hydra does beyond this
    (packages, interpolations, config store) is left as written or unknown."""
    kw = {k.arg: k.value for k in decorator.keywords if k.arg}
    folder_sym = r.sym(kw["config_path"], scope.parent or scope, ctx, depth) if "config_path" in kw else None
    name_sym = r.sym(kw["config_name"], scope.parent or scope, ctx, depth) if "config_name" in kw else None
    folder = Path(r.path).parent
    if isinstance(folder_sym, Known) and isinstance(folder_sym.value, str):
        folder = folder / folder_sym.value
    elif folder_sym is not None and not (isinstance(folder_sym, Known) and folder_sym.value is None):
        return Dyn("Hydra's config_path is computed at run time")
    overrides = [w for w in ctx.script_args if "=" in w and not w.startswith("-")]
    groups = {w.split("=", 1)[0].lstrip("+"): w.split("=", 1)[1] for w in overrides}
    items: dict[str, object] = {}
    if isinstance(name_sym, Known) and isinstance(name_sym.value, str):
        primary = _hydra_file(r, folder / f"{name_sym.value.removesuffix('.yaml')}.yaml")
        if isinstance(primary, Dyn):
            return primary
        for group, option in _defaults(primary):
            chosen = groups.get(group, option)
            loaded = (
                _hydra_file(r, folder / group / f"{chosen}.yaml")
                if group
                else _hydra_file(r, folder / f"{chosen}.yaml")
            )
            if isinstance(loaded, DictSym):
                if group:
                    items[group] = loaded
                else:
                    items.update(loaded.items)
        items.update({k: v for k, v in primary.items.items() if k != "defaults"})
    for word in overrides:
        key, _, raw = word.lstrip("+").partition("=")
        if (folder / key / f"{raw}.yaml").is_file() and "." not in key:
            continue  # a group choice, composed above
        _set_path(
            items,
            key.split("."),
            Known(coerce(raw, raw.lower() in BOOL_STRINGS), (Origin("script-arg", f"{word} on the command line"),)),
        )
    return DictSym(items, r.loc(decorator))  # type: ignore[arg-type]


def _hydra_file(r, path: Path) -> DictSym | Dyn:
    from .handlers.config_loaders import load_config_file

    return load_config_file(r, path, f"@hydra.main ({path.name})")


def _defaults(primary: DictSym) -> list[tuple[str, str]]:
    """`defaults:` entries as (group, option); a bare name is a config merged at the top ("")."""
    found = primary.items.get("defaults")
    out: list[tuple[str, str]] = []
    values = found.value if isinstance(found, Known) and isinstance(found.value, list) else []
    for entry in values:
        if isinstance(entry, str) and entry != "_self_":
            out.append(("", entry))
        elif isinstance(entry, dict) and len(entry) == 1:
            ((group, option),) = entry.items()
            group = str(group).replace("override ", "").replace("optional ", "").strip().lstrip("/")
            if isinstance(option, str) and "@" not in group:
                out.append((group, option))
    return out


def _set_path(items: dict, keys: list[str], value) -> None:
    node = items
    for key in keys[:-1]:
        inner = node.get(key)
        if not isinstance(inner, DictSym):
            inner = DictSym({}, None)
            node[key] = inner
        node = inner.items
    node[keys[-1]] = value
