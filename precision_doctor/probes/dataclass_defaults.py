"""Fields of the argument dataclasses that HfArgumentParser / TrlParser fill: their defaults and which are bool.

Library classes (TrainingArguments and Seq2SeqTrainingArguments, TRL's configs, ModelConfig and ScriptArguments,
SentenceTransformerTrainingArguments, peft's configs): every field any release read declares, with its type and its
default as the newest release that declares it writes it, inherited along the class's bases with the subclass's own
default winning (TRL's configs: `bf16 = None`, meaning `not fp16`, and gradient checkpointing on). They come from the
table generated from the released wheels (knowledge/data/signatures.json), the same one the keywords are judged
with. Classes defined in the script: read from their AST, inheriting from their bases, local or library.
A bool field parses `--flag`, `--flag False` and `--no_flag` (HfArgumentParser's rules); whether a field is bool comes
from these declarations, never from its name.
"""

from __future__ import annotations

import ast
from functools import lru_cache
from typing import Any

from ..knowledge.signatures import class_id, table
from ..model.facts import Origin
from .library_source import kind_of
from .scopes import dotted
from .symbols import Context, Dyn, Known

_TYPES: dict[str, type] = {"bool": bool, "int": int, "float": float, "str": str, "dict": dict, "list": list}


@lru_cache(maxsize=256)
def _table_fields(cid: str) -> tuple[tuple[str, type, Any], ...]:
    """(name, type, default) of a table class and what it inherits; the bases it had longest ago first, so a newer
    base's and the class's own defaults win."""
    return tuple((n, t, d) for n, (t, d) in _inherited(cid, frozenset()).items())


def _inherited(cid: str, seen: frozenset[str]) -> dict[str, tuple[type, Any]]:
    entry = table()["classes"].get(cid)
    if entry is None or cid in seen:  # TRL moved classes to trl.experimental and back: a base may be its own heir
        return {}
    out: dict[str, tuple[type, Any]] = {}
    bases = sorted(entry.get("bases", {}).items(), key=lambda kv: kv[1].split(",")[-1].endswith("-"))
    for base, _ in bases:
        out.update(_inherited(base, seen | {cid}))
    for name, spec in entry.get("defaults", {}).items():
        out[name] = (_TYPES.get(spec[0], str), spec[1] if len(spec) > 1 else None)
    return out


def library_fields(qualified: str) -> dict[str, tuple[type, Any]] | None:
    """name -> (type, default) of a library dataclass, or None for a class the table does not hold."""
    cid = class_id(qualified)
    fields = _table_fields(cid) if cid else ()
    return {n: (t, d) for n, t, d in fields} or None


def dataclass_fields(
    resolver, qualified: str, class_node: ast.AST, _seen: frozenset[str] = frozenset()
) -> tuple[dict[str, Any], frozenset[str]]:
    """Defaults of a dataclass's fields as resolver symbols, and the names of its bool fields."""
    lib = library_fields(qualified)
    if lib is not None:
        short = qualified.rsplit(".", 1)[-1]
        return (
            {k: Known(v, (Origin("default", f"{short} default"),)) for k, (_, v) in lib.items()},
            frozenset(k for k, (t, _) in lib.items() if t is bool),
        )
    local = resolver.index.classes.get(dotted(class_node))
    if local is None or local.name in _seen:
        return {}, frozenset()
    fields: dict[str, Any] = {}
    bools: set[str] = set()
    for base in local.bases:  # a subclass inherits its bases' fields: a library's, or another of the script's
        inherited, inherited_bools = dataclass_fields(resolver, resolver.qualified(base), base, _seen | {local.name})
        if isinstance(base, (ast.Name, ast.Attribute)) and library_fields(resolver.qualified(base)) is not None:
            inherited = {
                k: Known(v.value, (Origin("default", f"{dotted(base)} default"),)) for k, v in inherited.items()
            }
        fields.update(inherited)
        bools.update(inherited_bools)
    scope = resolver.index.module
    for stmt in local.body:
        if not isinstance(stmt, ast.AnnAssign) or not isinstance(stmt.target, ast.Name):
            continue
        name = stmt.target.id
        if kind_of(resolver.text(stmt.annotation)) == "bool":
            bools.add(name)
        default = stmt.value
        if isinstance(default, ast.Call) and dotted(default.func).endswith("field"):
            default = next((k.value for k in default.keywords if k.arg == "default"), None)
        if default is None:
            fields[name] = Dyn(f"{name} has no default and comes from the command line")
            continue
        sym = resolver.sym(default, scope, Context(resolver.script_args))
        if isinstance(sym, Known):
            sym = Known(
                sym.value,
                (Origin("default", f"default of {local.name}.{name}", resolver.loc(default)),),
                resolver.loc(default),
            )
        fields[name] = sym
    return fields, frozenset(bools)
