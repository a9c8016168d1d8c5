"""Static value resolution: what an argument expression evaluates to, without running anything.

Resolution works on a small symbolic algebra (Known, Cond, Namespace, DictSym, ObjSym, Dyn) and
ends in a `facts.Value` that carries the value, its state and every place it came from.
"""

from __future__ import annotations

import argparse
import ast
from typing import Any

from .. import dtypes
from .._util import python_lines
from ..facts import CONDITIONAL, DYNAMIC, KNOWN, Location, Origin, Predicate, Value
from .scopes import Scope, ScopeIndex, dotted

MAX_DEPTH = 24


# --- symbols ---------------------------------------------------------------------------------

class _Sym:
    """Resolver symbols are plain slotted classes: they are made by the thousand and defined at import."""

    __slots__ = ()

    def __init__(self, *args, **kwargs):
        names = self.__slots__
        for name, value in zip(names, args):
            setattr(self, name, value)
        for name in names[len(args):]:
            setattr(self, name, kwargs.get(name, self._defaults.get(name)))

    _defaults: dict = {}

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(f'{n}={getattr(self, n)!r}' for n in self.__slots__)})"


class Known(_Sym):
    __slots__ = ("value", "origins", "location")
    _defaults = {"origins": ()}


class Cond(_Sym):
    __slots__ = ("predicate", "if_true", "if_false")


class Dyn(_Sym):
    __slots__ = ("reason",)


class DictSym(_Sym):
    __slots__ = ("items", "location")


class Namespace(_Sym):
    """Parsed command-line options (argparse) or a dataclass instance (HfArgumentParser)."""

    __slots__ = ("fields", "what", "class_name", "location")
    _defaults = {"class_name": ""}


class ObjSym(_Sym):
    """The result of a call: attribute access reads the call's keyword arguments."""

    __slots__ = ("call", "scope", "callee")


class Context(_Sym):
    __slots__ = ("script_args", "visiting")

    def __init__(self, script_args=()):
        self.script_args = script_args
        self.visiting = set()


TORCH_DTYPE_PREFIX = "torch."
BOOL_STRINGS = {"true": True, "1": True, "yes": True, "y": True, "t": True,
                "false": False, "0": False, "no": False, "n": False, "f": False}


# --- imports ---------------------------------------------------------------------------------

