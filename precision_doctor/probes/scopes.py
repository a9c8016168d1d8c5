"""Scopes and assignments of one module, with the branch each assignment sits in.

The resolver asks: at this line of this function, what was `name` last set to, and under which
`if`? Branch chains let it turn `if torch.cuda.is_bf16_supported(): dtype = ...` into a
hardware-dependent value instead of a guess.
"""

from __future__ import annotations

import ast
import re
from bisect import bisect_left, bisect_right
from dataclasses import dataclass, field
from operator import itemgetter

# A branch step: ("if", id(If node), True|False) / ("loop", id(node), True) / ("try", id(node), True)
Branch = tuple


@dataclass
class Assignment:
    name: str  # "x" or a dotted target "self.model" / "args.fp16"
    line: int
    value: ast.AST | None  # None when the value cannot be named (for-loop targets, imports)
    chain: tuple  # branch steps from the scope's root
    index: int | None = None  # position in a tuple unpacking target
    node: ast.AST | None = None


def _bind_loop_targets(scope: Scope, loop: ast.For | ast.AsyncFor, chain: tuple) -> None:
    """`for x, y in loader:` binds each name to the loop, with its position in the batch (a pipeline the doctor
    reads gives it a value: probes/handlers/torch_values.loop_item)."""
    elts = loop.target.elts if isinstance(loop.target, (ast.Tuple, ast.List)) else [loop.target]
    for i, elt in enumerate(elts):
        position = i if len(elts) > 1 else None
        for name in names_in(elt):
            scope.add(Assignment(name, loop.lineno, None, chain, index=position, node=loop))


@dataclass
class Scope:
    name: str  # qualified: "<module>", "main", "Trainer.load"
    node: ast.AST
    parent: Scope | None
    params: dict[str, tuple[int, ast.AST | None]] = field(default_factory=dict)
    assigns: dict[str, list[Assignment]] = field(default_factory=dict)
    returns: list[ast.AST] = field(default_factory=list)
    class_name: str = ""
    _lines: dict[str, list[int] | None] = field(default_factory=dict, repr=False, compare=False)

    def add(self, a: Assignment) -> None:
        self.assigns.setdefault(a.name, []).append(a)
        self._lines.pop(a.name, None)

    def before(self, name: str, line: int) -> tuple[list[Assignment], int]:
        """The assignments of `name` written above `line`: the first `count` of the returned list.

        Found by bisection on the lines, so a lookup costs log(n) however often a name is reassigned;
        the rare list whose lines go backwards (a walrus inside a multi-line assignment) is filtered instead."""
        events = self.assigns.get(name)
        if not events:
            return [], 0
        if name not in self._lines:
            lines = [a.line for a in events]
            self._lines[name] = lines if all(a <= b for a, b in zip(lines, lines[1:], strict=False)) else None
        lines = self._lines[name]
        if lines is None:
            kept = [a for a in events if a.line < line]
            return kept, len(kept)
        return events, bisect_left(lines, line)


def dotted(node: ast.AST) -> str:
    """`self.model` -> "self.model"; anything that is not a plain name chain -> ""."""
    kind = type(node)
    if kind is _NAME:  # most asked
        return node.id
    if kind is not _ATTRIBUTE:
        return ""
    owner = node.value
    if type(owner) is _NAME:  # `a.b`: the next most asked
        return f"{owner.id}.{node.attr}"
    parts = [node.attr]
    while type(owner) is _ATTRIBUTE:
        parts.append(owner.attr)
        owner = owner.value
    if type(owner) is not _NAME:
        return ""
    parts.append(owner.id)
    parts.reverse()
    return ".".join(parts)


_NAME, _ATTRIBUTE = ast.Name, ast.Attribute


# Types the probe asks for together, in walk order among each other: one list holds each group (both of its types
# map to it), filled in the same pass.
TOGETHER = ((ast.Import, ast.ImportFrom), (ast.For, ast.AsyncFor))


