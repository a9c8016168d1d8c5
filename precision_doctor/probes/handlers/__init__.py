"""What the resolver knows about libraries, one module per library.

A handler module declares what it reads, and one function:

    CALLS = {"os.getenv"}              # calls, by qualified callee
    CALL_NAMES = {"is_bf16_available"} # calls, by the callee's last name (helpers re-exported by many modules)
    METHODS = {"parse_args"}           # method calls on any object: `parser.parse_args()`
    VALUES = {"os.environ", "torch.*"} # names read or subscripted (`os.environ["X"]`, `torch.float16`); a call
                                       # subscripted is keyed with "()": "torch.cuda.get_device_capability()"
    COMPARES = (GpuQuery,)             # comparisons whose left side evaluates to one of these symbols

    def resolve(resolver, node, scope, ctx, depth) -> Sym | None

`resolve` gets the Call, Attribute, Subscript or Compare node and returns its symbol, or None when it is not
the handler's after all (`x.float()` on something that is no tensor); the resolver then reads the node as
plain Python. Each key belongs to one handler. Every module of this package not starting with "_" is a
handler: adding a library is adding a module.
"""

from __future__ import annotations

import ast
import importlib
import pkgutil
from collections.abc import Callable

Resolve = Callable  # (resolver, node, scope, ctx, depth) -> Sym | None


class Registry:
    def __init__(self):
        self.calls: dict[str, Resolve] = {}
        self.call_names: dict[str, Resolve] = {}
        self.methods: dict[str, Resolve] = {}
        self.values: dict[str, Resolve] = {}
        self.compares: dict[type, Resolve] = {}

    def add(self, module) -> None:
        resolve = module.resolve
        for table, keys in (
            (self.calls, getattr(module, "CALLS", ())),
            (self.call_names, getattr(module, "CALL_NAMES", ())),
            (self.methods, getattr(module, "METHODS", ())),
            (self.values, getattr(module, "VALUES", ())),
            (self.compares, getattr(module, "COMPARES", ())),
        ):
            for key in keys:
                if key in table:
                    raise RuntimeError(f"{module.__name__} and {table[key].__module__} both handle {key!r}")
                table[key] = resolve

    def for_call(self, callee: str, node: ast.Call) -> list[Resolve]:
        """The handlers that may read this call, the most specific first."""
        found = [
            self.calls.get(callee),
            self.call_names.get(callee.rsplit(".", 1)[-1]) if callee else None,
            self.methods.get(node.func.attr) if isinstance(node.func, ast.Attribute) else None,
        ]
        return [h for h in found if h is not None]

    def for_value(self, qualified: str) -> Resolve | None:
        if not qualified:
            return None
        found = self.values.get(qualified)
        if found is None and "." in qualified:
            found = self.values.get(qualified.rsplit(".", 1)[0] + ".*")
        return found


def discover() -> Registry:
    registry = Registry()
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda i: i.name):
        if not info.name.startswith("_"):
            registry.add(importlib.import_module(f"{__name__}.{info.name}"))
    return registry


REGISTRY = discover()
