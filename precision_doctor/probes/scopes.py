"""Scopes and assignments of one module, with the branch each assignment sits in.

The resolver asks: at this line of this function, what was `name` last set to, and under which
`if`? Branch chains let it turn `if torch.cuda.is_bf16_supported(): dtype = ...` into a
hardware-dependent value instead of a guess.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

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


@dataclass
class Scope:
    name: str  # qualified: "<module>", "main", "Trainer.load"
    node: ast.AST
    parent: Scope | None
    params: dict[str, tuple[int, ast.AST | None]] = field(default_factory=dict)
    assigns: dict[str, list[Assignment]] = field(default_factory=dict)
    returns: list[ast.AST] = field(default_factory=list)
    class_name: str = ""

    def add(self, a: Assignment) -> None:
        self.assigns.setdefault(a.name, []).append(a)


def dotted(node: ast.AST) -> str:
    """`self.model` -> "self.model"; anything that is not a plain name chain -> ""."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return ""


class ScopeIndex(ast.NodeVisitor):
    """Builds every scope of a module in one pass and remembers each node's scope and branch chain."""

    def __init__(self, tree: ast.Module):
        self.module = Scope("<module>", tree, None)
        self.scopes: list[Scope] = [self.module]
        self.functions: dict[str, list[Scope]] = {}  # bare name -> scopes (several classes may define it)
        self.classes: dict[str, ast.ClassDef] = {}
        self.scope_of: dict[int, Scope] = {}
        self.chain_of: dict[int, tuple] = {}
        self.loop_depth_of: dict[int, int] = {}
        self.if_tests: dict[int, ast.AST] = {}
        self._scope = self.module
        self._chain: tuple = ()
        self._class = ""
        self._loops = 0
        self.visit(tree)

    # -- scopes
    def _function(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        qual = f"{self._class}.{node.name}" if self._class else node.name
        scope = Scope(qual, node, self._scope, class_name=self._class)
        args = node.args
        positional = list(args.posonlyargs) + list(args.args)
        defaults = [None] * (len(positional) - len(args.defaults)) + list(args.defaults)
        for i, (a, d) in enumerate(zip(positional, defaults)):
            scope.params[a.arg] = (i, d)
        for a, d in zip(args.kwonlyargs, args.kw_defaults):
            scope.params[a.arg] = (-1, d)
        self.scopes.append(scope)
        self.functions.setdefault(node.name, []).append(scope)
        for d in node.decorator_list:
            self.visit(d)
        saved = (self._scope, self._chain, self._class, self._loops)
        self._scope, self._chain, self._class, self._loops = scope, (), "", 0
        for stmt in node.body:
            self.visit(stmt)
        self._scope, self._chain, self._class, self._loops = saved

    visit_FunctionDef = _function
    visit_AsyncFunctionDef = _function

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self.classes[node.name] = node
        saved = self._class
        self._class = node.name
        for stmt in node.body:
            self.visit(stmt)
        self._class = saved

    def visit_Lambda(self, node: ast.Lambda) -> None:
        self.generic_visit(node)

    # -- branches
    def visit_If(self, node: ast.If) -> None:
        self.if_tests[id(node)] = node.test
        self._mark(node.test)
        self.visit(node.test)
        self._block(node.body, ("if", id(node), True))
        self._block(node.orelse, ("if", id(node), False))

    def _loop(self, node: ast.For | ast.While | ast.AsyncFor) -> None:
        header = node.iter if isinstance(node, (ast.For, ast.AsyncFor)) else node.test
        self._mark(header)
        self.visit(header)
        step = ("loop", id(node), True)
        if isinstance(node, (ast.For, ast.AsyncFor)):
            for name_node in ast.walk(node.target):
                if isinstance(name_node, ast.Name):
                    self._scope.add(Assignment(name_node.id, node.lineno, None, self._chain + (step,)))
        self._loops += 1
        self._block(node.body, step)
        self._loops -= 1
        self._block(node.orelse, step)

    visit_For = visit_While = visit_AsyncFor = _loop

    def visit_Try(self, node: ast.Try) -> None:
        step = ("try", id(node), True)
        self._block(node.body, step)
        for h in node.handlers:
            self._block(h.body, ("except", id(h), True))
        self._block(node.orelse, step)
        self._block(node.finalbody, ())

    visit_TryStar = visit_Try

    def _block(self, body: list[ast.stmt], step: Branch) -> None:
        saved = self._chain
        if step:
            self._chain = self._chain + (step,)
        for stmt in body:
            self.visit(stmt)
        self._chain = saved

    # -- assignments
    def visit_Assign(self, node: ast.Assign) -> None:
        self.visit(node.value)
        for target in node.targets:
            self._target(target, node.value, node)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        if node.value is not None:
            self.visit(node.value)
            self._target(node.target, node.value, node)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        self.visit(node.value)
        name = dotted(node.target)
        if name:
            self._scope.add(Assignment(name, node.lineno, None, self._chain, node=node))

    def visit_NamedExpr(self, node: ast.NamedExpr) -> None:
        self.visit(node.value)
        self._scope.add(Assignment(node.target.id, node.lineno, node.value, self._chain, node=node))

    def visit_With(self, node: ast.With) -> None:
        for item in node.items:
            self._mark(item.context_expr)
            self.visit(item.context_expr)
            if item.optional_vars is not None:
                self._target(item.optional_vars, item.context_expr, node)
        for stmt in node.body:
            self.visit(stmt)

    visit_AsyncWith = visit_With

    def visit_Import(self, node: ast.Import) -> None:
        pass  # imports are read by the import table, not as assignments

    visit_ImportFrom = visit_Import

    def visit_Return(self, node: ast.Return) -> None:
        if node.value is not None:
            self._scope.returns.append(node.value)
            self.visit(node.value)

    def _target(self, target: ast.AST, value: ast.AST, stmt: ast.AST) -> None:
        if isinstance(target, (ast.Tuple, ast.List)):
            direct = value if isinstance(value, (ast.Tuple, ast.List)) else None
            for i, elt in enumerate(target.elts):
                name = dotted(elt)
                if not name:
                    continue
                if direct is not None and i < len(direct.elts):
                    self._scope.add(Assignment(name, stmt.lineno, direct.elts[i], self._chain, node=stmt))
                else:
                    self._scope.add(Assignment(name, stmt.lineno, value, self._chain, index=i, node=stmt))
            return
        name = dotted(target)
        if name:
            self._scope.add(Assignment(name, stmt.lineno, value, self._chain, node=stmt))
        elif isinstance(target, ast.Subscript):
            base = dotted(target.value)
            key = target.slice
            if base and isinstance(key, ast.Constant) and isinstance(key.value, str):
                self._scope.add(Assignment(f"{base}[{key.value!r}]", stmt.lineno, value, self._chain, node=stmt))

    # -- every expression remembers its scope and branch chain
    def generic_visit(self, node: ast.AST) -> None:
        self._mark(node)
        super().generic_visit(node)

    def _mark(self, node: ast.AST) -> None:
        self.scope_of[id(node)] = self._scope
        self.chain_of[id(node)] = self._chain
        self.loop_depth_of[id(node)] = self._loops