class Imports:
    """Maps local names to the dotted names they were imported as."""

    def __init__(self, nodes: list[ast.AST]):
        self.names: dict[str, str] = {}
        self.modules: list[str] = []
        for node in nodes:
            if isinstance(node, ast.Import):
                for a in node.names:
                    self.modules.append(a.name)
                    self.names[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
            elif isinstance(node, ast.ImportFrom):
                mod = ("." * node.level) + (node.module or "")
                self.modules.append(mod)
                for a in node.names:
                    if a.name != "*":
                        self.names[a.asname or a.name] = f"{mod}.{a.name}" if mod else a.name

    def qualify(self, name: str) -> str:
        """`amp.autocast` with `from torch.cuda import amp` -> "torch.cuda.amp.autocast"."""
        if not name:
            return ""
        head, _, rest = name.partition(".")
        base = self.names.get(head)
        if base is None:
            return name
        return f"{base}.{rest}" if rest else base


# --- the resolver ----------------------------------------------------------------------------

class Resolver:
    def __init__(self, path: str, source: str, tree: ast.Module, index: ScopeIndex,
                 imports: Imports, script_args: tuple[str, ...] = (), nodes: list[ast.AST] | None = None):
        self.path = path
        self.nodes = nodes if nodes is not None else list(ast.walk(tree))
        self.lines = python_lines(source)
        self.tree = tree
        self.index = index
        self.imports = imports
        self.script_args = tuple(script_args)
        self._calls_to: dict[str, list[ast.Call]] | None = None
        self._parsers: dict[tuple[int, str], Namespace | Dyn] = {}

    # -- helpers
    def loc(self, node: ast.AST) -> Location:
        line = getattr(node, "lineno", 1)
        col = getattr(node, "col_offset", 0)
        text = self.lines[line - 1] if 0 < line <= len(self.lines) else ""
        column = len(text.encode("utf-8")[:col].decode("utf-8", errors="ignore")) + 1
        return Location(self.path, line, column)

    def text(self, node: ast.AST) -> str:
        try:
            return ast.unparse(node)
        except Exception:  # pragma: no cover - unparse handles every parsed node
            return ""

    def scope_of(self, node: ast.AST) -> Scope:
        return self.index.scope_of.get(id(node), self.index.module)

    def qualified(self, node: ast.AST) -> str:
        return self.imports.qualify(dotted(node))

    # -- public entry
    def value(self, node: ast.AST | None, scope: Scope | None = None) -> Value:
        if node is None:
            return Value(state="absent")
        scope = scope or self.scope_of(node)
        sym = self.sym(node, scope, Context(self.script_args))
        return self.to_value(sym, node)

    def to_value(self, sym: Any, node: ast.AST) -> Value:
        text = self.text(node)
        where = self.loc(node)
        if isinstance(sym, Known):
            return Value(state=KNOWN, value=_plain(sym.value), text=text,
                         origins=sym.origins or (Origin("code", text, where),),
                         location=sym.location or where)
        if isinstance(sym, Cond):
            return Value(state=CONDITIONAL, text=text, predicate=sym.predicate,
                         if_true=self.to_value(sym.if_true, node), if_false=self.to_value(sym.if_false, node),
                         origins=(Origin("code", text, where),), location=where)
        if isinstance(sym, DictSym):
            plain, missing = _plain_dict(sym)
            if missing:
                return Value(state=DYNAMIC, text=text, location=where,
                             reason=f"key {missing!r} of the dict is not a constant")
            return Value(state=KNOWN, value=plain, text=text, origins=(Origin("code", text, where),),
                         location=sym.location or where)
        reason = sym.reason if isinstance(sym, Dyn) else f"{text} is an object, not a value"
        return Value(state=DYNAMIC, text=text, location=where, reason=reason)

    # -- the symbolic evaluator
    def sym(self, node: ast.AST, scope: Scope, ctx: Context, depth: int = 0) -> Any:
        if depth > MAX_DEPTH:
            return Dyn("too many indirections to follow")
        key = (id(node), scope.name)
        if key in ctx.visiting:
            return Dyn("the value depends on itself")
        ctx.visiting.add(key)
        try:
            return self._sym(node, scope, ctx, depth + 1)
        finally:
            ctx.visiting.discard(key)

    def _sym(self, node: ast.AST, scope: Scope, ctx: Context, depth: int) -> Any:
        if isinstance(node, ast.Constant):
            return Known(node.value, (Origin("code", self.text(node), self.loc(node)),), self.loc(node))
        if isinstance(node, ast.Name):
            return self.lookup(node.id, scope, node, ctx, depth)
        if isinstance(node, ast.Attribute):
            return self._attribute(node, scope, ctx, depth)
        if isinstance(node, ast.IfExp):
            return self._branch(self.sym(node.test, scope, ctx, depth),
                                lambda: self.sym(node.body, scope, ctx, depth),
                                lambda: self.sym(node.orelse, scope, ctx, depth))
        if isinstance(node, ast.BoolOp):
            return self._boolop(node, scope, ctx, depth)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            return _negate(self.sym(node.operand, scope, ctx, depth))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            inner = self.sym(node.operand, scope, ctx, depth)
            if isinstance(inner, Known) and isinstance(inner.value, (int, float)):
                return Known(-inner.value, inner.origins, self.loc(node))
            return Dyn(f"{self.text(node)} is computed at run time")
        if isinstance(node, ast.Compare):
            return self._compare(node, scope, ctx, depth)
        if isinstance(node, ast.Dict):
            items = {}
            for k, v in zip(node.keys, node.values):
                if k is None:
                    inner = self.sym(v, scope, ctx, depth)
                    if isinstance(inner, DictSym):
                        items.update(inner.items)
                        continue
                    return Dyn(f"**{self.text(v)} cannot be followed")
                if isinstance(k, ast.Constant) and isinstance(k.value, str):
                    items[k.value] = self.sym(v, scope, ctx, depth)
            return DictSym(items, self.loc(node))
        if isinstance(node, (ast.List, ast.Tuple)):
            elts = [self.sym(e, scope, ctx, depth) for e in node.elts]
            if all(isinstance(e, Known) for e in elts):
                return Known([e.value for e in elts], (Origin("code", self.text(node), self.loc(node)),),
                             self.loc(node))
            return Dyn(f"{self.text(node)} has parts computed at run time")
        if isinstance(node, ast.Subscript):
            return self._subscript(node, scope, ctx, depth)
        if isinstance(node, ast.Call):
            return self._call(node, scope, ctx, depth)
        if isinstance(node, ast.NamedExpr):
            return self.sym(node.value, scope, ctx, depth)
        return Dyn(f"{self.text(node)[:60]} is computed at run time")

    # -- names
    def lookup(self, name: str, scope: Scope, use: ast.AST, ctx: Context, depth: int) -> Any:
        line = getattr(use, "lineno", 10**9)
        use_chain = self.index.chain_of.get(id(use), ())
        s: Scope | None = scope
        while s is not None:
            events = s.assigns.get(name, [])
            if s is not scope:  # a global read from a function: the module's final value
                line, use_chain = 10**9, ()
            before = [a for a in events if a.line < line or (a.line == line and s is not scope)]
            if before:
                return self._latest(before, s, use_chain, ctx, depth, name)
            if name in s.params:
                return self._param(name, s, ctx, depth)
            s = s.parent
        if name in self.imports.names:
            return Dyn(f"{name} is imported")
        return Dyn(f"{name} is not assigned in this file")

    def _latest(self, events: list, scope: Scope, use_chain: tuple, ctx: Context, depth: int,
                name: str, assumed: dict | None = None) -> Any:
        """The value of the last assignment that reaches the use, branch by branch."""
        assumed = dict(assumed or {})
        for i in range(len(events) - 1, -1, -1):
            a = events[i]
            extra = _strip_prefix(a.chain, use_chain)
            decided = True
            for step in extra:
                kind, node_id, branch = step
                if kind != "if":
                    decided = False
                    break
                if node_id in assumed:
                    if assumed[node_id] != branch:
                        decided = None  # skipped under this assumption
                        break
                    continue
                test = self.index.if_tests.get(node_id)
                cond = self.sym(test, scope, ctx, depth) if test is not None else Dyn("")
                if isinstance(cond, Known):
                    if bool(cond.value) != branch:
                        decided = None
                        break
                    continue
                if isinstance(cond, Cond):
                    here = self._assignment_value(a, scope, ctx, depth)
                    rest = self._latest(events[:i + 1], scope, use_chain, ctx, depth, name,
                                        {**assumed, node_id: not branch})
                    # keep the predicate's polarity: the branch that assigned is the True side
                    return Cond(cond.predicate, here, rest) if branch else Cond(cond.predicate, rest, here)
                decided = False
                break
            if decided is None:
                continue
            if decided is False:
                return Dyn(f"{name} is assigned inside a loop, try or run-time branch (line {a.line})")
            return self._assignment_value(a, scope, ctx, depth)
        return Dyn(f"{name} has no assignment on every path")

    def assigned_node(self, name: str, scope: Scope) -> ast.AST | None:
        """The expression last assigned to `name` in this scope or an enclosing one, unconditionally."""
        s: Scope | None = scope
        while s is not None:
            events = [a for a in s.assigns.get(name, []) if a.value is not None and a.index is None]
            if events:
                return events[-1].value
            s = s.parent
        return None

    def _assignment_value(self, a, scope: Scope, ctx: Context, depth: int) -> Any:
        if a.value is None:
            return Dyn(f"{a.name} is set by a loop or an augmented assignment (line {a.line})")
        inner = self.sym(a.value, scope, ctx, depth)
        if a.index is not None:
            if isinstance(inner, Known) and isinstance(inner.value, (list, tuple)) and a.index < len(inner.value):
                return Known(inner.value[a.index], inner.origins)
            if isinstance(inner, list) and a.index < len(inner):  # parse_args_into_dataclasses()
                return inner[a.index]
            return Dyn(f"{a.name} is unpacked from {self.text(a.value)[:60]}")
        if isinstance(inner, Known):
            origins = (Origin("code", f"{a.name} = {self.text(a.value)}"[:120], self.loc(a.node or a.value)),)
            return Known(inner.value, origins + tuple(o for o in inner.origins if o.kind != "code"),
                         inner.location)
        return inner

    def _param(self, name: str, scope: Scope, ctx: Context, depth: int) -> Any:
        position, default = scope.params[name]
        fname = scope.name.rsplit(".", 1)[-1]
        passed = []
        for call in self.calls_to(fname):
            arg = None
            for kw in call.keywords:
                if kw.arg == name:
                    arg = kw.value
            offset = 1 if scope.class_name and position >= 0 else 0  # `self`
            if arg is None and position >= 0 and 0 <= position - offset < len(call.args):
                candidate = call.args[position - offset]
                if not isinstance(candidate, ast.Starred):
                    arg = candidate
            passed.append((call, arg))
        if not passed:
            if default is not None:
                return self.sym(default, scope.parent or scope, ctx, depth)
            return Dyn(f"{name} is a parameter of {scope.name}(), which this file never calls")
        results = []
        for call, arg in passed:
            if arg is None:
                if default is None:
                    return Dyn(f"{name} of {scope.name}() is passed in a way that cannot be followed")
                results.append(self.sym(default, scope.parent or scope, ctx, depth))
            else:
                results.append(self.sym(arg, self.scope_of(call), ctx, depth))
        first = results[0]
        if all(_same(first, r) for r in results[1:]):
            return first
        return Dyn(f"{name} of {scope.name}() gets different values at its {len(results)} call sites")

    def calls_to(self, fname: str) -> list[ast.Call]:
        if self._calls_to is None:
            self._calls_to = {}
            for node in self.nodes:
                if isinstance(node, ast.Call):
                    callee = dotted(node.func)
                    if callee:
                        last = callee.rsplit(".", 1)[-1]
                        if callee == last or callee.startswith("self."):
                            self._calls_to.setdefault(last, []).append(node)
        return self._calls_to.get(fname, [])

    # -- attributes
    def _attribute(self, node: ast.Attribute, scope: Scope, ctx: Context, depth: int) -> Any:
        qual = self.qualified(node)
        if qual == "sys.argv":  # the script's command line as the doctor was given it
            return Known([self.path] + list(ctx.script_args),
                         (Origin("script-arg", "the script's command line"),), self.loc(node))
        if qual.startswith(TORCH_DTYPE_PREFIX) and qual.count(".") == 1:
            dtype = dtypes.from_torch_attr(node.attr)
            if dtype:
                return Known(f"torch.{dtype}", (Origin("code", self.text(node), self.loc(node)),), self.loc(node))
        name = dotted(node)
        if name:
            owner = scope
            line = getattr(node, "lineno", 10**9)
            s: Scope | None = owner
            while s is not None:  # `training_args.fp16 = True` after construction wins
                events = [a for a in s.assigns.get(name, []) if a.line < line or s is not owner]
                if events:
                    return self._latest(events, s, self.index.chain_of.get(id(node), ()), ctx, depth, name)
                s = s.parent
            if name.startswith("self."):
                for other in self.index.scopes:
                    if other.class_name and other.class_name == scope.class_name and name in other.assigns:
                        return self._latest(other.assigns[name], other, (), ctx, depth, name)
        base = self.sym(node.value, scope, ctx, depth)
        return self.member(base, node.attr, node, ctx, depth)

    def member(self, base: Any, attr: str, node: ast.AST, ctx: Context, depth: int) -> Any:
        if isinstance(base, Namespace):
            if attr in base.fields:
                return base.fields[attr]
            return Dyn(f"{attr} is not an option of {base.what}")
        if isinstance(base, ObjSym):
            for kw in base.call.keywords:
                if kw.arg == attr:
                    return self.sym(kw.value, base.scope, ctx, depth)
            for kw in base.call.keywords:
                if kw.arg is None:
                    inner = self.sym(kw.value, base.scope, ctx, depth)
                    if isinstance(inner, DictSym) and attr in inner.items:
                        return inner.items[attr]
            return Dyn(f"{attr} is not passed to {base.callee}() and takes its default")
        if isinstance(base, Cond):
            return Cond(base.predicate, self.member(base.if_true, attr, node, ctx, depth),
                        self.member(base.if_false, attr, node, ctx, depth))
        if isinstance(base, Dyn):
            return Dyn(base.reason)
        return Dyn(f"{self.text(node)[:60]} is computed at run time")

    # -- subscripts
    def _subscript(self, node: ast.Subscript, scope: Scope, ctx: Context, depth: int) -> Any:
        base_name = dotted(node.value)
        key = node.slice
        if isinstance(key, ast.Constant) and isinstance(key.value, str):
            if self.imports.qualify(base_name) == "os.environ":
                return Dyn(f"environment variable {key.value}")
            if base_name:
                events_name = f"{base_name}[{key.value!r}]"
                s: Scope | None = scope
                while s is not None:
                    if events_name in s.assigns:
                        return self._latest(s.assigns[events_name], s, (), ctx, depth, events_name)
                    s = s.parent
        if _is_capability_call(self, node.value) and isinstance(key, ast.Constant) and key.value == 0:
            return Dyn("capability_major")  # completed by _compare
        base = self.sym(node.value, scope, ctx, depth)
        k = self.sym(key, scope, ctx, depth)
        if isinstance(base, DictSym) and isinstance(k, Known) and k.value in base.items:
            return base.items[k.value]
        if isinstance(base, Known) and isinstance(k, Known):
            try:
                return Known(base.value[k.value], base.origins, base.location)
            except Exception:
                return Dyn(f"{self.text(node)} cannot be indexed statically")
        if isinstance(base, list) and isinstance(k, Known) and isinstance(k.value, int) and k.value < len(base):
            return base[k.value]
        return Dyn(f"{self.text(node)[:60]} is computed at run time")

    # -- conditions
    def _branch(self, test: Any, body, orelse) -> Any:
        if isinstance(test, Known):
            chosen = body() if test.value else orelse()
            decided_by = tuple(o for o in test.origins if o.kind != "code")
            if isinstance(chosen, Known) and decided_by:  # keep where the deciding flag came from
                return Known(chosen.value, decided_by + tuple(chosen.origins), chosen.location)
            return chosen
        if isinstance(test, Cond):
            return Cond(test.predicate, body(), orelse()) if _is_plain_predicate(test) else \
                Dyn("a condition that mixes hardware checks and run-time values")
        return Dyn(f"a run-time condition ({getattr(test, 'reason', '')})")

    def _boolop(self, node: ast.BoolOp, scope: Scope, ctx: Context, depth: int) -> Any:
        is_and = isinstance(node.op, ast.And)
        preds: list[Predicate] = []
        for v in node.values:
            s = self.sym(v, scope, ctx, depth)
            if isinstance(s, Known):
                if bool(s.value) != is_and:  # False in `and` / True in `or` decides
                    return Known(s.value, s.origins, s.location)
                continue
            if isinstance(s, Cond) and _is_plain_predicate(s):
                preds.append(s.predicate)
                continue
            return Dyn(f"{self.text(node)[:60]} depends on run-time values")
        if not preds:
            last = self.sym(node.values[-1], scope, ctx, depth)
            return last
        if len(preds) == 1:
            pred = preds[0]
        else:
            pred = Predicate("all" if is_and else "any", self.text(node), parts=tuple(preds))
        return _predicate_sym(pred)

    def _compare(self, node: ast.Compare, scope: Scope, ctx: Context, depth: int) -> Any:
        if len(node.ops) != 1:
            return Dyn(f"{self.text(node)[:60]} is a chained comparison")
        op, right_node = node.ops[0], node.comparators[0]
        hw = _hardware_comparison(self, node.left, op, right_node)
        if hw is not None:
            return _predicate_sym(hw)
        left = self.sym(node.left, scope, ctx, depth)
        right = self.sym(right_node, scope, ctx, depth)
        if isinstance(left, Known) and isinstance(right, Known):
            try:
                result = _COMPARE[type(op)](left.value, right.value)
            except Exception:
                return Dyn(f"{self.text(node)[:60]} cannot be compared statically")
            return Known(result, left.origins + right.origins, None)
        if isinstance(left, Cond) and isinstance(right, Known):
            return Cond(left.predicate,
                        self._decide_compare(left.if_true, op, right),
                        self._decide_compare(left.if_false, op, right))
        return Dyn(f"{self.text(node)[:60]} depends on run-time values")

    def _decide_compare(self, left: Any, op: ast.cmpop, right: Known) -> Any:
        if isinstance(left, Known):
            try:
                return Known(_COMPARE[type(op)](left.value, right.value), left.origins)
            except Exception:
                pass
        return Dyn("comparison of a run-time value")

    # -- calls
    def _call(self, node: ast.Call, scope: Scope, ctx: Context, depth: int) -> Any:
        callee = self.qualified(node.func)
        pred = hardware_predicate(self, node)
        if pred is not None:
            return _predicate_sym(pred)
        last = node.func.attr if isinstance(node.func, ast.Attribute) else callee.rsplit(".", 1)[-1]
        if callee == "getattr" and len(node.args) >= 2 and self.qualified(node.args[0]) == "torch":
            attr = self.sym(node.args[1], scope, ctx, depth)
            if isinstance(attr, Known) and isinstance(attr.value, str) and dtypes.from_torch_attr(attr.value):
                return Known(f"torch.{dtypes.from_torch_attr(attr.value)}", attr.origins, attr.location)
            if isinstance(attr, Cond):
                return Cond(attr.predicate, self._torch_attr(attr.if_true), self._torch_attr(attr.if_false))
            return Dyn(f"{self.text(node)} names a dtype only known at run time")
        if callee == "dict":
            items = {}
            for kw in node.keywords:
                if kw.arg is None:
                    inner = self.sym(kw.value, scope, ctx, depth)
                    if not isinstance(inner, DictSym):
                        return Dyn(f"**{self.text(kw.value)} cannot be followed")
                    items.update(inner.items)
                else:
                    items[kw.arg] = self.sym(kw.value, scope, ctx, depth)
            return DictSym(items, self.loc(node))
        if callee in ("bool", "str", "int", "float") and len(node.args) == 1:
            inner = self.sym(node.args[0], scope, ctx, depth)
            if isinstance(inner, Known):
                try:
                    return Known(_BUILTIN_CASTS[callee](inner.value), inner.origins, inner.location)
                except Exception:
                    return Dyn(f"{self.text(node)} fails or varies at run time")
            return inner
        if callee == "torch.device" and node.args:  # torch.device("cuda", 0) is its string form
            parts = [self.sym(a, scope, ctx, depth) for a in node.args[:2]]
            if all(isinstance(p, Known) for p in parts):
                text = ":".join(str(p.value) for p in parts)
                return Known(text, parts[0].origins, parts[0].location)
            return Dyn(f"{self.text(node)} names a device only known at run time")
        if callee in _TRL_HELPERS and node.args:  # TRL recipes: None unless the model config turns it on
            switch = _TRL_HELPERS[callee]
            config = self.sym(node.args[0], scope, ctx, depth)
            flags = [self.member(config, f, node, ctx, depth) for f in switch]
            if all(isinstance(f, Known) and not f.value for f in flags):
                return Known(None, tuple(o for f in flags for o in f.origins), self.loc(node))
            if any(isinstance(f, Known) and f.value for f in flags):
                return ObjSym(node, scope, callee)
            return Dyn(f"{self.text(node)} depends on run-time options")
        if callee == "len" and len(node.args) == 1:
            inner = self.sym(node.args[0], scope, ctx, depth)
            if isinstance(inner, Known) and isinstance(inner.value, (list, tuple, str, dict)):
                return Known(len(inner.value), inner.origins, inner.location)
            return Dyn(f"{self.text(node)} is computed at run time")
        if isinstance(node.func, ast.Attribute) and node.func.attr in _STR_METHODS:
            owner = self.sym(node.func.value, scope, ctx, depth)
            args = [self.sym(a, scope, ctx, depth) for a in node.args]
            if isinstance(owner, Known) and isinstance(owner.value, str) and all(isinstance(a, Known) for a in args):
                try:
                    return Known(getattr(owner.value, node.func.attr)(*[a.value for a in args]), owner.origins,
                                 owner.location)
                except Exception:
                    return Dyn(f"{self.text(node)} fails at run time")
        if callee in ("os.environ.get", "os.getenv"):
            name = node.args[0].value if node.args and isinstance(node.args[0], ast.Constant) else "?"
            return Dyn(f"environment variable {name}")
        if last in ("parse_args", "parse_known_args") and isinstance(node.func, ast.Attribute):
            ns = self.argparse_namespace(node.func.value, scope, ctx)
            if last == "parse_known_args" and not isinstance(ns, Dyn):
                return [ns, Dyn("remaining arguments")]
            return ns
        if last in ("parse_args_into_dataclasses", "parse_args_and_config", "parse_dict", "parse_yaml_file",
                    "parse_json_file") and isinstance(node.func, ast.Attribute):
            return self.hf_dataclasses(node, node.func.value, scope, ctx, depth, last)
        tensor = self._tensor(node, callee, scope, ctx, depth)
        if tensor is not None:
            return tensor
        # a function of this file with a single returned expression
        local = self.index.functions.get(callee) if callee and "." not in callee else None
        if local and len(local) == 1 and len(local[0].returns) == 1:
            fn = local[0]
            return self.sym(fn.returns[0], fn, ctx, depth)
        if callee:
            return ObjSym(node, scope, callee)
        if isinstance(node.func, ast.Attribute):  # a method of a call's result: load().half()
            return ObjSym(node, scope, f"<expr>.{node.func.attr}")
        return Dyn(f"{self.text(node)[:60]} is computed at run time")

    def _torch_attr(self, s: Any) -> Any:
        if isinstance(s, Known) and isinstance(s.value, str) and dtypes.from_torch_attr(s.value):
            return Known(f"torch.{dtypes.from_torch_attr(s.value)}", s.origins, s.location)
        return s

    def _tensor(self, node: ast.Call, callee: str, scope: Scope, ctx: Context, depth: int) -> Any:
        """Float tensors a script builds, so a half model fed fp32 inputs can be recognised."""
        creators = {"torch.randn", "torch.rand", "torch.zeros", "torch.ones", "torch.empty", "torch.full",
                    "torch.tensor", "torch.linspace", "torch.randn_like", "torch.rand_like"}
        if callee in creators:
            for kw in node.keywords:
                if kw.arg == "dtype":
                    d = self.sym(kw.value, scope, ctx, depth)
                    if isinstance(d, Known) and dtypes.from_string(d.value):
                        return Known(f"tensor:{dtypes.from_string(d.value)}", (), self.loc(node))
                    return Dyn("a tensor whose dtype is computed at run time")
            if callee == "torch.tensor":
                data = node.args[0] if node.args else None
                floats = data is not None and any(isinstance(n, ast.Constant) and isinstance(n.value, float)
                                                   for n in ast.walk(data))
                return Known("tensor:float32", (), self.loc(node)) if floats else Dyn("a tensor of run-time dtype")
            return Known("tensor:float32", (), self.loc(node))
        if isinstance(node.func, ast.Attribute) and node.func.attr in ("half", "bfloat16", "float", "to"):
            inner = self.sym(node.func.value, scope, ctx, depth)
            if isinstance(inner, Known) and isinstance(inner.value, str) and inner.value.startswith("tensor:"):
                target = {"half": dtypes.FLOAT16, "bfloat16": dtypes.BFLOAT16, "float": dtypes.FLOAT32}.get(
                    node.func.attr)
                if node.func.attr == "to":
                    target = inner.value.split(":", 1)[1]
                    for a in list(node.args) + [k.value for k in node.keywords if k.arg == "dtype"]:
                        d = self.sym(a, scope, ctx, depth)
                        if isinstance(d, Known) and dtypes.from_string(d.value):
                            target = dtypes.from_string(d.value)
                        elif not isinstance(d, Known) and not _looks_like_device(a):
                            return Dyn("a tensor cast to a run-time dtype")
                return Known(f"tensor:{target}", (), self.loc(node))
        return None

    # -- argparse
    def argparse_namespace(self, parser_node: ast.AST, scope: Scope, ctx: Context) -> Namespace | Dyn:
        parser_name = dotted(parser_node)
        if isinstance(parser_node, ast.Call):  # build_parser().parse_args(): the parser that function returns
            fn = self.index.functions.get(dotted(parser_node.func), [])
            if len(fn) == 1 and len(fn[0].returns) == 1 and dotted(fn[0].returns[0]):
                scope, parser_name = fn[0], dotted(fn[0].returns[0])
        if not parser_name:
            return Dyn("an argument parser that is not a plain variable")
        key = (id(scope), parser_name)
        if key not in self._parsers:
            self._parsers[key] = self._build_namespace(parser_name, scope, ctx)
        return self._parsers[key]

    def _build_namespace(self, parser_name: str, scope: Scope, ctx: Context) -> Namespace | Dyn:
        receivers = {parser_name}
        scope_nodes = self.nodes if scope.node is self.tree else list(ast.walk(scope.node))
        for node in scope_nodes:  # argument groups add options to the same parser
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) and \
                    isinstance(node.value.func, ast.Attribute) and \
                    node.value.func.attr in ("add_argument_group", "add_mutually_exclusive_group") and \
                    dotted(node.value.func.value) in receivers:
                for t in node.targets:
                    if dotted(t):
                        receivers.add(dotted(t))
        real = argparse.ArgumentParser(add_help=False, exit_on_error=False, allow_abbrev=False)
        defaults: dict[str, Any] = {}
        sentinel = object()
        for node in scope_nodes:
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr == "add_argument" and dotted(node.func.value) in receivers):
                continue
            flags = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
            if not flags:
                continue
            kw = {k.arg: k.value for k in node.keywords if k.arg}
            action = kw.get("action")
            action_name = action.value if isinstance(action, ast.Constant) else None
            if action is not None and action_name is None:
                action_name = "store_true" if "BooleanOptional" in self.text(action) else None
            options: dict[str, Any] = {"default": sentinel}
            if "dest" in kw and isinstance(kw["dest"], ast.Constant):
                options["dest"] = kw["dest"].value
            if action_name in ("store_true", "store_false", "count", "append", "store_const", "append_const"):
                options["action"] = action_name
                if action_name in ("store_const", "append_const") and "const" in kw:
                    const = self.sym(kw["const"], scope, ctx, 0)
                    options["const"] = const.value if isinstance(const, Known) else None
            else:
                nargs = kw.get("nargs")
                if isinstance(nargs, ast.Constant):
                    options["nargs"] = nargs.value
                if "const" in kw:
                    const = self.sym(kw["const"], scope, ctx, 0)
                    options["const"] = const.value if isinstance(const, Known) else None
                options["type"] = _argparse_type(self.text(kw["type"])) if "type" in kw else str
            try:
                action_obj = real.add_argument(*flags, **options)
            except Exception:
                continue
            dest = action_obj.dest
            loc = self.loc(node)
            if "default" in kw:
                d = self.sym(kw["default"], scope, ctx, 0)
                if isinstance(d, Known):
                    d = Known(d.value, (Origin("default", f"default of {flags[-1]}", loc),), self.loc(kw["default"]))
                defaults[dest] = d
            else:
                implicit = {"store_true": False, "store_false": True}.get(action_name)
                defaults[dest] = Known(implicit, (Origin("default", f"default of {flags[-1]}", loc),), loc)
        try:
            parsed, _ = real.parse_known_args(list(ctx.script_args))
        except (argparse.ArgumentError, SystemExit, Exception) as exc:  # noqa: BLE001 - the script's parser
            return Dyn(f"the script arguments do not parse: {exc}")
        fields: dict[str, Any] = {}
        for dest, default in defaults.items():
            got = getattr(parsed, dest, sentinel)
            if got is sentinel:
                fields[dest] = default
            else:
                fields[dest] = Known(got, (Origin("script-arg", f"--{dest.replace('_', '-')} on the command line"),))
        return Namespace(fields, f"the argparse options of {parser_name}")

    # -- HfArgumentParser / TrlParser
    def hf_dataclasses(self, call: ast.Call, parser_node: ast.AST, scope: Scope, ctx: Context, depth: int,
                       method: str) -> Any:
        parser = self.sym(parser_node, scope, ctx, depth)
        if not isinstance(parser, ObjSym) or not parser.call.args:
            return Dyn("an argument parser that cannot be followed")
        spec = parser.call.args[0]
        if isinstance(spec, ast.Name):  # dataclass_types = (ScriptArguments, SFTConfig, ...); TrlParser(dataclass_types)
            spec = self.assigned_node(spec.id, parser.scope) or spec
        classes = spec.elts if isinstance(spec, (ast.Tuple, ast.List)) else [spec]
        if method != "parse_args_into_dataclasses" and method != "parse_args_and_config":
            return [Dyn(f"{method} reads its values from a file or dict at run time") for _ in classes]
        from .dataclass_defaults import dataclass_fields  # local: only scripts that use HfArgumentParser

        args = list(ctx.script_args)
        out = []
        for cls in classes:
            name = self.qualified(cls)
            fields = dataclass_fields(self, name, cls)
            out.append(Namespace(_apply_hf_args(fields, args), f"the {name.rsplit('.', 1)[-1]} fields",
                                 class_name=name, location=self.loc(call)))
        return out


