"""The model classes a checkpoint brings as its own code (config.json `auto_map`, loaded with
`trust_remote_code=True`), read as text: what `gradient_checkpointing_enable()` will do with them.

transformers raises for a class whose `supports_gradient_checkpointing` is not true (PreTrainedModel's default is
False: modeling_utils.py:3689 in 4.57.1, :3146 in 5.23.0); from 4.35.0 it then switches the `gradient_checkpointing`
flag of the model's modules and raises when no module has one (4.35.0 modeling_utils.py:1881-1901, unchanged in
5.24); a class that still defines the pre-4.35 `_set_gradient_checkpointing(module, value)` is enabled the old way,
its keyword arguments ignored (4.57.1 modeling_utils.py:3698-3711). The modeling file sits beside config.json in a
local folder or a cache snapshot; it is parsed, never imported. The class's method resolution order is Python's
(C3) over the classes of the folder's files; a base from transformers' own models or another package, or an
attribute set in a way this reading does not follow, leaves the answer unknown.
"""

from __future__ import annotations

import ast
from dataclasses import replace
from pathlib import Path

from ..model.facts import Location, RemoteClass
from ..system.sources import Unreadable, is_regular_file, read_source

# auto_map keys that name a model class (AutoConfig, AutoTokenizer and the processors build no model)
_NOT_MODELS = frozenset(
    {"AutoConfig", "AutoTokenizer", "AutoProcessor", "AutoImageProcessor", "AutoFeatureExtractor", "AutoVideoProcessor"}
)
_ROOTS = frozenset({"PreTrainedModel", "PretrainedModel"})  # transformers' base: supports_gradient_checkpointing False
_NEUTRAL = frozenset({"object", "Generic", "GenerationMixin", "ABC", "Module"})  # define none of what is read here
_SUPPORTS = "supports_gradient_checkpointing"
_ENABLES = ("gradient_checkpointing_enable", "activation_checkpointing_enable")
# what a modeling file may import without bringing a module that carries a `gradient_checkpointing` flag
_PLAIN_SOURCES = ("torch", "math", "typing", "dataclasses", "collections", "functools", "itertools", "warnings", "os")
_PLAIN_TRANSFORMERS = (
    "transformers.modeling_utils",
    "transformers.modeling_outputs",
    "transformers.configuration_utils",
    "transformers.utils",
    "transformers.activations",
    "transformers.cache_utils",
    "transformers.generation",
    "transformers.pytorch_utils",
    "transformers.modeling_attn_mask_utils",
    "transformers.modeling_rope_utils",
    "transformers.file_utils",
)
_PLAIN_TRANSFORMERS_NAMES = frozenset(
    {"PreTrainedModel", "PretrainedModel", "PretrainedConfig", "PreTrainedConfig", "GenerationMixin", "logging"}
)
_ROOT = "<PreTrainedModel>"


def remote_classes(folder: Path, auto_map: object, shown: str = "") -> tuple[RemoteClass, ...]:
    """One entry per model class `auto_map` names, with what its code says about gradient checkpointing. Paths are
    shown under `shown` (the folder as the report names it)."""
    if not isinstance(auto_map, dict):
        return ()
    reader = _Reader(folder, shown or str(folder))
    out = []
    for auto_class, ref in sorted(auto_map.items()):
        if not isinstance(auto_class, str) or auto_class in _NOT_MODELS or not isinstance(ref, str):
            continue
        module, _, name = ref.rpartition(".")
        if "--" in module:
            out.append(RemoteClass(auto_class, name, reason=f"its code is in another repository ({ref})"))
            continue
        found = reader.module(module)
        if found is None:
            out.append(RemoteClass(auto_class, name, reason=reader.why(module)))
            continue
        out.append(reader.judge(auto_class, name, found))
    return tuple(out)


