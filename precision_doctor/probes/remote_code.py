"""The model classes a checkpoint brings as its own code (config.json `auto_map`, loaded with
`trust_remote_code=True`), read as text: what `gradient_checkpointing_enable()` will do with them.

transformers raises for a class whose `supports_gradient_checkpointing` is not true (PreTrainedModel's default is
False: modeling_utils.py:3689 in 4.57.1, :3146 in 5.23.0), and a class that still defines the pre-4.35
`_set_gradient_checkpointing(module, value)` is enabled the old way, ignoring the checkpointing keyword arguments
(4.57.1 modeling_utils.py:3698-3711). The modeling file sits beside config.json in a local folder or a cache
snapshot; it is parsed, never imported. A base class from another file of the same folder is followed; one from
transformers or elsewhere leaves the answer unknown.
"""

from __future__ import annotations

import ast
from pathlib import Path

from ..model.facts import RemoteClass
from ..system.sources import Unreadable, is_regular_file, read_source

# auto_map keys that name a model class (AutoConfig, AutoTokenizer and the processors build no model)
_NOT_MODELS = frozenset(
    {"AutoConfig", "AutoTokenizer", "AutoProcessor", "AutoImageProcessor", "AutoFeatureExtractor", "AutoVideoProcessor"}
)
_ROOTS = frozenset({"PreTrainedModel", "PretrainedModel"})  # transformers' base: supports_gradient_checkpointing False
_MAX_DEPTH = 8  # base classes followed through the folder's files


def remote_classes(folder: Path, auto_map: object) -> tuple[RemoteClass, ...]:
    """One entry per model class `auto_map` names, with what its code says about gradient checkpointing."""
    if not isinstance(auto_map, dict):
        return ()
    modules: dict[str, _Module | None] = {}
    out = []
    for auto_class, ref in sorted(auto_map.items()):
        if not isinstance(auto_class, str) or auto_class in _NOT_MODELS or not isinstance(ref, str):
            continue
        module, _, name = ref.rpartition(".")
        if "--" in module:
            out.append(RemoteClass(auto_class, name, reason=f"its code is in another repository ({ref})"))
            continue
        found = _module(folder, module, modules)
        if found is None:
            out.append(
                RemoteClass(auto_class, name, reason=f"{module}.py is not beside its config.json on this machine")
            )
            continue
        out.append(_judge(auto_class, name, found, folder, modules))
    return tuple(out)


class _Module:
    __slots__ = ("path", "lines", "classes", "imported")

    def __init__(self, path: Path, text: str, tree: ast.Module) -> None:
        self.path = path
        self.lines = text.splitlines()
        self.classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
        self.imported: dict[str, tuple[str, str]] = {}  # local name -> (module as written, its name there)
        for node in tree.body:
            if isinstance(node, ast.ImportFrom):
                source = "." * node.level + (node.module or "")
                for alias in node.names:
                    self.imported[alias.asname or alias.name] = (source, alias.name)


def _module(folder: Path, name: str, modules: dict[str, _Module | None]) -> _Module | None:
    if name in modules:
        return modules[name]
    modules[name] = None
    path = folder / f"{name}.py"
    if not name or "/" in name or "\\" in name or not is_regular_file(path):
        return None
    try:
        text = read_source(path)
        tree = ast.parse(text, filename=str(path))
    except (Unreadable, SyntaxError, ValueError, RecursionError):
        return None
    modules[name] = _Module(path, text, tree)
    return modules[name]


def _judge(auto_class: str, name: str, module: _Module, folder: Path, modules: dict) -> RemoteClass:
    start = module.classes.get(name)
    if start is None:
        return RemoteClass(auto_class, name, str(module.path), reason=f"{module.path.name} defines no class {name}")
    supports: tuple[bool, _Module, int] | None = None
    enable_override: tuple[_Module, int] | None = None
    old_format: tuple[_Module, int] | None = None
    setter_seen = False
    # depth-first, left to right: Python's MRO for the single-inheritance chains model files use
    stack: list[tuple[_Module, ast.ClassDef, int]] = [(module, start, 0)]
    while stack:
        where, cls, depth = stack.pop()
        for stmt in cls.body:
            target, value = _assignment(stmt)
            if target == "supports_gradient_checkpointing" and supports is None:
                if not (isinstance(value, ast.Constant) and isinstance(value.value, bool)):
                    return _unknown(auto_class, name, module, start, "supports_gradient_checkpointing is computed")
                supports = (value.value, where, stmt.lineno)
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                if stmt.name in ("gradient_checkpointing_enable", "activation_checkpointing_enable"):
                    enable_override = enable_override or (where, stmt.lineno)
                if stmt.name == "_set_gradient_checkpointing" and not setter_seen:
                    setter_seen = True
                    params = [a.arg for a in stmt.args.args + stmt.args.kwonlyargs]
                    if "value" in params:
                        old_format = (where, stmt.lineno)
        bases = []
        for base in cls.bases:
            base_name = base.id if isinstance(base, ast.Name) else base.attr if isinstance(base, ast.Attribute) else ""
            if base_name in _ROOTS:
                continue  # transformers' own default: False
            if base_name in ("object", "Generic", "GenerationMixin", "ABC") or not base_name:
                continue
            found = _base(where, base_name, folder, modules)
            if found is None or depth >= _MAX_DEPTH:
                if supports is None and enable_override is None:
                    return _unknown(auto_class, name, module, start, f"it inherits from {base_name}, not read")
                continue
            bases.append((found[0], found[1], depth + 1))
        stack.extend(reversed(bases))
    if enable_override is not None:
        answer, where, line = "own", *enable_override
    elif supports is None or not supports[0]:
        answer, where, line = ("no", supports[1], supports[2]) if supports else ("no", module, start.lineno)
    elif old_format is not None:
        answer, where, line = "old", *old_format
    else:
        answer, where, line = "yes", supports[1], supports[2]
    text = where.lines[line - 1].strip() if 0 < line <= len(where.lines) else ""
    return RemoteClass(auto_class, name, str(module.path), start.lineno, answer, str(where.path), line, text)


def _unknown(auto_class: str, name: str, module: _Module, cls: ast.ClassDef, why: str) -> RemoteClass:
    return RemoteClass(auto_class, name, str(module.path), cls.lineno, reason=why)


def _assignment(stmt: ast.stmt) -> tuple[str, ast.expr | None]:
    if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
        return stmt.targets[0].id, stmt.value
    if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.value is not None:
        return stmt.target.id, stmt.value
    return "", None


def _base(module: _Module, name: str, folder: Path, modules: dict) -> tuple[_Module, ast.ClassDef] | None:
    """A base class defined in the same file, or imported relatively from another file of the folder."""
    if name in module.classes:
        return module, module.classes[name]
    source, original = module.imported.get(name, ("", ""))
    if not source.startswith(".") or source.startswith(".."):
        return None  # transformers' own classes, or another package: not read
    other = _module(folder, source[1:], modules)
    if other is None or original not in other.classes:
        return None
    return other, other.classes[original]
