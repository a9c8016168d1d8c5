"""Reading Python source without running it: ast.parse with Python's own warnings about the source silenced, and
literals evaluated without ast.literal_eval's closures."""

from __future__ import annotations

import ast
import warnings
from contextlib import contextmanager


def literal(node: ast.AST):
    """`ast.literal_eval(node)`, a constant without its nested helper functions (each call makes a cycle of
    closures that only the cyclic collector frees, and the probe evaluates thousands). Raises as it does."""
    kind = type(node)
    if kind is ast.Constant:
        return node.value
    if kind is ast.Tuple:
        return tuple(literal(e) for e in node.elts)
    if kind is ast.List:
        return [literal(e) for e in node.elts]
    if kind is ast.Dict and None not in node.keys:
        return {literal(k): literal(v) for k, v in zip(node.keys, node.values, strict=False)}
    if (
        kind is ast.UnaryOp
        and type(node.op) in (ast.USub, ast.UAdd)
        and type(node.operand) is ast.Constant
        and type(node.operand.value) in (int, float, complex)
    ):
        return -node.operand.value if type(node.op) is ast.USub else +node.operand.value
    if kind is ast.Call and not (
        type(node.func) is ast.Name and node.func.id == "set" and not node.args and not node.keywords
    ):
        raise ValueError(f"malformed node or string: {node!r}")  # only set() is a literal call
    if kind in (ast.Set, ast.Call, ast.BinOp, ast.UnaryOp):  # set(), {1, 2}, 1+2j, -x: as it reads them
        return ast.literal_eval(node)
    raise ValueError(f"malformed node or string: {node!r}")  # (a name, an attribute, a **spread, ...)


@contextmanager
def no_source_warnings():
    """Python's warnings about source it parses (an invalid escape such as "\\d") silenced: the doctor reads the
    code, it does not run it. Printed, they would reach its stderr once per worker process that reads the file;
    under `-W error` they would make a file Python runs a syntax error. (A context, not a wrapper: a script's own
    parse takes no frame more than ast.parse, which would lower the nesting it accepts.)"""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def parse_quietly(text: str | bytes, filename: str = "<unknown>", mode: str = "exec") -> ast.AST:
    """ast.parse under no_source_warnings()."""
    with no_source_warnings():
        return ast.parse(text, filename=filename, mode=mode)