class _Module:
    __slots__ = (
        "path",
        "shown",
        "lines",
        "classes",
        "imported",
        "relative",
        "plain_imports",
        "odd_supports",
        "enable_assigned",
        "flag_line",
        "flag_unknown",
        "checkpoint_calls",
    )

    def __init__(self, path: Path, shown: str, text: str, tree: ast.Module) -> None:
        self.path, self.shown = path, shown
        self.lines = text.splitlines()
        self.classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
        self.imported: dict[str, tuple[str, str]] = {}  # top-level name -> (module as written, its name there)
        self.relative: set[str] = set()  # the folder's files it imports, anywhere in it (`__init__` included)
        self.plain_imports = True  # it imports nothing that could bring a module with a checkpointing flag
        for node in tree.body:
            if isinstance(node, ast.ImportFrom):
                source = "." * node.level + (node.module or "")
                for alias in node.names:
                    self.imported[alias.asname or alias.name] = (source, alias.name)
        self.odd_supports = 0  # a line that sets the class's answer in a way not read (plain class-body ones are)
        self.enable_assigned = 0  # a class body binding gradient_checkpointing_enable by assignment
        self.flag_line = 0  # a module's `gradient_checkpointing` flag set (or a GradientCheckpointingLayer)
        self.flag_unknown = 0  # a line that may set it in a way not read (setattr with a computed name, __dict__)
        # torch's checkpoint called by the code itself (the old format's way): (line, use_reentrant as passed: True,
        # False, None where absent (torch's default), "?" where computed)
        self.checkpoint_calls: list[tuple[int, bool | None | str]] = []
        plain = {
            id(s.targets[0] if isinstance(s, ast.Assign) else s.target)
            for c in self.classes.values()
            for s in c.body
            if isinstance(s, (ast.Assign, ast.AnnAssign)) and _assignment(s)[0] == _SUPPORTS
        }
        configs = {id(c) for c in ast.walk(tree) if isinstance(c, ast.ClassDef) and _is_config(c)}
        for owner, each in _walk_with_class(tree):
            in_config = owner is not None and id(owner) in configs
            if isinstance(each, ast.ImportFrom):
                source = "." * each.level + (each.module or "")
                for alias in each.names:
                    self.plain_imports = self.plain_imports and _plain(source, alias.name)
                    if source.startswith(".") and not source.startswith(".."):
                        self.relative.add(source[1:] if source != "." else alias.name)
            elif isinstance(each, ast.Import):
                self.plain_imports = self.plain_imports and all(_plain(a.name, "") for a in each.names)
            elif isinstance(each, (ast.Name, ast.Attribute)) and isinstance(each.ctx, ast.Store):
                named = each.id if isinstance(each, ast.Name) else each.attr
                if named == _SUPPORTS and id(each) not in plain:
                    self.odd_supports = self.odd_supports or each.lineno
                elif named in _ENABLES and isinstance(each, ast.Name) and owner is not None:
                    self.enable_assigned = self.enable_assigned or each.lineno
                elif named == "gradient_checkpointing" and not in_config and _sets_a_flag(each, owner):
                    self.flag_line = self.flag_line or each.lineno
                elif named == "__dict__":
                    self.flag_unknown = self.flag_unknown or each.lineno
            elif isinstance(each, ast.Attribute) and each.attr == "__dict__" and not in_config:
                self.flag_unknown = self.flag_unknown or each.lineno
            elif isinstance(each, ast.Call) and isinstance(each.func, ast.Name) and each.func.id == "setattr":
                key = each.args[1] if len(each.args) > 1 else None
                if isinstance(key, ast.Constant) and key.value == _SUPPORTS:
                    self.odd_supports = self.odd_supports or each.lineno
                elif isinstance(key, ast.Constant) and key.value == "gradient_checkpointing" and not in_config:
                    self.flag_line = self.flag_line or each.lineno
                elif not isinstance(key, ast.Constant) and not in_config:
                    self.flag_unknown = self.flag_unknown or each.lineno
            elif isinstance(each, ast.ClassDef) and any(_name(b) == "GradientCheckpointingLayer" for b in each.bases):
                self.flag_line = self.flag_line or each.lineno
            if isinstance(each, ast.Call) and self._torch_checkpoint(each.func):
                passed = next((k.value for k in each.keywords if k.arg == "use_reentrant"), None)
                if passed is None:
                    reentrant: bool | None | str = None
                elif isinstance(passed, ast.Constant) and isinstance(passed.value, bool):
                    reentrant = passed.value
                else:
                    reentrant = "?"
                self.checkpoint_calls.append((each.lineno, reentrant))

    def _torch_checkpoint(self, func: ast.expr) -> bool:
        """`torch.utils.checkpoint.checkpoint`, or `checkpoint` / `checkpoint.checkpoint` imported from torch."""
        if isinstance(func, ast.Name):
            return self.imported.get(func.id) == ("torch.utils.checkpoint", "checkpoint")
        if not (isinstance(func, ast.Attribute) and func.attr == "checkpoint"):
            return False
        owner = func.value
        if isinstance(owner, ast.Name):
            return self.imported.get(owner.id) == ("torch.utils", "checkpoint")
        return (
            isinstance(owner, ast.Attribute)
            and owner.attr == "checkpoint"
            and isinstance(owner.value, ast.Attribute)
            and owner.value.attr == "utils"
            and isinstance(owner.value.value, ast.Name)
            and owner.value.value.id == "torch"
        )


