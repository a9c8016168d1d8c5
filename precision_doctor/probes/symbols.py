"""The resolver's symbols: what an expression evaluates to before it becomes a `facts.Value`.

Each is an immutable, slotted class: they are made by the thousand per script. `Sym` is their union.
Known values carry where they came from; the rest say why they are not (yet) a value.
"""

from __future__ import annotations

import ast
from typing import Any

from ..model.facts import Location, Origin, Predicate

_set = object.__setattr__


class _Symbol:
    """Slotted and immutable: fields are set once in `__init__`; compared and shown field by field.

    Plain classes rather than dataclasses: the doctor starts in a fresh process for every check, and a
    frozen slotted dataclass costs over a millisecond to define."""

    __slots__ = ()

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"{type(self).__name__} is immutable")

    __delattr__ = __setattr__

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other) and all(getattr(self, n) == getattr(other, n) for n in self.__slots__)

    __hash__ = None  # dict and AST fields: symbols are compared, never hashed

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(f'{n}={getattr(self, n)!r}' for n in self.__slots__)})"


class Known(_Symbol):
    """A constant the script really writes (or a default, or a command-line argument)."""

    __slots__ = ("value", "origins", "location")
    value: Any
    origins: tuple[Origin, ...]
    location: Location | None

    def __init__(self, value: object, origins: tuple[Origin, ...] = (), location: Location | None = None):
        _set(self, "value", value)
        _set(self, "origins", origins)
        _set(self, "location", location)


class Cond(_Symbol):
    """A value decided by the GPU the job runs on: `if_true` when `predicate` holds."""

    __slots__ = ("predicate", "if_true", "if_false")

    def __init__(self, predicate: Predicate, if_true: Sym, if_false: Sym):
        _set(self, "predicate", predicate)
        _set(self, "if_true", if_true)
        _set(self, "if_false", if_false)


class Dyn(_Symbol):
    """Computed at run time in a way static reading cannot follow, and why."""

    __slots__ = ("reason",)

    def __init__(self, reason: str):
        _set(self, "reason", reason)


class Multi(_Symbol):
    """One of several values, chosen at run time by something other than the hardware (a run-time branch, the
    call site of a function). Reads as dynamic (`reason`); the alternatives are kept for whoever can use them."""

    __slots__ = ("options", "reason")

    def __init__(self, options: tuple[Sym, ...], reason: str):
        _set(self, "options", options)
        _set(self, "reason", reason)


class DictSym(_Symbol):
    """A dict whose string keys are known; values are symbols."""

    __slots__ = ("items", "location")
    items: dict[str, Any]
    location: Location | None

    def __init__(self, items: dict[str, Sym], location: Location | None = None):
        _set(self, "items", items)
        _set(self, "location", location)


class Seq(_Symbol):
    """A list or tuple whose items are not all constants (or results such as `parse_known_args()`'s pair).

    `reason` says why it is no value; empty when it is a container of objects (parsed argument objects)."""

    __slots__ = ("items", "reason")

    def __init__(self, items: tuple[Sym, ...], reason: str = ""):
        _set(self, "items", items)
        _set(self, "reason", reason)


class Namespace(_Symbol):
    """Parsed command-line options (argparse) or a dataclass instance (HfArgumentParser)."""

    __slots__ = ("fields", "what", "class_name", "location")

    def __init__(self, fields: dict[str, Sym], what: str, class_name: str = "", location: Location | None = None):
        _set(self, "fields", fields)
        _set(self, "what", what)
        _set(self, "class_name", class_name)
        _set(self, "location", location)


class ObjSym(_Symbol):
    """The result of a call: attribute access reads the call's keyword arguments."""

    __slots__ = ("call", "scope", "callee")
    call: ast.Call
    scope: Any  # scopes.Scope
    callee: str

    def __init__(self, call: ast.Call, scope: object, callee: str):
        _set(self, "call", call)
        _set(self, "scope", scope)  # scopes.Scope
        _set(self, "callee", callee)


class GpuQuery(_Symbol):
    """A number only the GPU knows: `torch.cuda.get_device_capability()` ("capability"), its `[0]`
    ("capability_major"), `torch.cuda.device_count()` ("device_count"). Comparing one with a literal
    gives a hardware predicate."""

    __slots__ = ("what", "call", "callee")

    def __init__(self, what: str, call: ast.AST, callee: str):
        _set(self, "what", what)
        _set(self, "call", call)
        _set(self, "callee", callee)


class Context:
    """One evaluation: the script's arguments, the cycle guard, and how many more times a value may split in
    two at a branch: on a GPU check (`Cond`) or on a run-time test (`Multi`). Each split evaluates both
    sides, so nested splits would grow exponentially without a budget; past it a GPU split is given up as
    dynamic and a run-time one keeps only its reason (which is all a `Multi` shows)."""

    __slots__ = ("script_args", "visiting", "splits_left", "alternatives_left", "limits_hit")

    def __init__(self, script_args: tuple[str, ...] = ()):
        self.script_args = script_args
        self.visiting: set = set()
        self.splits_left = 256
        self.alternatives_left = 32
        self.limits_hit = 0  # a result found after a limit cut it short depends on where it was asked


Sym = Known | Cond | Dyn | Multi | DictSym | Seq | Namespace | ObjSym | GpuQuery
UNRESOLVED = (Dyn, Multi)


def reason_of(sym: Sym, default: str = "") -> str:
    """Why a symbol is not a value, where it says so."""
    return sym.reason if isinstance(sym, (Dyn, Multi, Seq)) and sym.reason else default


def is_plain_predicate(c: Cond) -> bool:
    return (
        isinstance(c.if_true, Known)
        and c.if_true.value is True
        and isinstance(c.if_false, Known)
        and c.if_false.value is False
    )


def predicate_sym(pred: Predicate) -> Cond:
    """A hardware question as a boolean: True where it holds, False elsewhere."""
    return Cond(pred, Known(True), Known(False))
