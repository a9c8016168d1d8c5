"""Static value resolution: what an argument expression evaluates to, without running anything.

Resolution works on a small symbolic algebra (`symbols`: Known, Cond, Multi, Dyn, ...) with a cycle guard
and branch-sensitive values, and ends in a `facts.Value` that carries the value, its state and every place
it came from. This module reads plain Python (names, branches, operators, local functions); what a library
call means (argparse, HfArgumentParser, torch, the environment, the GPU) is read by the handler modules in
`handlers/`, dispatched by the registry they declare.
"""

from __future__ import annotations

import ast
from math import inf as _INF

from ..model.facts import CONDITIONAL, DYNAMIC, KNOWN, Location, Origin, Predicate, TensorValue, Value
from ..model.util import python_lines
from .cli_functions import entry_of
from .cli_functions import parameter as cli_parameter
from .handlers import REGISTRY
from .handlers.torch_values import loop_item
from .scopes import TOGETHER, Assignment, Scope, ScopeIndex, dotted
from .symbols import (
    UNRESOLVED,
    Cond,
    Context,
    DictSym,
    Dyn,
    Known,
    Multi,
    Namespace,
    ObjSym,
    Seq,
    Sym,
    is_plain_predicate,
    predicate_sym,
    reason_of,
)

MAX_DEPTH = 24
TEXT_LIMIT = 2000  # characters of an expression worth rendering (reasons show 60)


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
    def __init__(
        self,
        path: str,
        source: str,
        tree: ast.Module,
        index: ScopeIndex,
        imports: Imports,
        script_args: tuple[str, ...] = (),
        nodes: list[ast.AST] | None = None,
        environ: tuple = (None, ""),
        calls: list[ast.Call] | None = None,
        by_type: dict[type, list[ast.AST]] | None = None,
    ):
        self.path = path
        self.environ = environ  # (variables or None when not known, where they come from): handlers/environment
        self.nodes = nodes if nodes is not None else list(ast.walk(tree))
        self.lines = python_lines(source)
        self._ascii = source.isascii()
        self._locs: dict[tuple[int, int], Location] = {}
        self.tree = tree
        self.index = index
        self.imports = imports
        self.script_args = tuple(script_args)
        self._texts: dict[int, tuple[ast.AST, str]] = {}
        self._qualified: dict[int, tuple[ast.AST, str]] = {}
        self._settled_values: dict[tuple, Sym] = {}
        self.memo: dict = {}  # handlers keep what they build once per script here, under their own keys
        self._calls_to: dict[str, list[ast.Call]] | None = None
        self._call_nodes: list[ast.Call] | None = calls
        self._by_type = by_type
        self._class_scopes: dict[str, list[Scope]] | None = None

    # -- helpers
    def loc(self, node: ast.AST) -> Location:
        """Where the node starts (one Location per position: most are asked for twice or more)."""
        line = getattr(node, "lineno", 1)
        col = getattr(node, "col_offset", 0)
        found = self._locs.get((line, col))
        if found is None:
            found = self._locs[line, col] = self._location(line, col)
        return found

    def _location(self, line: int, col: int) -> Location:
        if self._ascii:  # bytes are characters
            return Location(self.path, line, col + 1)
        text = self.lines[line - 1] if 0 < line <= len(self.lines) else ""
        if not text.isascii():  # ast counts columns in UTF-8 bytes; a Location in characters
            col = len(text.encode("utf-8")[:col].decode("utf-8", errors="ignore"))
        return Location(self.path, line, col + 1)

    def text(self, node: ast.AST) -> str:
        """The expression as Python writes it (rendered once per node: values, origins and reasons all ask)."""
        cached = self._texts.get(id(node))
        if cached is not None and cached[0] is node:  # the node is kept alive with it, so its id stays its own
            return cached[1]
        text = self._render(node)
        self._texts[id(node)] = (node, text)
        return text

    def _render(self, node: ast.AST) -> str:
        """ast.unparse; for an expression too deep to render, its first source line."""
        try:
            return plain_text(node) or ast.unparse(node)
        except RecursionError:
            line = getattr(node, "lineno", 0)
            text = self.lines[line - 1] if 0 < line <= len(self.lines) else ""
            start = len(text.encode("utf-8")[: getattr(node, "col_offset", 0)].decode("utf-8", errors="ignore"))
            return text[start : start + TEXT_LIMIT].strip()
        except Exception:  # pragma: no cover - unparse handles every parsed node
            return ""

    def scope_of(self, node: ast.AST) -> Scope:
        return self.index.scope_at(node)

    def qualified(self, node: ast.AST) -> str:
        """The dotted name with imports resolved, once per node (every call's callee is asked several times)."""
        cached = self._qualified.get(id(node))
        if cached is not None and cached[0] is node:
            return cached[1]
        name = self.imports.qualify(dotted(node))
        self._qualified[id(node)] = (node, name)
        return name

    # -- public entry
    def value(self, node: ast.AST | None, scope: Scope | None = None) -> Value:
        if node is None:
            return Value(state="absent")
        scope = scope or self.scope_of(node)
        sym = self.sym(node, scope, Context(self.script_args))
        return self.to_value(sym, node)

    def to_value(self, sym: Sym, node: ast.AST) -> Value:
        text = self.text(node)
        where = self.loc(node)
        if isinstance(sym, Known):
            return Value(
                state=KNOWN,
                value=_plain(sym.value),
                text=text,
                origins=sym.origins or (Origin("code", text, where),),
                location=sym.location or where,
            )
        if isinstance(sym, Cond):
            return Value(
                state=CONDITIONAL,
                text=text,
                predicate=sym.predicate,
                if_true=self.to_value(sym.if_true, node),
                if_false=self.to_value(sym.if_false, node),
                origins=(Origin("code", text, where),),
                location=where,
            )
        if isinstance(sym, DictSym):
            plain, missing = _plain_dict(sym)
            if missing is not None:
                inner = sym.items.get(missing.split(".", 1)[0])
                why = getattr(inner, "reason", "") if not isinstance(inner, DictSym) else ""
                return Value(
                    state=DYNAMIC,
                    text=text,
                    location=where,
                    reason=f"key {missing!r} of the dict is not a constant" + (f" ({why})" if why else ""),
                )
            read = tuple(
                o
                for item in sym.items.values()
                if isinstance(item, Known)  # an entry read from the env
                for o in item.origins
                if o.kind in ("env", "env-default")
            )
            return Value(
                state=KNOWN,
                value=plain,
                text=text,
                origins=read + (Origin("code", text, where),),
                location=sym.location or where,
            )
        return Value(
            state=DYNAMIC, text=text, location=where, reason=reason_of(sym, f"{text} is an object, not a value")
        )

    # -- the symbolic evaluator
    def sym(self, node: ast.AST, scope: Scope, ctx: Context, depth: int = 0) -> Sym:
        if depth > MAX_DEPTH:
            ctx.limits_hit += 1
            return Dyn("too many indirections to follow")
        key = (id(node), scope.name)
        visiting = ctx.visiting
        if key in visiting:
            ctx.limits_hit += 1
            return Dyn("the value depends on itself")
        visiting.add(key)
        try:
            return self._sym(node, scope, ctx, depth + 1)
        finally:
            visiting.discard(key)

    def _sym(self, node: ast.AST, scope: Scope, ctx: Context, depth: int) -> Sym:
        kind = type(node)  # the most frequent first (parsed nodes are never of a subclass)
        if kind is ast.Name:
            return self.lookup(node.id, scope, node, ctx, depth)
        if kind is ast.Attribute:
            return self._attribute(node, scope, ctx, depth)
        if kind is ast.Constant:
            where = self.loc(node)
            return Known(node.value, (Origin("code", self.text(node), where),), where)
        if kind is ast.Call:
            return self._call(node, scope, ctx, depth)
        if isinstance(node, ast.IfExp):
            return self._branch(
                self.sym(node.test, scope, ctx, depth),
                lambda: self.sym(node.body, scope, ctx, depth),
                lambda: self.sym(node.orelse, scope, ctx, depth),
            )
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
            return self._dict(node, scope, ctx, depth)
        if isinstance(node, (ast.List, ast.Tuple)):
            elts = [self.sym(e, scope, ctx, depth) for e in node.elts]
            if all(isinstance(e, Known) for e in elts):
                return Known(
                    [e.value for e in elts], (Origin("code", self.text(node), self.loc(node)),), self.loc(node)
                )
            return Seq(tuple(elts), f"{self.text(node)} has parts computed at run time")
        if isinstance(node, ast.Subscript):
            return self._subscript(node, scope, ctx, depth)
        if isinstance(node, ast.NamedExpr):
            return self.sym(node.value, scope, ctx, depth)
        if isinstance(node, ast.JoinedStr):
            return self._fstring(node, scope, ctx, depth)
        return Dyn(f"{self.text(node)[:60]} is computed at run time")

    def _fstring(self, node: ast.JoinedStr, scope: Scope, ctx: Context, depth: int) -> Sym:
        """f"cuda:{local_rank}": the text when every part is known, keeping where each came from (an environment
        variable's origin among them); else what makes it run-time."""
        text: list[str] = []
        origins: list[Origin] = []
        for part in node.values:
            if isinstance(part, ast.Constant) and isinstance(part.value, str):
                text.append(part.value)
                continue
            if not isinstance(part, ast.FormattedValue) or part.format_spec is not None or part.conversion != -1:
                return Dyn(f"{self.text(node)[:60]} is computed at run time")
            inner = self.sym(part.value, scope, ctx, depth)
            if not isinstance(inner, Known) or not isinstance(inner.value, (str, int, float, bool)):
                reason = getattr(inner, "reason", "")
                return Dyn(f"{self.text(node)[:60]} is computed at run time" + (f" ({reason})" if reason else ""))
            text.append(str(inner.value))
            origins.extend(o for o in inner.origins if o.kind != "code")
        where = self.loc(node)
        return Known("".join(text), (*origins, Origin("code", self.text(node), where)), where)

    def _dict(self, node: ast.Dict, scope: Scope, ctx: Context, depth: int) -> Sym:
        items = {}
        for k, v in zip(node.keys, node.values, strict=False):
            if k is None:
                inner = self.sym(v, scope, ctx, depth)
                if isinstance(inner, DictSym):
                    items.update(inner.items)
                    continue
                return Dyn(f"**{self.text(v)} cannot be followed")
            if isinstance(k, ast.Constant) and isinstance(k.value, str):
                items[k.value] = self.sym(v, scope, ctx, depth)
        return DictSym(items, self.loc(node))

    # -- names
    def lookup(self, name: str, scope: Scope, use: ast.AST, ctx: Context, depth: int) -> Sym:
        line = getattr(use, "lineno", 10**9)
        use_chain: tuple | ast.AST = use  # its branch chain, found only if an assignment sits in a branch
        s: Scope | None = scope
        while s is not None:
            if s is scope:
                events, end = s.before(name, line)
            else:  # a global read from a function: the module's final value
                events = s.assigns.get(name, [])
                end, use_chain = len(events), ()
            if end:
                return self._latest(events, end, s, use_chain, ctx, depth, name)
            if name in s.params:
                return self._param(name, s, ctx, depth)
            s = s.parent
        if name in self.imports.names:
            return Dyn(f"{name} is imported")
        return Dyn(f"{name} is not assigned in this file")

    def _latest(
        self,
        events: list[Assignment],
        end: int,
        scope: Scope,
        use_chain: tuple | ast.AST,
        ctx: Context,
        depth: int,
        name: str,
        assumed: dict | None = None,
    ) -> Sym:
        """The value of the last of `events[:end]` that reaches the use, branch by branch. `use_chain`: the use's
        branch chain, or the use itself (its chain is looked up when an assignment in a branch needs it)."""
        assumed = assumed or {}
        for i in range(end - 1, -1, -1):
            a = events[i]
            if not a.chain:  # assigned at the scope's root: reaches every use below it
                return self._assignment_value(a, scope, ctx, depth)
            if type(use_chain) is not tuple:
                use_chain = self.index.chain_at(use_chain)
            extra = _strip_prefix(a.chain, use_chain)
            decided = True
            for kind, node_id, branch in extra:
                if kind != "if":
                    decided = False
                    break
                if node_id in assumed:
                    if assumed[node_id] != branch:
                        decided = None  # skipped under this assumption
                        break
                    continue
                test = self.index.if_tests.get(node_id)
                cond = self._test_value(test, scope, ctx, depth) if test is not None else Dyn("")
                if isinstance(cond, Known):
                    if bool(cond.value) != branch:
                        decided = None
                        break
                    continue
                hardware = isinstance(cond, Cond)
                if (ctx.splits_left if hardware else ctx.alternatives_left) <= 0:
                    ctx.limits_hit += 1
                    if hardware:
                        return Dyn(f"{name} is assigned under too many GPU checks to follow (line {a.line})")
                    decided = False
                    break
                # either side of the branch: this assignment, or what reaches the use without it
                if hardware:
                    ctx.splits_left -= 1
                else:
                    ctx.alternatives_left -= 1
                here = self._assignment_value(a, scope, ctx, depth)
                rest = self._latest(events, i + 1, scope, use_chain, ctx, depth, name, {**assumed, node_id: not branch})
                if hardware:  # the branch that assigned is the predicate's True side
                    return Cond(cond.predicate, here, rest) if branch else Cond(cond.predicate, rest, here)
                return Multi((here, rest), _branch_reason(name, a))
            if decided is None:
                continue
            if decided is False:
                return Dyn(_branch_reason(name, a))
            return self._assignment_value(a, scope, ctx, depth)
        return Dyn(f"{name} has no assignment on every path")

    def assigned_node(self, name: str, scope: Scope) -> ast.AST | None:
        """The expression last assigned to `name` in this scope or an enclosing one, unconditionally."""
        s: Scope | None = scope
        while s is not None:
            for a in reversed(s.assigns.get(name, ())):
                if a.value is not None and a.index is None:
                    return a.value
            s = s.parent
        return None

    def _settled(self, key: tuple, ctx: Context, compute) -> Sym:
        """`compute()`, once per script: a value found without meeting a limit (depth, cycle guard, split
        budget) is the same wherever it is asked for, and a function called from 100 places or a name
        reassigned 20,000 times would otherwise be evaluated again on every use."""
        found = self._settled_values.get(key)
        if found is not None:
            return found
        limits = ctx.limits_hit
        found = compute()
        if ctx.limits_hit == limits:
            self._settled_values[key] = found
        return found

    def _test_value(self, test: ast.AST, scope: Scope, ctx: Context, depth: int) -> Sym:
        """An if's condition, settled like an assignment: a name assigned under the if is looked up many times."""
        key = ("test", id(test), id(scope))
        found = self._settled_values.get(key)
        if found is not None:
            return found
        return self._settled(key, ctx, lambda: self.sym(test, scope, ctx, depth))

    def _assignment_value(self, a: Assignment, scope: Scope, ctx: Context, depth: int) -> Sym:
        key = ("assignment", id(a))
        found = self._settled_values.get(key)
        if found is not None:
            return found
        return self._settled(key, ctx, lambda: self._evaluate_assignment(a, scope, ctx, depth))

    def _evaluate_assignment(self, a: Assignment, scope: Scope, ctx: Context, depth: int) -> Sym:
        if a.value is None:
            if isinstance(a.node, (ast.For, ast.AsyncFor)):
                found = loop_item(self, a.node, a.index, scope, ctx, depth)
                if found is not None:
                    return found
            return Dyn(f"{a.name} is set by a loop or an augmented assignment (line {a.line})")
        inner = self.sym(a.value, scope, ctx, depth)
        if a.index is not None:
            if isinstance(inner, Known) and isinstance(inner.value, (list, tuple)) and a.index < len(inner.value):
                return Known(inner.value[a.index], inner.origins)
            if isinstance(inner, Seq) and a.index < len(inner.items):  # parse_args_into_dataclasses()
                return inner.items[a.index]
            return Dyn(f"{a.name} is unpacked from {self.text(a.value)[:60]}")
        if isinstance(inner, Known):
            origins = (Origin("code", f"{a.name} = {self.text(a.value)}"[:120], self.loc(a.node or a.value)),)
            return Known(inner.value, origins + tuple(o for o in inner.origins if o.kind != "code"), inner.location)
        return inner

    def _param(self, name: str, scope: Scope, ctx: Context, depth: int) -> Sym:
        key = ("parameter", id(scope), name)
        found = self._settled_values.get(key)
        if found is not None:
            return found
        visiting = ctx.visiting
        if key in visiting:  # a recursive call passes the parameter on (`f(node.left)` in f): without this guard
            ctx.limits_hit += 1  # each call site would follow every other one again, factorially
            return Dyn(f"{name} of {scope.name}() depends on itself (a recursive call)")
        visiting.add(key)
        try:
            return self._settled(key, ctx, lambda: self._passed(name, scope, ctx, depth))
        finally:
            visiting.discard(key)

    def _passed(self, name: str, scope: Scope, ctx: Context, depth: int) -> Sym:
        """A parameter's value: what every call site passes, when they agree; for a function a command-line
        library calls (click, typer, fire, jsonargparse), what it makes of the job's arguments."""
        entry = entry_of(self, scope)
        if entry is not None:
            return cli_parameter(self, entry, name, scope, ctx, depth)
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
        return Multi(tuple(results), f"{name} of {scope.name}() gets different values at its {len(results)} call sites")

    def nodes_of(self, kind: type) -> list[ast.AST]:
        """The module's nodes of one type, in walk order (from the script probe's buckets when it gave them)."""
        if self._by_type is not None:
            found = self._by_type.get(kind, [])
            return [n for n in found if type(n) is kind] if any(kind in g for g in TOGETHER) else found
        return [n for n in self.nodes if type(n) is kind]

    def call_nodes(self) -> list[ast.Call]:
        """Every call of the module, in walk order (the script probe hands its list over: no second scan)."""
        if self._call_nodes is None:
            self._call_nodes = [n for n in self.nodes if isinstance(n, ast.Call)]
        return self._call_nodes

    def calls_to(self, fname: str) -> list[ast.Call]:
        if self._calls_to is None:
            self._calls_to = {}
            for node in self.call_nodes():  # `f(...)` and `self.[...].f(...)`, by f
                func = node.func
                if type(func) is ast.Name:
                    self._calls_to.setdefault(func.id, []).append(node)
                elif type(func) is ast.Attribute:
                    base = func.value
                    while type(base) is ast.Attribute:
                        base = base.value
                    if type(base) is ast.Name and base.id == "self":
                        self._calls_to.setdefault(func.attr, []).append(node)
        return self._calls_to.get(fname, [])

    def _scopes_of_class(self, class_name: str) -> list[Scope]:
        if self._class_scopes is None:
            self._class_scopes = {}
            for s in self.index.scopes:
                if s.class_name:
                    self._class_scopes.setdefault(s.class_name, []).append(s)
        return self._class_scopes.get(class_name, [])

    # -- attributes
    def _attribute(self, node: ast.Attribute, scope: Scope, ctx: Context, depth: int) -> Sym:
        handler = REGISTRY.for_value(self.qualified(node))
        if handler is not None:
            found = handler(self, node, scope, ctx, depth)
            if found is not None:
                return found
        name = dotted(node)
        if name:
            line = getattr(node, "lineno", 10**9)
            s: Scope | None = scope
            while s is not None:  # `training_args.fp16 = True` after construction wins
                if s is scope:
                    events, end = s.before(name, line)
                else:
                    events = s.assigns.get(name, [])
                    end = len(events)
                if end:
                    return self._latest(events, end, s, node, ctx, depth, name)
                s = s.parent
            if name.startswith("self.hparams.") and name.count(".") == 2 and scope.class_name:
                # Lightning's save_hyperparameters(): the `__init__` arguments the module was built with
                init = next((s for s in self._scopes_of_class(scope.class_name) if s.name.endswith("__init__")), None)
                if init is not None and node.attr in init.params:
                    return self._param(node.attr, init, ctx, depth)
            if name.startswith("self.") and scope.class_name:
                for other in self._scopes_of_class(scope.class_name):
                    if name in other.assigns:
                        events = other.assigns[name]
                        return self._latest(events, len(events), other, (), ctx, depth, name)
        if isinstance(node.value, ast.Name) and node.value.id in self.index.classes:  # `Config.model_name`
            shadowed, _ = scope.before(node.value.id, getattr(node, "lineno", 10**9))
            found = None if shadowed else self.class_attribute(node.value.id, node.attr, ctx, depth)
            if found is not None:
                return found
        base = self.sym(node.value, scope, ctx, depth)
        return self.member(base, node.attr, node, ctx, depth)

    def class_attribute(
        self,
        class_name: str,
        attr: str,
        ctx: Context,
        depth: int,
        call: ast.Call | None = None,
        call_scope: Scope | None = None,
    ) -> Sym | None:
        """An attribute of a class this file defines (or of its local bases), as the class sets it: a class-level
        value or dataclass field default (`field(default=...)`), a dataclass field passed by position, or what
        `__init__` assigns to `self.<attr>` from its parameters (the call's argument, else the default). None when
        the class is not this file's or does not set it."""
        cls = self.index.classes.get(class_name.rsplit(".", 1)[-1])
        seen: set[str] = set()
        fields: list[str] = []  # dataclass fields in order, bases first (for positional arguments)
        chain = []
        while cls is not None and cls.name not in seen and len(seen) < 16:
            seen.add(cls.name)
            chain.append(cls)
            cls = next((self.index.classes.get(dotted(b)) for b in cls.bases if dotted(b) in self.index.classes), None)
        for klass in reversed(chain):
            fields.extend(
                st.target.id for st in klass.body if isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name)
            )
        for klass in chain:
            init = next((st for st in klass.body if isinstance(st, ast.FunctionDef) and st.name == "__init__"), None)
            if init is not None:
                found = self._set_by_init(init, attr, ctx, depth, call, call_scope)
                if found is not None:
                    return found
            for st in klass.body:
                if isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name) and st.target.id == attr:
                    if call is not None and attr in fields and fields.index(attr) < len(call.args) and init is None:
                        return self.sym(call.args[fields.index(attr)], call_scope or self.index.module, ctx, depth)
                    if st.value is None:
                        return None
                    return self._field_default(st.value, attr, ctx, depth)
                if isinstance(st, ast.Assign) and any(isinstance(t, ast.Name) and t.id == attr for t in st.targets):
                    return self.sym(st.value, self.index.module, ctx, depth)
        return None

    def _field_default(self, value: ast.AST, attr: str, ctx: Context, depth: int) -> Sym:
        """A dataclass field's default: `= X`, `field(default=X)`; a default_factory is made at run time."""
        if isinstance(value, ast.Call) and dotted(value.func).rsplit(".", 1)[-1] == "field":
            for kw in value.keywords:
                if kw.arg == "default":
                    return self.sym(kw.value, self.index.module, ctx, depth)
            return Dyn(f"{attr} is made by a default_factory when the class is built")
        return self.sym(value, self.index.module, ctx, depth)

    def _set_by_init(
        self, init: ast.FunctionDef, attr: str, ctx: Context, depth: int, call: ast.Call | None, call_scope
    ) -> Sym | None:
        """What `__init__` assigns to self.<attr>: a parameter as the call passes it (else its default)."""
        target = f"self.{attr}"
        value = next(
            (
                st.value
                for st in init.body
                if isinstance(st, (ast.Assign, ast.AnnAssign))
                and any(dotted(t) == target for t in (st.targets if isinstance(st, ast.Assign) else [st.target]))
                and st.value is not None
            ),
            None,
        )
        if value is None:
            return None
        params = [a.arg for a in init.args.args]
        if isinstance(value, ast.Name) and value.id in params:
            if call is not None:
                for kw in call.keywords:
                    if kw.arg == value.id:
                        return self.sym(kw.value, call_scope or self.index.module, ctx, depth)
                position = params.index(value.id) - 1  # after self
                if 0 <= position < len(call.args) and not isinstance(call.args[position], ast.Starred):
                    return self.sym(call.args[position], call_scope or self.index.module, ctx, depth)
                if any(kw.arg is None for kw in call.keywords) or any(isinstance(a, ast.Starred) for a in call.args):
                    return Dyn(f"{attr} may be passed to {init.name}() through *args or **kwargs")
            defaults = init.args.defaults
            index = params.index(value.id) - (len(params) - len(defaults))
            if 0 <= index < len(defaults):
                return self.sym(defaults[index], self.index.module, ctx, depth)
            return Dyn(f"{attr} is a required argument of the class")
        if isinstance(value, ast.Constant):
            return self.sym(value, self.index.module, ctx, depth)
        return None

    def member(self, base: Sym, attr: str, node: ast.AST, ctx: Context, depth: int) -> Sym:
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
            found = self.class_attribute(base.callee, attr, ctx, depth, base.call, base.scope)
            if found is not None:  # a config class of this file: its field's default, or what __init__ sets
                return found
            return Dyn(f"{attr} is not passed to {base.callee}() and takes its default")
        if isinstance(base, DictSym) and attr in base.items:  # a loaded config read as `cfg.optim.lr` (OmegaConf)
            return base.items[attr]
        if isinstance(base, Cond):
            return Cond(
                base.predicate,
                self.member(base.if_true, attr, node, ctx, depth),
                self.member(base.if_false, attr, node, ctx, depth),
            )
        if isinstance(base, UNRESOLVED):
            return Dyn(base.reason)
        if isinstance(base, Seq) and base.reason:
            return Dyn(base.reason)
        return Dyn(f"{self.text(node)[:60]} is computed at run time")

    # -- subscripts
    def _subscript(self, node: ast.Subscript, scope: Scope, ctx: Context, depth: int) -> Sym:
        owner = node.value
        handler = REGISTRY.for_value(
            self.qualified(owner.func) + "()" if isinstance(owner, ast.Call) else self.qualified(owner)
        )
        if handler is not None:
            found = handler(self, node, scope, ctx, depth)
            if found is not None:
                return found
        base_name = dotted(owner)
        key = node.slice
        if base_name and isinstance(key, ast.Constant) and isinstance(key.value, str):
            events_name = f"{base_name}[{key.value!r}]"
            s: Scope | None = scope
            while s is not None:
                if events_name in s.assigns:
                    events = s.assigns[events_name]
                    return self._latest(events, len(events), s, (), ctx, depth, events_name)
                s = s.parent
        base = self.sym(owner, scope, ctx, depth)
        k = self.sym(key, scope, ctx, depth)
        if isinstance(base, DictSym) and isinstance(k, Known) and k.value in base.items:
            return base.items[k.value]
        if isinstance(base, Known) and isinstance(k, Known):
            try:
                return Known(base.value[k.value], base.origins, base.location)
            except Exception:
                return Dyn(f"{self.text(node)} cannot be indexed statically")
        if isinstance(base, Seq) and isinstance(k, Known) and isinstance(k.value, int) and k.value < len(base.items):
            return base.items[k.value]
        return Dyn(f"{self.text(node)[:60]} is computed at run time")

    # -- conditions
    def _branch(self, test: Sym, body, orelse) -> Sym:
        if isinstance(test, Known):
            chosen = body() if test.value else orelse()
            decided_by = tuple(o for o in test.origins if o.kind != "code")
            if isinstance(chosen, Known) and decided_by:  # keep where the deciding flag came from
                return Known(chosen.value, decided_by + tuple(chosen.origins), chosen.location)
            return chosen
        if isinstance(test, Cond):
            return (
                Cond(test.predicate, body(), orelse())
                if is_plain_predicate(test)
                else Dyn("a condition that mixes hardware checks and run-time values")
            )
        return Dyn(f"a run-time condition ({getattr(test, 'reason', '')})")

    def _boolop(self, node: ast.BoolOp, scope: Scope, ctx: Context, depth: int) -> Sym:
        is_and = isinstance(node.op, ast.And)
        preds: list[Predicate] = []
        for v in node.values:
            s = self.sym(v, scope, ctx, depth)
            if isinstance(s, Known):
                if bool(s.value) != is_and:  # False in `and` / True in `or` decides
                    return Known(s.value, s.origins, s.location)
                continue
            if isinstance(s, Cond) and is_plain_predicate(s):
                preds.append(s.predicate)
                continue
            return Dyn(f"{self.text(node)[:60]} depends on run-time values")
        if not preds:
            return self.sym(node.values[-1], scope, ctx, depth)
        if len(preds) == 1:
            pred = preds[0]
        else:
            pred = Predicate("all" if is_and else "any", self.text(node), parts=tuple(preds))
        return predicate_sym(pred)

    def _compare(self, node: ast.Compare, scope: Scope, ctx: Context, depth: int) -> Sym:
        if len(node.ops) != 1:
            return Dyn(f"{self.text(node)[:60]} is a chained comparison")
        op, right_node = node.ops[0], node.comparators[0]
        left = self.sym(node.left, scope, ctx, depth)
        handler = REGISTRY.compares.get(type(left))
        if handler is not None:  # a question to the GPU compared with a number: a hardware predicate
            found = handler(self, node, scope, ctx, depth)
            if found is not None:
                return found
        right = self.sym(right_node, scope, ctx, depth)
        if isinstance(left, Known) and isinstance(right, Known):
            try:
                result = _COMPARE[type(op)](left.value, right.value)
            except Exception:
                return Dyn(f"{self.text(node)[:60]} cannot be compared statically")
            return Known(result, left.origins + right.origins, None)
        if isinstance(left, Cond) and isinstance(right, Known):
            return Cond(
                left.predicate, _decide_compare(left.if_true, op, right), _decide_compare(left.if_false, op, right)
            )
        return Dyn(f"{self.text(node)[:60]} depends on run-time values")

    # -- calls
    def _call(self, node: ast.Call, scope: Scope, ctx: Context, depth: int) -> Sym:
        callee = self.qualified(node.func)
        for handler in REGISTRY.for_call(callee, node):
            found = handler(self, node, scope, ctx, depth)
            if found is not None:
                return found
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


