"""The process the script runs in: environment variables (unknown until the job runs) and `sys.argv` (the
command line the doctor was given for the script)."""

from __future__ import annotations

import ast

from ...facts import Origin
from ..symbols import Dyn, Known

CALLS = {"os.environ.get", "os.getenv"}
VALUES = {"os.environ", "sys.argv"}


def resolve(r, node, scope, ctx, depth):
    if isinstance(node, ast.Call):
        name = node.args[0].value if node.args and isinstance(node.args[0], ast.Constant) else "?"
        return Dyn(f"environment variable {name}")
    if isinstance(node, ast.Subscript):
        key = node.slice
        if r.qualified(node.value) == "os.environ" and isinstance(key, ast.Constant) and isinstance(key.value, str):
            return Dyn(f"environment variable {key.value}")
        return None
    if isinstance(node, ast.Attribute) and r.qualified(node) == "sys.argv":
        return Known([r.path] + list(ctx.script_args), (Origin("script-arg", "the script's command line"),),
                     r.loc(node))
    return None