# --- helpers ---------------------------------------------------------------------------------

_COMPARE = {
    ast.Eq: lambda a, b: a == b, ast.NotEq: lambda a, b: a != b, ast.Lt: lambda a, b: a < b,
    ast.LtE: lambda a, b: a <= b, ast.Gt: lambda a, b: a > b, ast.GtE: lambda a, b: a >= b,
    ast.In: lambda a, b: a in b, ast.NotIn: lambda a, b: a not in b,
    ast.Is: lambda a, b: a is b, ast.IsNot: lambda a, b: a is not b,
}


def _strip_prefix(chain: tuple, use_chain: tuple) -> tuple:
    n = 0
    while n < len(chain) and n < len(use_chain) and chain[n] == use_chain[n]:
        n += 1
    return chain[n:]


def _plain(v: Any) -> Any:
    if isinstance(v, (str, int, float, bool)) or v is None:
        return v
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    if isinstance(v, dict):
        return {str(k): _plain(x) for k, x in v.items()}
    return repr(v)


def _plain_dict(sym: DictSym) -> tuple[dict, str]:
    """A dict of constants (nested dicts too), or the first key whose value is not one."""
    out = {}
    for k, v in sym.items.items():
        if isinstance(v, DictSym):
            inner, missing = _plain_dict(v)
            if missing:
                return {}, f"{k}.{missing}"
            out[k] = inner
        elif isinstance(v, Known):
            out[k] = _plain(v.value)
        else:
            return {}, k
    return out, ""


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, Known) and isinstance(b, Known):
        return a.value == b.value
    return False