# --- helpers ---------------------------------------------------------------------------------

_REPR_CONSTANTS = (str, int, bool, type(None), bytes)  # written by ast.unparse as repr() writes them
_PLAIN_DEPTH = 40  # deeper expressions go to ast.unparse (and its too-deep fallback), as before

# ast.unparse's operator precedences (its _Precedence, lowest first): an operand is put in parentheses when the
# place it is written in needs a higher precedence than its own. A test holds plain_text equal to ast.unparse.
_TEST, _OR, _AND, _NOT, _CMP, _EXPR, _FACTOR, _POWER, _ATOM = 4, 5, 6, 7, 8, 9, 15, 16, 18
_BINARY = {
    ast.Add: ("+", 13),
    ast.Sub: ("-", 13),
    ast.Mult: ("*", 14),
    ast.MatMult: ("@", 14),
    ast.Div: ("/", 14),
    ast.Mod: ("%", 14),
    ast.FloorDiv: ("//", 14),
    ast.LShift: ("<<", 12),
    ast.RShift: (">>", 12),
    ast.BitOr: ("|", 9),
    ast.BitXor: ("^", 10),
    ast.BitAnd: ("&", 11),
    ast.Pow: ("**", _POWER),
}
_UNARY = {ast.Not: ("not ", _NOT), ast.USub: ("-", _FACTOR), ast.UAdd: ("+", _FACTOR), ast.Invert: ("~", _FACTOR)}
_COMPARISON = {
    ast.Eq: " == ",
    ast.NotEq: " != ",
    ast.Lt: " < ",
    ast.LtE: " <= ",
    ast.Gt: " > ",
    ast.GtE: " >= ",
    ast.Is: " is ",
    ast.IsNot: " is not ",
    ast.In: " in ",
    ast.NotIn: " not in ",
}