def _walk_with_class(tree: ast.Module):
    """Every node with the top-level class it is in (None outside classes)."""
    for node in tree.body:
        owner = node if isinstance(node, ast.ClassDef) else None
        for each in ast.walk(node):
            yield owner, each


def _is_config(cls: ast.ClassDef) -> bool:
    """A configuration class: its `self.gradient_checkpointing` is a setting, not a module's flag."""
    return any(_name(b).endswith("Config") for b in cls.bases)


def _sets_a_flag(target: ast.Name | ast.Attribute, owner: ast.ClassDef | None) -> bool:
    """`self.gradient_checkpointing = ...` in a class, a class attribute, or `Block.gradient_checkpointing = ...`;
    not a local variable of that name."""
    if isinstance(target, ast.Attribute):
        return True
    if owner is None:
        return False
    return any(isinstance(s, (ast.Assign, ast.AnnAssign)) and _assignment(s)[0] == target.id for s in owner.body)


def _plain(source: str, name: str) -> bool:
    if source.startswith(".") or source.split(".", 1)[0] in _PLAIN_SOURCES or source == "__future__":
        return True
    if source == "transformers":
        return name in _PLAIN_TRANSFORMERS_NAMES
    return source.startswith(_PLAIN_TRANSFORMERS)


def _name(base: ast.expr) -> str:
    return base.id if isinstance(base, ast.Name) else base.attr if isinstance(base, ast.Attribute) else ""


