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

KINDS = ("click", "typer", "fire", "jsonargparse", "lightning")
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
    cli: tuple[ast.Call, str] | None = None  # the LightningCLI call that builds the class, and its section


def entry_of(r, scope: Scope) -> Entry | None:
    """The command-line library that calls this function with the job's arguments, and how it spells each
    parameter; None when none does."""
    node = scope.node
    if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return None
    if scope.class_name and node.name != "__init__":
        return None
    key = ("cli-entry", id(node))
    if key not in r.memo:
        r.memo[key] = _class_entry(r, node, scope.class_name) if scope.class_name else _entry(r, node)
    return r.memo[key]


def _class_entry(r, node: ast.FunctionDef | ast.AsyncFunctionDef, class_name: str) -> Entry | None:
    """A LightningModule / DataModule that LightningCLI builds: its `__init__` arguments come from the settings."""
    built = lightning_cli_class(r, class_name.rsplit(".", 1)[-1])
    return Entry("lightning", _python_options(node, "jsonargparse"), cli=built) if built else None


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
    if entry.kind == "lightning":
        return cli_class_argument(r, entry, name, scope, ctx, depth)
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


# --- LightningCLI ---------------------------------------------------------------------------------------------

LIGHTNING_SUBCOMMANDS = ("fit", "validate", "test", "predict")
_CLI_SECTIONS = ("trainer", "model", "data")
_CLASS_ARGUMENTS = {"model": (0, "model_class"), "data": (1, "datamodule_class")}


@record
class CliSettings:
    """What LightningCLI gives the classes it builds: each section's settings (`trainer`, `model`, `data`) merged
    as jsonargparse merges them, and what could not be read."""

    sections: dict[str, dict]
    unknowns: tuple[str, ...] = ()
    from_launch: bool = False  # the launch line (or args=) named a subcommand, a config or a setting


def is_lightning_cli(r, node: ast.Call) -> bool:
    """`LightningCLI(...)`, or a class of the file built on it (`class MyCLI(LightningCLI)`)."""
    from ..model.call_kinds import LIGHTNING_CLI_CLASSES

    qualified = r.qualified(node.func)
    if qualified in LIGHTNING_CLI_CLASSES:
        return True
    cls = r.index.classes.get(dotted(node.func)) if isinstance(node.func, ast.Name) else None
    return cls is not None and any(r.qualified(b) in LIGHTNING_CLI_CLASSES for b in cls.bases)


def lightning_cli_settings(r, node: ast.Call, ctx, depth: int = 0) -> CliSettings:
    """LightningCLI's settings in jsonargparse's order, later winning: `trainer_defaults=`, the
    `default_config_files` of `parser_kwargs=`, then the arguments (`args=`, else the launch line's) in the order
    written: `--config FILE` (before the subcommand its `fit:` section, after it the file itself), `--trainer FILE`,
    `--trainer.precision 16-mixed`. With `run=False` there is no subcommand."""
    key = ("lightning-cli", id(node))
    if key in r.memo:
        return r.memo[key]
    scope = r.scope_of(node)
    kw = {k.arg: k.value for k in node.keywords if k.arg}
    sections: dict[str, dict] = {name: {} for name in _CLI_SECTIONS}
    unknowns: list[str] = []
    run = r.sym(kw["run"], scope, ctx, depth) if "run" in kw else Known(True)
    with_subcommand = not (isinstance(run, Known) and run.value is False)
    if "trainer_defaults" in kw:
        found = r.sym(kw["trainer_defaults"], scope, ctx, depth)
        if isinstance(found, DictSym):
            _merge(sections["trainer"], found.items)
        else:
            unknowns.append(f"trainer_defaults= of LightningCLI(): {getattr(found, 'reason', 'not a dict')}")
    words: list[str] = list(ctx.script_args)
    from_launch = bool(words)
    if "args" in kw:
        given = r.sym(kw["args"], scope, ctx, depth)
        if isinstance(given, Known) and isinstance(given.value, (list, tuple)):
            words, from_launch = [str(w) for w in given.value], True
        elif isinstance(given, DictSym):
            words, from_launch = [], True
            _merge_config(sections, given, None)
        elif not (isinstance(given, Known) and given.value is None):
            unknowns.append(f"args= of LightningCLI(): {getattr(given, 'reason', 'not a list of arguments')}")
    subcommand = next((w for w in words if w in LIGHTNING_SUBCOMMANDS), None) if with_subcommand else None
    for file in _default_config_files(r, kw.get("parser_kwargs"), subcommand, scope, ctx, depth):
        _merge_config(sections, _config(r, file, node, unknowns), None)
    level_top = with_subcommand
    i = 0
    while i < len(words):
        word = words[i]
        if level_top and word == subcommand:
            level_top = False
            i += 1
            continue
        name, eq, inline = word.partition("=")
        if not name.startswith("-"):
            i += 1
            continue
        takes_value = name in ("--config", "-c") or name.lstrip("-").split(".", 1)[0] in _CLI_SECTIONS
        raw = inline if eq else (words[i + 1] if takes_value and i + 1 < len(words) else "")
        i += 1 if eq or not takes_value else 2
        if name in ("--config", "-c"):
            loaded = _config(r, raw, node, unknowns)
            _merge_config(sections, loaded, subcommand if level_top else None)
            continue
        path = name.lstrip("-").split(".")
        if path[0] not in _CLI_SECTIONS:
            continue
        if len(path) == 1:
            if raw.endswith((".yaml", ".yml", ".json")):
                loaded = _config(r, raw, node, unknowns)
                if isinstance(loaded, DictSym):
                    _merge(sections[path[0]], loaded.items)
            continue
        origin = Origin("script-arg", f"{name} {raw} on the command line" if not eq else f"{word} on the command line")
        _set_path(sections[path[0]], path[1:], Known(coerce(raw, raw.lower() in BOOL_STRINGS), (origin,)))
    found = CliSettings(sections, tuple(unknowns), from_launch)
    r.memo[key] = found
    return found