def plain_text(node: ast.AST) -> str:
    """What ast.unparse writes for an expression made of names, plain constants, attributes, subscripts, calls,
    operators, comparisons, conditional expressions and list, tuple, set and dict displays (almost every rendered
    node: arguments, callees, conditions), without its visitor machinery; "" for anything else."""
    out: list[str] = []
    return "".join(out) if _write_plain(node, out, 0, _TEST) else ""


def _write_plain(node: ast.AST, out: list[str], depth: int, need: int) -> bool:
    """Write `node` where its place needs precedence `need`; False: a node this writer leaves to ast.unparse."""
    kind = type(node)
    if kind is ast.Name:
        out.append(node.id)
        return True
    if kind is ast.Constant:
        value = node.value
        if type(value) is float:
            if value != value or value in (_INF, -_INF):  # ast.unparse writes these as 1e309 and friends
                return False
        elif type(value) not in _REPR_CONSTANTS:
            return False
        if node.kind == "u":
            out.append("u")
        out.append(repr(value))
        return True
    if depth > _PLAIN_DEPTH:
        return False
    depth += 1
    if kind is ast.Attribute:
        owner = node.value
        if type(owner) is ast.Constant and isinstance(owner.value, int):  # `1 .real`: unparse adds a space
            return False
        if not _write_plain(owner, out, depth, _ATOM):
            return False
        out.append(".")
        out.append(node.attr)
        return True
    if kind is ast.Subscript:
        if type(node.slice) is ast.Tuple or not _write_plain(node.value, out, depth, _ATOM):
            return False
        out.append("[")
        if not _write_plain(node.slice, out, depth, _TEST):
            return False
        out.append("]")
        return True
    if kind is ast.Call:
        if not _write_plain(node.func, out, depth, _ATOM):
            return False
        out.append("(")
        first = True
        for arg in node.args:
            if not first:
                out.append(", ")
            first = False
            if not _write_plain(arg, out, depth, _TEST):
                return False
        for kw in node.keywords:
            if not first:
                out.append(", ")
            first = False
            if kw.arg is None:
                out.append("**")
            else:
                out.append(kw.arg)
                out.append("=")
            if not _write_plain(kw.value, out, depth, _TEST):
                return False
        out.append(")")
        return True
    if kind is ast.Starred:
        out.append("*")
        return _write_plain(node.value, out, depth, _EXPR)
    if kind is ast.BinOp:
        symbol, own = _BINARY[type(node.op)]
        left, right = (own + 1, own) if own == _POWER else (own, own + 1)  # `**` groups to the right
        return _operation(out, depth, need > own, ((node.left, left), f" {symbol} ", (node.right, right)))
    if kind is ast.UnaryOp:
        symbol, own = _UNARY[type(node.op)]
        return _operation(out, depth, need > own, (symbol, (node.operand, own)))
    if kind is ast.Compare:
        parts: list = [(node.left, _EXPR)]
        for op, right in zip(node.ops, node.comparators, strict=False):
            parts += (_COMPARISON[type(op)], (right, _EXPR))
        return _operation(out, depth, need > _CMP, parts)
    if kind is ast.BoolOp:
        own = _AND if type(node.op) is ast.And else _OR
        parts = []
        for i, value in enumerate(node.values):  # unparse asks each next operand for one level more: a and (b == c)
            if i:
                parts.append(" and " if own == _AND else " or ")
            parts.append((value, min(own + 1 + i, _ATOM)))
        return _operation(out, depth, need > own, parts)
    if kind is ast.IfExp:
        return _operation(
            out, depth, need > _TEST, ((node.body, _OR), " if ", (node.test, _OR), " else ", (node.orelse, _TEST))
        )
    if kind is ast.List or kind is ast.Tuple or (kind is ast.Set and node.elts):
        opening, closing = "[]" if kind is ast.List else "()" if kind is ast.Tuple else "{}"
        out.append(opening)
        for i, element in enumerate(node.elts):
            if i:
                out.append(", ")
            if not _write_plain(element, out, depth, _TEST):
                return False
        if kind is ast.Tuple and len(node.elts) == 1:
            out.append(",")
        out.append(closing)
        return True
    if kind is ast.Dict:
        out.append("{")
        for i, (key, value) in enumerate(zip(node.keys, node.values, strict=False)):
            if i:
                out.append(", ")
            if key is None:
                out.append("**")
                if not _write_plain(value, out, depth, _EXPR):
                    return False
                continue
            if not _write_plain(key, out, depth, _TEST):
                return False
            out.append(": ")
            if not _write_plain(value, out, depth, _TEST):
                return False
        out.append("}")
        return True
    if kind is ast.Slice:
        if node.lower is not None and not _write_plain(node.lower, out, depth, _TEST):
            return False
        out.append(":")
        if node.upper is not None and not _write_plain(node.upper, out, depth, _TEST):
            return False
        if node.step is not None:
            out.append(":")
            if not _write_plain(node.step, out, depth, _TEST):
                return False
        return True
    return False