class _Reader:
    """The folder's modeling files, each parsed once, and the classes' orders of resolution."""

    def __init__(self, folder: Path, shown: str) -> None:
        self.folder, self.shown = folder, shown
        self.modules: dict[str, _Module | None] = {}
        self.unparsable: set[str] = set()

    def module(self, name: str) -> _Module | None:
        if name in self.modules:
            return self.modules[name]
        self.modules[name] = None
        path = self.folder / f"{name}.py"
        if not name or "/" in name or "\\" in name or not is_regular_file(path):
            return None
        try:
            text = read_source(path)
            tree = ast.parse(text, filename=str(path))
        except (Unreadable, SyntaxError, ValueError, RecursionError):
            self.unparsable.add(name)
            return None
        self.modules[name] = _Module(path, f"{self.shown}/{name}.py", text, tree)
        return self.modules[name]

    def why(self, name: str) -> str:
        if name in self.unparsable:
            return f"{name}.py cannot be read or parsed by the Python the doctor runs on"
        return f"{name}.py is not beside its config.json on this machine"

    def base(self, module: _Module, name: str) -> tuple[_Module, ast.ClassDef] | None:
        """A base class defined in the same file, or imported relatively from another file of the folder."""
        if name in module.classes:
            return module, module.classes[name]
        source, original = module.imported.get(name, ("", ""))
        if not source.startswith(".") or source.startswith(".."):
            return None  # transformers' own classes, or another package: not read
        other = self.module(source[1:])
        if other is None or original not in other.classes:
            return None
        return other, other.classes[original]

    def mro(self, module: _Module, cls: ast.ClassDef, depth: int = 0) -> list | str:
        """Python's C3 order over (module, class) pairs, _ROOT for transformers' PreTrainedModel; a string says
        why it cannot be known."""
        if depth > 16:
            return "its bases go deeper than the doctor follows"
        parents = []
        for base in cls.bases:
            named = _name(base)
            source, original = module.imported.get(named, ("", named))
            if original in _ROOTS and (source.startswith("transformers") or named not in module.imported):
                parents.append([_ROOT])
            elif named in _NEUTRAL and named not in module.classes:
                continue
            else:
                found = self.base(module, named) if named else None
                if found is None:
                    return f"it inherits from {named or 'an expression'}, which is not read"
                inner = self.mro(*found, depth + 1)
                if isinstance(inner, str):
                    return inner
                parents.append(inner)
        return _c3([(module, cls)], parents + [[p[0] for p in parents]])

    def judge(self, auto_class: str, name: str, module: _Module) -> RemoteClass:
        start = module.classes.get(name)
        if start is None:
            return RemoteClass(auto_class, name, module.shown, reason=f"{module.path.name} defines no class {name}")
        order = self.mro(module, start)
        if isinstance(order, str):
            return RemoteClass(auto_class, name, module.shown, start.lineno, reason=order)
        return _with_own_enable(self._judge(auto_class, name, module, start, order), order)

    def _judge(self, auto_class: str, name: str, module: _Module, start: ast.ClassDef, order: list) -> RemoteClass:
        def unknown(why: str) -> RemoteClass:
            return RemoteClass(auto_class, name, module.shown, start.lineno, reason=why)

        read = self.reachable(module)
        if read is None:
            return unknown("it imports a file of its folder that is not there")
        odd = next(((m, m.odd_supports) for m in read if m.odd_supports), None)
        if odd is not None:
            return unknown(f"{_SUPPORTS} is set at {odd[0].shown}:{odd[1]} in a way the doctor does not follow")
        bound = next(((m, m.enable_assigned) for m in read if m.enable_assigned), None)
        if bound is not None:
            return unknown(f"{bound[0].shown}:{bound[1]} switches checkpointing on its own way")
        supports = setter = None
        for entry in order:
            if entry == _ROOT:  # PreTrainedModel: False, its own enable and the current setter
                supports = supports or (False, module, start.lineno)
                break
            where, cls = entry
            for stmt in cls.body:
                target, value = _assignment(stmt)
                if target == _SUPPORTS and supports is None:
                    if not (isinstance(value, ast.Constant) and isinstance(value.value, bool)):
                        return unknown(f"{_SUPPORTS} is computed ({where.shown}:{stmt.lineno})")
                    supports = (value.value, where, stmt.lineno)
                if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    if stmt.name in _ENABLES and not _calls_super(stmt):  # it runs instead of transformers' own
                        return unknown(f"{where.shown}:{stmt.lineno} switches checkpointing on its own way")
                    if stmt.name == "_set_gradient_checkpointing" and setter is None:
                        params = [a.arg for a in stmt.args.args + stmt.args.kwonlyargs]
                        setter = ("old" if "value" in params else "own", where, stmt.lineno)
        if supports is None:
            return unknown("its bases do not reach transformers' PreTrainedModel")
        # under transformers' own setter, whether any module of the model carries a `gradient_checkpointing` flag
        flags = _flags(read) if setter is None else True  # (a setter of its own does not ask transformers')
        if not supports[0]:
            return _answer(auto_class, name, module, start, "no", supports[1], supports[2], flags)
        if setter is not None and setter[0] == "old":
            old = _answer(auto_class, name, module, start, "old", setter[1], setter[2])
            return _own_checkpointing(old, read)
        return _answer(auto_class, name, module, start, "yes", supports[1], supports[2], flags)

    def reachable(self, module: _Module) -> list[_Module] | None:
        """The model's file and every file of the folder it imports, anywhere in them; None when one is missing."""
        todo, out = [module], list[_Module]()
        while todo:
            m = todo.pop()
            if any(m is o for o in out):
                continue
            out.append(m)
            for name in sorted(m.relative):
                other = self.module(name)
                if other is None:
                    return None
                todo.append(other)
        return out