def walk_by_type(tree: ast.AST) -> tuple[list[ast.AST], dict[type, list[ast.AST]]]:
    """`walk(tree)` and its nodes of each type, in walk order, made in one pass: each pass of the probe reads only
    the kinds it looks at. The types of a TOGETHER group share their list."""
    buckets: dict[type, list[ast.AST]] = {}
    for group in TOGETHER:
        shared: list[ast.AST] = []
        for kind in group:
            buckets[kind] = shared
    out = [tree]
    append, extend, fields, bucket_of = out.append, out.extend, _CHILD_FIELDS, buckets.get
    for node in out:  # the list grows as it is read: a queue without its pops
        kind = type(node)
        bucket = bucket_of(kind)
        if bucket is None:
            buckets[kind] = [node]
        else:
            bucket.append(node)
        spec = fields.get(kind)
        if spec is None:
            spec = child_fields(kind)
        for name, how in spec:
            value = getattr(node, name, None)
            if value is None:
                continue
            if how == ONE:
                append(value)
            elif how == MANY:
                extend(value)
            else:
                _add_any(out, value)
    return out, buckets


class _State:
    """Where the walk is: the scope, the branch chain from the scope's root, the class body, the loop depth."""

    __slots__ = ("scope", "chain", "class_name", "loops")

    def __init__(self, scope: Scope, chain: tuple = (), class_name: str = "", loops: int = 0):
        self.scope = scope
        self.chain = chain
        self.class_name = class_name
        self.loops = loops

    def enter(self, step: Branch) -> _State:
        return _State(self.scope, self.chain + (step,), self.class_name, self.loops)


# Nodes that only mark a Name's context or an operator (a third of every tree): shared singletons with nothing
# below them and nothing to resolve, so the index neither visits nor marks them.
_MARKER_BASES = (ast.expr_context, ast.operator, ast.boolop, ast.unaryop, ast.cmpop)
MARKERS = frozenset(cls for base in _MARKER_BASES for cls in base.__subclasses__())

# The fields of a node type that hold nodes other than markers, in `_fields` order: (name, kind), kind ONE (a node
# or None), MANY (a list of nodes), MANY_OR_NONE (a list that may hold None: Dict.keys, kw_defaults) or ANY (not
# declared: checked value by value). Read from the grammar line CPython puts in each node class's docstring,
# "Call(expr func, expr* args, keyword* keywords)", so a walk skips names, constants and markers without looking
# at them (Name and Constant, half of every tree, have no such field at all).
ONE, MANY, MANY_OR_NONE, ANY = 0, 1, 2, 3
_NOT_NODES = {"identifier", "string", "constant", "int", "object"} | {b.__name__ for b in _MARKER_BASES}
_NONE_ITEMS = {("Dict", "keys"), ("arguments", "kw_defaults")}
_DECLARED = re.compile(r"^\w+\((.*)\)$")
_CHILD_FIELDS: dict[type, tuple[tuple[str, int], ...]] = {}


def child_fields(cls: type) -> tuple[tuple[str, int], ...]:
    """The fields of this node type that may hold child nodes, in order (see ONE/MANY above)."""
    found = _CHILD_FIELDS.get(cls)
    if found is None:
        found = _CHILD_FIELDS[cls] = _declared_fields(cls)
    return found


def _declared_fields(cls: type) -> tuple[tuple[str, int], ...]:
    declared: dict[str, str] = {}
    match = _DECLARED.match((cls.__doc__ or "").strip().split("\n", 1)[0])
    if match:
        for part in match.group(1).split(","):
            words = part.split()
            if len(words) == 2:
                declared[words[1]] = words[0]
    out = []
    for name in cls._fields:
        kind = declared.get(name)
        if kind is None:
            out.append((name, ANY))
        elif kind.rstrip("*?") in _NOT_NODES:
            continue
        elif kind.endswith("*"):
            out.append((name, MANY_OR_NONE if (cls.__name__, name) in _NONE_ITEMS else MANY))
        else:
            out.append((name, ONE))
    return tuple(out)