def _negate(s: Any) -> Any:
    if isinstance(s, Known):
        return Known(not s.value, s.origins, s.location)
    if isinstance(s, Cond) and _is_plain_predicate(s):
        return Cond(s.predicate, Known(False), Known(True))
    return s if isinstance(s, Dyn) else Dyn("negation of a run-time value")


def _is_plain_predicate(c: Cond) -> bool:
    return isinstance(c.if_true, Known) and c.if_true.value is True and \
        isinstance(c.if_false, Known) and c.if_false.value is False


def _predicate_sym(pred: Predicate) -> Cond:
    return Cond(pred, Known(True), Known(False))


def _argparse_type(text: str):
    if text in ("int", "float", "str"):
        return {"int": int, "float": float, "str": str}[text]
    if "bool" in text.lower():
        return lambda s: BOOL_STRINGS.get(str(s).lower(), s)
    return str


def _looks_like_device(node: ast.AST) -> bool:
    text = ast.unparse(node)
    return "device" in text or "cuda" in text or "cpu" in text


def _is_capability_call(r: Resolver, node: ast.AST) -> bool:
    return isinstance(node, ast.Call) and r.qualified(node.func) in (
        "torch.cuda.get_device_capability",)


def hardware_predicate(r: Resolver, node: ast.Call) -> Predicate | None:
    callee = r.qualified(node.func)
    text = r.text(node)
    last = callee.rsplit(".", 1)[-1]
    if callee == "torch.cuda.is_available":
        return Predicate("cuda_available", text)
    if callee == "torch.cuda.is_bf16_supported" or last in ("is_torch_bf16_gpu_available", "is_bf16_available",
                                                             "is_torch_bf16_available_on_device"):
        emulation = True
        for kw in node.keywords:
            if kw.arg == "including_emulation" and isinstance(kw.value, ast.Constant):
                emulation = bool(kw.value.value)
        if node.args and isinstance(node.args[0], ast.Constant) and callee == "torch.cuda.is_bf16_supported":
            emulation = bool(node.args[0].value)
        return Predicate("bf16_supported", text, emulation=emulation, location=r.loc(node))
    if callee in ("torch.backends.mps.is_available",):
        return Predicate("mps_available", text)
    return None