def _flags(read: list[_Module]) -> bool | None:
    """True: some class of the model's code (`read`: its file and the folder's files it imports) sets a
    `gradient_checkpointing` flag; False: none does, and the code imports nothing that could bring one; None: it
    imports model code that is not read, or may set the flag in a way not read."""
    if any(m.flag_line for m in read):
        return True
    if any(not m.plain_imports or m.flag_unknown for m in read):
        return None
    return False


def _c3(head: list, sequences: list[list]) -> list | str:
    out = list(head)
    seqs = [list(s) for s in sequences if s]
    while seqs:
        for seq in seqs:
            candidate = seq[0]
            if not any(_same(candidate, x) for s in seqs for x in s[1:]):
                break
        else:
            return "its bases have no consistent order (Python would refuse the class)"
        out.append(candidate)
        seqs = [s[1:] if _same(s[0], candidate) else s for s in seqs]
        seqs = [s for s in seqs if s]
    return out


def _same(a, b) -> bool:
    if a == _ROOT or b == _ROOT:
        return a == b
    return a[0] is b[0] and a[1] is b[1]


def _calls_super(func: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """An override that hands on to the base's enable (`super().gradient_checkpointing_enable(...)`)."""
    for node in ast.walk(func):
        if isinstance(node, ast.Attribute) and node.attr in _ENABLES and isinstance(node.value, ast.Call):
            if isinstance(node.value.func, ast.Name) and node.value.func.id == "super":
                return True
    return False


def _with_own_enable(found: RemoteClass, order: list) -> RemoteClass:
    """The class's own `gradient_checkpointing_enable` (the first along its bases), which the Trainer calls with
    keywords: the keywords it takes, where it is defined, the class that defines it."""
    for entry in order:
        if entry == _ROOT:
            break
        where, cls = entry
        define = next((s for s in cls.body if isinstance(s, ast.FunctionDef) and s.name == _ENABLES[0]), None)
        if define is not None:
            args = define.args
            takes = tuple(a.arg for a in args.posonlyargs + args.args[1:] + args.kwonlyargs)
            text = where.lines[define.lineno - 1].strip() if 0 < define.lineno <= len(where.lines) else ""
            return replace(
                found,
                enable_keywords=takes + (("**",) if args.kwarg is not None else ()),
                enable_at=Location(where.shown, define.lineno),
                enable_text=text,
                enable_owner=cls.name,
            )
    return found


def _own_checkpointing(found: RemoteClass, read: list[_Module]) -> RemoteClass:
    """An old-format class checkpoints its layers with its own calls of torch's checkpoint: use_reentrant as they
    pass it, torch's default (reentrant, with a warning, through 2.13: utils/checkpoint.py:486-496) where they pass
    none. Reentrant where any call is; unknown where a call computes it or none is found."""
    calls = [(m, line, passed) for m in read for line, passed in m.checkpoint_calls]
    if not calls or any(passed == "?" for _, _, passed in calls):
        return found
    module, line, passed = next(((m, ln, p) for m, ln, p in calls if p is not False), calls[0])
    text = module.lines[line - 1].strip() if 0 < line <= len(module.lines) else ""
    return replace(
        found, own_reentrant=passed is not False, own_checkpoint=Location(module.shown, line), own_checkpoint_text=text
    )


def _answer(auto_class, name, module, start, answer, where, line, flags=None) -> RemoteClass:
    text = where.lines[line - 1].strip() if 0 < line <= len(where.lines) else ""
    return RemoteClass(auto_class, name, module.shown, start.lineno, answer, where.shown, line, text, flags)


def _assignment(stmt: ast.stmt) -> tuple[str, ast.expr | None]:
    if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
        return stmt.targets[0].id, stmt.value
    if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.value is not None:
        return stmt.target.id, stmt.value
    return "", None
