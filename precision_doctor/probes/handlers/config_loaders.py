"""Configs a script loads itself: `yaml.safe_load(open("cfg.yaml"))`, `json.load(f)`, `json.loads(TEXT)`,
`OmegaConf.load(path)`, read into a dict whose values point at the lines of the file (or of the string in the
script) that write them; and `cfg.get("bf16", False)` on such a dict.

The path may be a literal (relative to the script, then the working directory) or anything the resolver can
follow, `sys.argv[1]` and argparse options included (taken from the arguments after `--`). A loader that can
construct Python objects (`yaml.load` with an unsafe Loader, `yaml.unsafe_load`) is read with the safe
composer all the same: the doctor never constructs what a tag names.
"""

from __future__ import annotations

import ast
from pathlib import Path

from ...model.facts import Location
from ...system.sources import Unreadable, read_text_bounded
from ..config_files import ConfigDoc, ConfigError, display, find_config, parse_config
from ..symbols import DictSym, Dyn, Known, ObjSym

FILE_LOADERS = {
    "yaml.safe_load",
    "yaml.load",
    "yaml.full_load",
    "yaml.unsafe_load",
    "json.load",
    "omegaconf.OmegaConf.load",
}
TEXT_LOADERS = {"json.loads", "omegaconf.OmegaConf.create"}
JSON_ONLY = {"json.load", "json.loads"}
OPENERS = {"open", "io.open", "pathlib.Path.open", "codecs.open"}

CALLS = FILE_LOADERS | TEXT_LOADERS
METHODS = {"get"}


def resolve(r, node, scope, ctx, depth):
    if not isinstance(node, ast.Call):
        return None
    callee = r.qualified(node.func)
    if callee in CALLS:
        if not node.args:
            return None
        return _load(r, node, callee, scope, ctx, depth)
    if isinstance(node.func, ast.Attribute) and node.func.attr == "get":
        return _get(r, node, scope, ctx, depth)
    return None


def _get(r, node, scope, ctx, depth):
    """`cfg.get("bf16", default)` on a dict the resolver knows; anything else is not this handler's."""
    if not node.args:
        return None
    owner = r.sym(node.func.value, scope, ctx, depth)
    if not isinstance(owner, DictSym):
        return None
    key = r.sym(node.args[0], scope, ctx, depth)
    if not isinstance(key, Known) or not isinstance(key.value, str):
        return Dyn(f"{r.text(node)[:60]}: the key is computed at run time")
    if key.value in owner.items:
        return owner.items[key.value]
    if len(node.args) > 1:
        return r.sym(node.args[1], scope, ctx, depth)
    return Known(None, (), r.loc(node))


def _load(r, node, callee, scope, ctx, depth):
    arg = node.args[0]
    json_only = callee in JSON_ONLY
    if callee in TEXT_LOADERS:
        text = r.sym(arg, scope, ctx, depth)
        if callee == "omegaconf.OmegaConf.create" and isinstance(text, DictSym):
            return text
        if not isinstance(text, Known) or not isinstance(text.value, str):
            return Dyn(f"{r.text(node)[:60]} parses a text computed at run time")
        return _from_string(r, node, arg, text.value, json_only)
    if callee == "omegaconf.OmegaConf.load":
        path = r.sym(arg, scope, ctx, depth)
    else:
        path = _opened_path(r, arg, scope, ctx, depth)
    if isinstance(path, Known) and isinstance(path.value, str):
        return _from_file(r, node, path.value, json_only)
    if isinstance(path, Known) and isinstance(path.value, Path):
        return _from_file(r, node, str(path.value), json_only)
    reason = getattr(path, "reason", "") or "the path cannot be followed"
    return Dyn(f"{r.text(node)[:60]} reads a file whose path is not known ({reason}); pass it after --")


def _opened_path(r, arg, scope, ctx, depth):
    """The path of `open(p)`, `Path(p).open()`, `Path(p).read_text()`, or of a name bound to one."""
    call = arg if isinstance(arg, ast.Call) else None
    if call is None:
        found = r.sym(arg, scope, ctx, depth)
        if isinstance(found, ObjSym):
            call, scope = found.call, found.scope
        elif isinstance(found, Known):  # json.load / yaml.safe_load of a string: YAML reads it as text
            return Dyn("a string, not a file")
        else:
            return found
    func = call.func
    if (
        isinstance(func, ast.Attribute)
        and func.attr in ("open", "read_text", "read")
        and isinstance(func.value, ast.Call)
    ):
        return _opened_path(r, func.value, scope, ctx, depth)
    name = r.qualified(func)
    if (name in OPENERS or name in ("pathlib.Path", "Path")) and call.args:
        return r.sym(call.args[0], scope, ctx, depth)
    if isinstance(func, ast.Attribute) and func.attr in ("open", "read_text"):
        return r.sym(func.value, scope, ctx, depth)
    return Dyn(f"{r.text(call)[:60]} is not a file the doctor can follow")


def _from_string(r, node, arg, text: str, json_only: bool):
    start = getattr(arg, "lineno", 1)
    # a triple-quoted string starting with a newline: its first line is the line after the quotes
    key = ("config-string", id(arg))
    doc = r.memo.get(key)
    if doc is None:
        try:
            doc = parse_config(text, r.path, json_only=json_only, line_offset=start - 1)
        except ConfigError as exc:
            return Dyn(f"{r.text(node)[:60]}: {exc}")
        r.memo[key] = doc
    return doc_symbol(doc, f"{r.path}:{node.lineno} {r.text(node.func)}(...)")


def _from_file(r, node, name: str, json_only: bool):
    base = Path(r.path).parent
    found = find_config(name, (base, Path.cwd()))
    if found is None:
        return Dyn(f"{name} is not here (looked next to the script and in the working directory)")
    key = ("config-file", str(found))
    doc = r.memo.get(key)
    if doc is None:
        try:
            doc = parse_config(read_text_bounded(found), display(found), json_only=json_only)
        except (Unreadable, ConfigError) as exc:
            return Dyn(f"{name}: {getattr(exc, 'reason', None) or exc}")
        r.memo[key] = doc
    return doc_symbol(doc, f"{r.path}:{node.lineno} {r.text(node.func)}(...)")


def load_config_file(r, path: Path, via: str) -> DictSym | Dyn:
    """A YAML/JSON file at a known path (Hydra's configs) as the resolver's dict, read once per script."""
    key = ("config-file", str(path))
    doc = r.memo.get(key)
    if doc is None:
        try:
            doc = parse_config(read_text_bounded(path), display(path))
        except Unreadable as exc:
            return Dyn(f"{display(path)}: {exc.reason}")
        except ConfigError as exc:
            return Dyn(f"{display(path)}: {exc}")
        r.memo[key] = doc
    return doc_symbol(doc, via)


def doc_symbol(doc: ConfigDoc, via: str) -> DictSym:
    """A loaded config as the resolver's dict, each value known with the line that writes it."""
    return _mapping(doc, doc.data, (), via)


def _mapping(doc: ConfigDoc, data: dict, path: tuple, via: str) -> DictSym:
    items = {}
    for k, v in data.items():
        here = path + (k,)
        if isinstance(v, dict):
            items[k] = _mapping(doc, v, here, via)
        else:
            value = doc.value(*here, via=via)
            items[k] = Known(v, value.origins, value.location)
    return DictSym(items, doc.location(*path) if path else Location(doc.path, 1 + doc.line_offset))