def _operation(out: list[str], depth: int, parenthesised: bool, parts) -> bool:
    """An operator's text from its parts (a string, or an operand and the precedence its place needs), in
    parentheses where the operator's own place needs more than its precedence."""
    if parenthesised:
        out.append("(")
    for part in parts:
        if type(part) is str:
            out.append(part)
        elif not _write_plain(part[0], out, depth, part[1]):
            return False
    if parenthesised:
        out.append(")")
    return True


_COMPARE = {
    ast.Eq: lambda a, b: a == b,
    ast.NotEq: lambda a, b: a != b,
    ast.Lt: lambda a, b: a < b,
    ast.LtE: lambda a, b: a <= b,
    ast.Gt: lambda a, b: a > b,
    ast.GtE: lambda a, b: a >= b,
    ast.In: lambda a, b: a in b,
    ast.NotIn: lambda a, b: a not in b,
    ast.Is: lambda a, b: a is b,
    ast.IsNot: lambda a, b: a is not b,
}


def _branch_reason(name: str, a: Assignment) -> str:
    return f"{name} is assigned inside a loop, try or run-time branch (line {a.line})"


def _decide_compare(left: Sym, op: ast.cmpop, right: Known) -> Sym:
    if isinstance(left, Known):
        try:
            return Known(_COMPARE[type(op)](left.value, right.value), left.origins)
        except Exception:
            pass
    return Dyn("comparison of a run-time value")