def _hardware_comparison(r: Resolver, left: ast.AST, op: ast.cmpop, right: ast.AST) -> Predicate | None:
    text = f"{r.text(left)} {r.text(ast.Compare(left=left, ops=[op], comparators=[right]))[len(r.text(left)):]}"
    if not isinstance(right, (ast.Constant, ast.Tuple)):
        return None
    try:
        number = ast.literal_eval(right)
    except Exception:
        return None
    major = None
    if isinstance(left, ast.Subscript) and _is_capability_call(r, left.value) and \
            isinstance(left.slice, ast.Constant) and left.slice.value == 0 and isinstance(number, int):
        major = (number, 0)
    elif _is_capability_call(r, left) and isinstance(number, tuple):
        major = tuple(number) + (0,) * (2 - len(number))
    if major is not None:
        if isinstance(op, ast.GtE):
            return Predicate("capability_at_least", text.strip(), number=major)
        if isinstance(op, ast.Gt):
            bumped = (major[0] + 1, 0) if isinstance(number, int) else (major[0], major[1] + 1)
            return Predicate("capability_at_least", text.strip(), number=bumped)
        if isinstance(op, ast.Lt):
            return Predicate("not", text.strip(), parts=(Predicate("capability_at_least", text, number=major),))
        return None
    if isinstance(left, ast.Call) and r.qualified(left.func) == "torch.cuda.device_count" and isinstance(number, int):
        threshold = {ast.Gt: number + 1, ast.GtE: number}.get(type(op))
        if threshold is not None:
            return Predicate("gpu_count_at_least", text.strip(), number=(threshold,))
    return None


