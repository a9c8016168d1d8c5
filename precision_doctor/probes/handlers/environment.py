"""The process the script runs in: environment variables and `sys.argv` (the command line the doctor was given
for the script).

A variable's value comes from the environment the job will see as far as the doctor knows it (a snapshot's
recorded environment, or this machine's when checking this machine), else from the default the script writes
(`os.environ.get("PRECISION", "fp16")`: the value then says "with PRECISION unset", and findings resting on it
are "likely"), else it stays unknown. Variables whose names say they hold secrets are never read.
"""

from __future__ import annotations

import ast

from ...model.facts import Origin
from ...model.redact import redact_text, secret_name
from ..symbols import Dyn, Known

CALLS = {"os.environ.get", "os.getenv"}
VALUES = {"os.environ", "sys.argv"}


def resolve(r, node, scope, ctx, depth):
    if isinstance(node, ast.Call):
        name = r.sym(node.args[0], scope, ctx, depth) if node.args else None
        if not isinstance(name, Known) or not isinstance(name.value, str):
            return Dyn(f"environment variable {r.text(node.args[0]) if node.args else '?'}")
        default = (
            node.args[1]
            if len(node.args) > 1
            else next((k.value for k in node.keywords if k.arg in ("default", "value")), None)
        )
        return _variable(r, node, name.value, default, scope, ctx, depth)
    if isinstance(node, ast.Subscript):
        key = node.slice
        if r.qualified(node.value) == "os.environ" and isinstance(key, ast.Constant) and isinstance(key.value, str):
            return _variable(r, node, key.value, None, scope, ctx, depth)
        return None
    if isinstance(node, ast.Attribute) and r.qualified(node) == "sys.argv":
        return Known(
            [r.path] + list(ctx.script_args), (Origin("script-arg", "the script's command line"),), r.loc(node)
        )
    return None


def _variable(r, node, name: str, default, scope, ctx, depth):
    if secret_name(name):
        return Dyn(f"environment variable {name} (a secret: never read)")
    env, source = r.environ
    if env is not None and name in env:
        value = redact_text(str(env[name]))[:200]
        return Known(value, (Origin("env", f"{name}={value} in {source}", r.loc(node)),), r.loc(node))
    if default is None:
        where = f"not set in {source}" if env is not None else "unknown until the job runs"
        return Dyn(f"environment variable {name} ({where}, and no default)")
    fallback = r.sym(default, scope, ctx, depth)
    if not isinstance(fallback, Known):
        return fallback
    why = f"not set in {source}" if env is not None else "the job's environment is not known here"
    return Known(
        fallback.value,
        (Origin("env-default", f"with {name} unset: the default {fallback.value!r}; {why}", r.loc(default)),),
        r.loc(default),
    )