def _default_config_files(r, parser_kwargs, subcommand, scope, ctx, depth) -> list[str]:
    """`parser_kwargs={"default_config_files": [...]}`, or the subcommand's own (`{"fit": {...}}`)."""
    if parser_kwargs is None:
        return []
    found = r.sym(parser_kwargs, scope, ctx, depth)
    if not isinstance(found, DictSym):
        return []
    items = found.items
    if subcommand and isinstance(items.get(subcommand), DictSym):
        items = {**items, **items[subcommand].items}
    files = items.get("default_config_files")
    if isinstance(files, Known) and isinstance(files.value, (list, tuple)):
        return [str(f) for f in files.value]
    return []


def _config(r, name: str, node: ast.Call, unknowns: list[str]) -> DictSym | None:
    from .config_files import find_config
    from .handlers.config_loaders import load_config_file

    path = find_config(name, (Path(r.path).parent, Path.cwd())) if name else None
    if path is None:
        unknowns.append(
            f"LightningCLI config {name or '(none named)'} is not here (looked next to the script and "
            "in the working directory)"
        )
        return None
    loaded = load_config_file(r, path, f"{r.path}:{node.lineno} LightningCLI --config")
    if isinstance(loaded, Dyn):
        unknowns.append(getattr(loaded, "reason", "cannot be read"))
        return None
    return loaded


def _merge_config(sections: dict[str, dict], config: DictSym | None, subcommand: str | None) -> None:
    """A config's sections into the settings; a config given before the subcommand holds it as a key."""
    if config is None:
        return
    items = config.items
    if subcommand is not None:
        inner = items.get(subcommand)
        items = inner.items if isinstance(inner, DictSym) else {}
    for name in _CLI_SECTIONS:
        if isinstance(items.get(name), DictSym):
            _merge(sections[name], items[name].items)


def _merge(into: dict, items: dict) -> None:
    """jsonargparse's merge: nested mappings key by key, anything else replaced."""
    for k, v in items.items():
        held = into.get(k)
        if isinstance(v, DictSym) and isinstance(held, DictSym):
            merged = dict(held.items)
            _merge(merged, v.items)
            into[k] = DictSym(merged, v.location)
        else:
            into[k] = v


def lightning_cli_class(r, class_name: str) -> tuple[ast.Call, str] | None:
    """The LightningCLI call that builds this class (`LightningCLI(LitModel, DataModule)`) and the section that
    holds its `__init__`'s arguments."""
    for call in r.call_nodes():
        if not is_lightning_cli(r, call):
            continue
        for section, (position, keyword) in _CLASS_ARGUMENTS.items():
            given = call.args[position] if len(call.args) > position else None
            given = next((k.value for k in call.keywords if k.arg == keyword), given)
            if given is not None and dotted(given) == class_name:
                return call, section
    return None


def cli_class_argument(r, entry: Entry, name: str, scope: Scope, ctx, depth: int):
    """An `__init__` argument of a class LightningCLI builds: its `init_args` (or the section's own key) in the
    merged settings, else its default."""
    assert entry.cli is not None
    call, section = entry.cli
    settings = lightning_cli_settings(r, call, ctx, depth).sections[section]
    init_args = settings.get("init_args")
    holder = init_args.items if isinstance(init_args, DictSym) else settings
    found = holder.get(name)
    if found is not None:
        return found
    option = entry.options.get(name)
    if option is None or option.default is None:
        return Dyn(f"{name} of {scope.name}() is set by LightningCLI's `{section}` settings and none is given")
    d = r.sym(option.default, scope.parent or scope, ctx, depth)
    if isinstance(d, Known):
        where = r.loc(option.default)
        return Known(d.value, (Origin("default", f"default of {name} (LightningCLI {section})", where),), where)
    return d