def _strip_prefix(chain: tuple, use_chain: tuple) -> tuple:
    n = 0
    while n < len(chain) and n < len(use_chain) and chain[n] == use_chain[n]:
        n += 1
    return chain[n:]


def _plain(v: object) -> object:
    if isinstance(v, (str, int, float, bool, TensorValue)) or v is None:
        return v
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    if isinstance(v, dict):
        return {str(k): _plain(x) for k, x in v.items()}
    return repr(v)


def _plain_dict(sym: DictSym) -> tuple[dict, str | None]:
    """A dict of constants (nested dicts too), or the first key whose value is not one (None: every value is;
    the key may be "", as in device_map={"": rank})."""
    out = {}
    for k, v in sym.items.items():
        if isinstance(v, DictSym):
            inner, missing = _plain_dict(v)
            if missing is not None:
                return {}, f"{k}.{missing}"
            out[k] = inner
        elif isinstance(v, Known):
            out[k] = _plain(v.value)
        else:
            return {}, k
    return out, None


def _same(a: Sym, b: Sym) -> bool:
    if isinstance(a, Known) and isinstance(b, Known):
        return a.value == b.value
    return False


def _negate(s: Sym) -> Sym:
    if isinstance(s, Known):
        return Known(not s.value, s.origins, s.location)
    if isinstance(s, Cond) and is_plain_predicate(s):
        return Cond(s.predicate, Known(False), Known(True))
    if isinstance(s, UNRESOLVED):
        return s
    if isinstance(s, Seq) and s.reason:
        return Dyn(s.reason)
    return Dyn("negation of a run-time value")