def _apply_hf_args(fields: dict[str, Any], args: list[str]) -> dict[str, Any]:
    """Apply `--name value` / `--flag` / `--flag True` the way HfArgumentParser reads them."""
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
        is_bool = isinstance(current, Known) and isinstance(current.value, bool) or \
            (isinstance(current, Known) and current.value is None and key in _BOOLISH)
        origin = (Origin("script-arg", f"{tok if not eq else tok.split('=')[0]} on the command line"),)
        if negated:
            out[key] = Known(False, origin)
            i += 1
        elif eq:
            out[key] = Known(_coerce(inline, is_bool), origin)
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
            out[key] = Known(_coerce(nxt, False), origin)
            i += 2
    return out


_TRL_HELPERS = {"trl.get_peft_config": ("use_peft",),
                "trl.get_quantization_config": ("load_in_4bit", "load_in_8bit")}

_STR_METHODS = {"endswith", "startswith", "lower", "upper", "strip", "replace"}

_BUILTIN_CASTS = {"bool": bool, "str": str, "int": int, "float": float}

_BOOLISH = {"bf16", "tf32", "gradient_checkpointing", "load_in_4bit", "load_in_8bit", "use_peft"}


def _coerce(text: str, is_bool: bool) -> Any:
    if is_bool and text.lower() in BOOL_STRINGS:
        return BOOL_STRINGS[text.lower()]
    for conv in (int, float):
        try:
            return conv(text)
        except ValueError:
            pass
    return text
