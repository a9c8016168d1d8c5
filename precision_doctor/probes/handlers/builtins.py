"""Python builtins a script uses to compute an option: casts, len, dict(...), string methods."""

from __future__ import annotations

from ..symbols import DictSym, Dyn, Known

CASTS = {"bool": bool, "str": str, "int": int, "float": float}
STR_METHODS = {"endswith", "startswith", "lower", "upper", "strip", "replace"}

CALLS = {"dict", "len", *CASTS}
METHODS = STR_METHODS


def resolve(r, node, scope, ctx, depth):
    callee = r.qualified(node.func)
    if callee == "dict":
        items = {}
        for kw in node.keywords:
            if kw.arg is None:
                inner = r.sym(kw.value, scope, ctx, depth)
                if not isinstance(inner, DictSym):
                    return Dyn(f"**{r.text(kw.value)} cannot be followed")
                items.update(inner.items)
            else:
                items[kw.arg] = r.sym(kw.value, scope, ctx, depth)
        return DictSym(items, r.loc(node))
    if callee in CASTS:
        if len(node.args) != 1:
            return None
        inner = r.sym(node.args[0], scope, ctx, depth)
        if isinstance(inner, Known):
            try:
                return Known(CASTS[callee](inner.value), inner.origins, inner.location)
            except Exception:
                return Dyn(f"{r.text(node)} fails or varies at run time")
        return inner
    if callee == "len":
        if len(node.args) != 1:
            return None
        inner = r.sym(node.args[0], scope, ctx, depth)
        if isinstance(inner, Known) and isinstance(inner.value, (list, tuple, str, dict)):
            return Known(len(inner.value), inner.origins, inner.location)
        return Dyn(f"{r.text(node)} is computed at run time")
    # a string method: only on a known string, with known arguments
    owner = r.sym(node.func.value, scope, ctx, depth)
    args = [r.sym(a, scope, ctx, depth) for a in node.args]
    if isinstance(owner, Known) and isinstance(owner.value, str) and all(isinstance(a, Known) for a in args):
        try:
            return Known(getattr(owner.value, node.func.attr)(*[a.value for a in args]), owner.origins, owner.location)
        except Exception:
            return Dyn(f"{r.text(node)} fails at run time")
    return None