def children(node: ast.AST) -> list[ast.AST]:
    """The node's children but the markers, in `ast.iter_child_nodes` order."""
    out: list[ast.AST] = []
    for name, kind in child_fields(type(node)):
        value = getattr(node, name, None)
        if value is None:
            continue
        if kind == ONE:
            out.append(value)
        elif kind == MANY:
            out.extend(value)
        else:
            _add_any(out, value)
    return out


def _add_any(out: list, value: object) -> None:
    """A field of undeclared shape (or a list that may hold None): its nodes but the markers."""
    if isinstance(value, ast.AST):
        if type(value) not in MARKERS:
            out.append(value)
    elif isinstance(value, list):
        out.extend(x for x in value if isinstance(x, ast.AST) and type(x) not in MARKERS)


def names_in(node: ast.AST) -> list[str]:
    """The plain names in an expression (an assignment's or a loop's target), in `ast.walk`'s order."""
    if type(node) is ast.Name:
        return [node.id]
    return [n.id for n in walk(node) if type(n) is ast.Name]


def walk(tree: ast.AST) -> list[ast.AST]:
    """Every node but the markers, in `ast.walk`'s order (breadth first), without its generators."""
    return walk_by_type(tree)[0]


class ScopeIndex:
    """Builds every scope of a module in one pass and remembers each node's scope and branch chain.

    A script nested as deep as `ast.parse` accepts (thousands of levels) must not exhaust Python's stack: the
    generic walk is iterative (an explicit stack, children pushed in reverse so nodes are met in source order),
    and the statement-by-statement walk recurses only into indented blocks (at most 100 deep).
    """

    def __init__(self, tree: ast.Module, walruses: bool = True):
        """`walruses=False` (the tree holds no `:=`): an expression's nodes are not marked one by one; a node is
        found, by position, in the outermost expression that holds it, when asked (most never are)."""
        self.module = Scope("<module>", tree, None)
        self.scopes: list[Scope] = [self.module]
        self.functions: dict[str, list[Scope]] = {}  # bare name -> scopes (several classes may define it)
        self.classes: dict[str, ast.ClassDef] = {}
        self.state_of: dict[int, _State] = {}  # id(node) -> where it sits
        self.if_tests: dict[int, ast.AST] = {}
        self.loop_lines: dict[int, int] = {}  # id(for/while) -> its line: which loop a call sits in
        self._marks_all = walruses  # a walrus binds a name from inside an expression: walk every expression
        # the outermost expressions (when not marking all), each with where it starts
        self._expressions: list[tuple[tuple[int, int], ast.AST, _State]] = []
        self._starts: list[tuple[int, int]] | None = None
        root = _State(self.module)
        if walruses or type(tree) is not ast.Module:
            self._run([(tree, root)])
        else:
            self.state_of[id(tree)] = root
            self._statements(tree.body, root)
            self._run([(t, root) for t in reversed(tree.type_ignores)])

    # -- where a node sits
    def state(self, node: ast.AST) -> _State | None:
        """The node's scope, branch chain and loop depth; None for a node the walk does not reach (a parameter's
        default, a class's bases, a `for` target)."""
        found = self.state_of.get(id(node))
        if found is not None or self._marks_all:
            return found
        start = (getattr(node, "lineno", None), getattr(node, "col_offset", None))
        if start[0] is None or start[1] is None:
            return None
        if self._starts is None:
            self._expressions.sort(key=_START)
            self._starts = [e[0] for e in self._expressions]
        i = bisect_right(self._starts, start) - 1
        if i < 0:
            return None
        _, outer, state = self._expressions[i]
        if (node.end_lineno, node.end_col_offset) <= (outer.end_lineno, outer.end_col_offset):
            return state  # outermost expressions never overlap: this one holds the node
        return None

    def scope_at(self, node: ast.AST) -> Scope:
        state = self.state(node)
        return self.module if state is None else state.scope

    def chain_at(self, node: ast.AST) -> tuple:
        state = self.state(node)
        return () if state is None else state.chain

    def _run(self, stack: list) -> None:
        # The visitors are looked up on the class (functions, not bound methods kept on the index: those would
        # make each index a reference cycle, which only the cyclic collector frees, and the probe pauses it).
        visitors, generic = _VISITORS, ScopeIndex._generic
        while stack:
            item = stack.pop()
            if callable(item):  # work that follows a node's children (a target is bound after its value)
                item()
                continue
            node, state = item
            todo = visitors.get(type(node), generic)(self, node, state)
            stack.extend(reversed(todo))

    # -- the walk of a tree without walruses: statement by statement, an expression recorded whole, a target bound
    # as soon as its statement is met (nothing inside an expression binds). Indented blocks nest at most 100 deep
    # (the tokenizer's limit), so the recursion is bounded; elif chains, which do not indent, are followed in a
    # loop; the statements not read here go through the generic walk.
    def _statements(self, body: list[ast.stmt], state: _State) -> None:
        for stmt in body:
            kind = type(stmt)
            if kind is ast.Assign:
                self._outermost(stmt.value, state)
                for target in stmt.targets:
                    self._target(target, stmt.value, stmt, state)
            elif kind is ast.Expr:
                self.state_of[id(stmt)] = state
                self._outermost(stmt.value, state)
            elif kind is ast.If:
                self._if_chain(stmt, state)
            elif kind is ast.Return:
                if stmt.value is not None:
                    state.scope.returns.append(stmt.value)
                    self._outermost(stmt.value, state)
            elif kind is ast.FunctionDef or kind is ast.AsyncFunctionDef:
                inner = self._define(stmt, state)
                for d in stmt.decorator_list:
                    self._outermost(d, state)
                self._statements(stmt.body, inner)
            elif kind is ast.Import or kind is ast.ImportFrom:
                continue
            elif kind is ast.ClassDef:
                self.classes[stmt.name] = stmt
                self._statements(stmt.body, _State(state.scope, state.chain, stmt.name, state.loops))
            elif kind is ast.For or kind is ast.AsyncFor or kind is ast.While:
                header = stmt.test if kind is ast.While else stmt.iter
                self._outermost(header, state)
                inside = state.enter(("loop", id(stmt), True))
                self.loop_lines[id(stmt)] = stmt.lineno
                if kind is not ast.While:
                    _bind_loop_targets(state.scope, stmt, inside.chain)
                self._statements(stmt.body, _State(inside.scope, inside.chain, inside.class_name, inside.loops + 1))
                self._statements(stmt.orelse, inside)
            elif kind is ast.AugAssign:
                self._outermost(stmt.value, state)
                name = dotted(stmt.target)
                if name:
                    state.scope.add(Assignment(name, stmt.lineno, None, state.chain, node=stmt))
            elif kind is ast.AnnAssign:
                if stmt.value is not None:
                    self._outermost(stmt.value, state)
                    self._target(stmt.target, stmt.value, stmt, state)
            elif kind is ast.With or kind is ast.AsyncWith:
                for item in stmt.items:
                    self._outermost(item.context_expr, state)
                    if item.optional_vars is not None:
                        self._target(item.optional_vars, item.context_expr, stmt, state)
                self._statements(stmt.body, state)
            elif kind is ast.Try or kind is _TRY_STAR:
                inside = state.enter(("try", id(stmt), True))
                self._statements(stmt.body, inside)
                for handler in stmt.handlers:
                    self._statements(handler.body, state.enter(("except", id(handler), True)))
                self._statements(stmt.orelse, inside)
                self._statements(stmt.finalbody, state)
            else:  # match, raise, assert, delete, ...: the generic walk
                self._run([(stmt, state)])

    def _if_chain(self, stmt: ast.If, state: _State) -> None:
        """An if and its elifs, in a loop: an elif is an if nested in the else without indentation, so a chain of
        thousands is as deep as the parser allows, far past Python's recursion limit."""
        while True:
            self.if_tests[id(stmt)] = stmt.test
            self._outermost(stmt.test, state)
            self._statements(stmt.body, state.enter(("if", id(stmt), True)))
            otherwise = state.enter(("if", id(stmt), False))
            if len(stmt.orelse) != 1 or type(stmt.orelse[0]) is not ast.If:
                self._statements(stmt.orelse, otherwise)
                return
            stmt, state = stmt.orelse[0], otherwise

    def _outermost(self, node: ast.expr, state: _State) -> None:
        self.state_of[id(node)] = state
        self._expressions.append(((node.lineno, node.col_offset), node, state))

    # -- scopes
    def _define(self, node: ast.FunctionDef | ast.AsyncFunctionDef, state: _State) -> _State:
        """The function's scope, its parameters and defaults; the state its body is read in."""
        qual = f"{state.class_name}.{node.name}" if state.class_name else node.name
        scope = Scope(qual, node, state.scope, class_name=state.class_name)
        args = node.args
        positional = list(args.posonlyargs) + list(args.args)
        defaults = [None] * (len(positional) - len(args.defaults)) + list(args.defaults)
        for i, (a, d) in enumerate(zip(positional, defaults, strict=False)):
            scope.params[a.arg] = (i, d)
        for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=False):
            scope.params[a.arg] = (-1, d)
        self.scopes.append(scope)
        self.functions.setdefault(node.name, []).append(scope)
        return _State(scope)

    def _function(self, node: ast.FunctionDef | ast.AsyncFunctionDef, state: _State) -> list:
        inner = self._define(node, state)
        return [(d, state) for d in node.decorator_list] + [(stmt, inner) for stmt in node.body]

    def _class(self, node: ast.ClassDef, state: _State) -> list:
        self.classes[node.name] = node
        inner = _State(state.scope, state.chain, node.name, state.loops)
        return [(stmt, inner) for stmt in node.body]

    # -- branches
    def _if(self, node: ast.If, state: _State) -> list:
        self.if_tests[id(node)] = node.test
        self._mark(node.test, state)
        return (
            [(node.test, state)]
            + _block(node.body, state.enter(("if", id(node), True)))
            + _block(node.orelse, state.enter(("if", id(node), False)))
        )

    def _loop(self, node: ast.For | ast.While | ast.AsyncFor, state: _State) -> list:
        header = node.iter if isinstance(node, (ast.For, ast.AsyncFor)) else node.test
        self._mark(header, state)
        step = ("loop", id(node), True)
        inside = state.enter(step)
        self.loop_lines[id(node)] = node.lineno

        def bind_targets() -> None:
            if isinstance(node, (ast.For, ast.AsyncFor)):
                _bind_loop_targets(state.scope, node, inside.chain)

        body_state = _State(inside.scope, inside.chain, inside.class_name, inside.loops + 1)
        return [(header, state), bind_targets] + _block(node.body, body_state) + _block(node.orelse, inside)

    def _try(self, node: ast.Try, state: _State) -> list:
        inside = state.enter(("try", id(node), True))
        todo = _block(node.body, inside)
        for h in node.handlers:
            todo += _block(h.body, state.enter(("except", id(h), True)))
        return todo + _block(node.orelse, inside) + _block(node.finalbody, state)

    # -- assignments
    def _assign(self, node: ast.Assign, state: _State) -> list:
        def bind() -> None:
            for target in node.targets:
                self._target(target, node.value, node, state)

        return [(node.value, state), bind]

    def _ann_assign(self, node: ast.AnnAssign, state: _State) -> list:
        if node.value is None:
            return []
        return [(node.value, state), lambda: self._target(node.target, node.value, node, state)]

    def _aug_assign(self, node: ast.AugAssign, state: _State) -> list:
        def bind() -> None:
            name = dotted(node.target)
            if name:
                state.scope.add(Assignment(name, node.lineno, None, state.chain, node=node))

        return [(node.value, state), bind]

    def _named_expr(self, node: ast.NamedExpr, state: _State) -> list:
        return [
            (node.value, state),
            lambda: state.scope.add(Assignment(node.target.id, node.lineno, node.value, state.chain, node=node)),
        ]

    def _with(self, node: ast.With | ast.AsyncWith, state: _State) -> list:
        todo: list = []
        for item in node.items:
            self._mark(item.context_expr, state)
            todo.append((item.context_expr, state))
            if item.optional_vars is not None:
                todo.append(lambda item=item: self._target(item.optional_vars, item.context_expr, node, state))
        return todo + [(stmt, state) for stmt in node.body]

    def _nothing(self, node: ast.AST, state: _State) -> list:
        return []  # imports are read by the import table, not as assignments

    def _return(self, node: ast.Return, state: _State) -> list:
        if node.value is None:
            return []
        state.scope.returns.append(node.value)
        return [(node.value, state)]

    def _target(self, target: ast.AST, value: ast.AST, stmt: ast.AST, state: _State) -> None:
        scope, chain = state.scope, state.chain
        if isinstance(target, (ast.Tuple, ast.List)):
            direct = value if isinstance(value, (ast.Tuple, ast.List)) else None
            for i, elt in enumerate(target.elts):
                name = dotted(elt)
                if not name:
                    continue
                if direct is not None and i < len(direct.elts):
                    scope.add(Assignment(name, stmt.lineno, direct.elts[i], chain, node=stmt))
                else:
                    scope.add(Assignment(name, stmt.lineno, value, chain, index=i, node=stmt))
            return
        name = dotted(target)
        if name:
            scope.add(Assignment(name, stmt.lineno, value, chain, node=stmt))
        elif isinstance(target, ast.Subscript):
            base = dotted(target.value)
            key = target.slice
            if base and isinstance(key, ast.Constant) and isinstance(key.value, str):
                scope.add(Assignment(f"{base}[{key.value!r}]", stmt.lineno, value, chain, node=stmt))

    # -- every other node remembers its scope and branch chain, then its children are walked
    def _generic(self, node: ast.AST, state: _State) -> list:
        if isinstance(node, ast.expr):
            return self._expression(node, state)
        self.state_of[id(node)] = state
        return [(child, state) for child in children(node)]

    def _expression(self, node: ast.expr, state: _State) -> list:
        """An expression and everything in it share one state. Without walruses in the tree only the expression is
        recorded (`state` finds its nodes by position); else every node is marked in a tight loop, and a walrus goes
        through its visitor to bind its name, in source order."""
        states = self.state_of
        states[id(node)] = state
        if not self._marks_all:
            self._expressions.append(((node.lineno, node.col_offset), node, state))
            return []
        named = ast.NamedExpr
        todo = [node]
        pop, extend = todo.pop, todo.extend
        while todo:
            n = pop()
            if type(n) is named:
                self._run([(n, state)])
                continue
            states[id(n)] = state
            extend(reversed(children(n)))  # source order, so that walruses bind in the order they are written
        return []

    def _mark(self, node: ast.AST, state: _State) -> None:
        self.state_of[id(node)] = state

    def place(self, node: ast.AST, like: ast.AST) -> None:
        """Record a node the probe builds itself (a call with its arguments bound by name) where `like` sits."""
        self.state_of[id(node)] = self.state(like) or _State(self.scope_at(like))


_TRY_STAR = getattr(ast, "TryStar", ast.Try)
_START = itemgetter(0)

_VISITORS = {
    ast.FunctionDef: ScopeIndex._function,
    ast.AsyncFunctionDef: ScopeIndex._function,
    ast.ClassDef: ScopeIndex._class,
    ast.If: ScopeIndex._if,
    ast.For: ScopeIndex._loop,
    ast.AsyncFor: ScopeIndex._loop,
    ast.While: ScopeIndex._loop,
    ast.Try: ScopeIndex._try,
    ast.Assign: ScopeIndex._assign,
    ast.AnnAssign: ScopeIndex._ann_assign,
    ast.AugAssign: ScopeIndex._aug_assign,
    ast.NamedExpr: ScopeIndex._named_expr,
    ast.With: ScopeIndex._with,
    ast.AsyncWith: ScopeIndex._with,
    ast.Import: ScopeIndex._nothing,
    ast.ImportFrom: ScopeIndex._nothing,
    ast.Return: ScopeIndex._return,
}
if hasattr(ast, "TryStar"):
    _VISITORS[ast.TryStar] = ScopeIndex._try


def _block(body: list[ast.stmt], state: _State) -> list:
    return [(stmt, state) for stmt in body]
