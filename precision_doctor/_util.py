"""Small helpers shared across layers."""

from __future__ import annotations

import enum
import re
from typing import Callable, Hashable, Iterable, TypeVar

T = TypeVar("T")


class StrEnum(str, enum.Enum):
    """An enum whose members are their string values: they compare, format and serialise as those strings."""

    __str__ = str.__str__
    __format__ = str.__format__


def unique(items: Iterable[T], key: Callable[[T], Hashable]) -> list[T]:
    """The items in order, keeping the first of each key."""
    seen: set = set()
    out: list[T] = []
    for item in items:
        k = key(item)
        if k not in seen:
            seen.add(k)
            out.append(item)
    return out


_PYTHON_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+$")


def python_lines(text: str, keepends: bool = False) -> list[str]:
    """`text.splitlines()` as Python numbers lines: split on \\n, \\r\\n and \\r only. str.splitlines also splits on
    form feeds, U+2028 and other characters Python's tokenizer keeps inside a line, which shifts line numbers."""
    if not keepends and "\r" not in text:  # the usual file: the same lines, split without a regular expression
        lines = text.split("\n")
        if lines[-1] == "":
            lines.pop()
        return lines
    lines = _PYTHON_LINE.findall(text)
    return lines if keepends else [line.rstrip("\r\n") for line in lines]


MAX_GPUS_PER_NODE = 1024  # more than any node has: a larger count is a typo, and would make the doctor build it
MAX_PORT = 65535


def whole_number(text: str, low: int, high: int) -> int | None:
    """`text` as a whole number from `low` to `high` when it is written in ASCII digits; otherwise None. Never
    raises: not on '²' (a digit to str.isdigit, not to int), not on 5,000 digits (int's own limit is 4,300)."""
    text = text.strip()
    if not text or len(text) > 18 or not (text.isascii() and text.isdigit()):
        return None
    number = int(text)
    return number if low <= number <= high else None


def record(cls: type[T]) -> type[T]:
    """`@dataclass(frozen=True)` with the same fields, defaults, immutability, equality, hash and repr, made
    faster. To define: `__eq__`, `__hash__` and `__repr__` are shared functions over the field names instead of
    methods compiled for each class (compiling generated methods is most of a dataclass's creation time, and the
    doctor defines some eighty of them in a fresh process for every check). To build: `__init__` fills the
    instance's dict directly instead of calling object.__setattr__ per field (twice as fast; the probe builds
    hundreds of thousands of Values, Locations and Origins over a large tree)."""
    import dataclasses

    direct = _plain_fields(cls)
    documented = bool(cls.__dict__.get("__doc__"))
    if direct and not documented:  # dataclass would read object.__init__'s signature for it (slowly, for nothing)
        cls.__doc__ = cls.__name__
    cls = dataclasses.dataclass(frozen=True, eq=False, repr=False, init=not direct)(cls)
    fields = dataclasses.fields(cls)
    if direct:
        cls.__init__ = _init_of(cls, fields)
        if not documented:  # dataclass names the class with its signature; it saw none without an __init__
            import inspect

            cls.__doc__ = cls.__name__ + str(inspect.signature(cls)).replace(" -> None", "")
    own = cls.__dict__
    if "__repr__" not in own:
        cls.__repr__ = _repr_of(tuple(f.name for f in fields if f.repr))
    if "__eq__" not in own:
        cls.__eq__ = _eq_of(_values_of(tuple(f.name for f in fields if f.compare)))
    explicit_hash = "__hash__" in own and not (own["__hash__"] is None and "__eq__" in own)
    if not explicit_hash:
        cls.__hash__ = _hash_of(_values_of(tuple(f.name for f in fields
                                                 if (f.compare if f.hash is None else f.hash))))
    return cls


def _plain_fields(cls: type) -> bool:
    """Fields that only have defaults or default factories, on a class with no __init__ or __post_init__ of its
    own and no dataclass base: the `__init__` record writes. Anything else keeps the one dataclass writes."""
    import dataclasses

    if "__init__" in cls.__dict__ or hasattr(cls, "__post_init__") or \
            any(dataclasses.is_dataclass(base) for base in cls.__mro__[1:]):
        return False
    for name, kind in cls.__dict__.get("__annotations__", {}).items():
        if not isinstance(kind, str) or any(w in kind for w in ("ClassVar", "InitVar", "KW_ONLY")) or \
                name.startswith("__record_"):
            return False
        value = cls.__dict__.get(name)
        if isinstance(value, dataclasses.Field) and (not value.init or value.kw_only is True):
            return False
    return True


def _init_of(cls: type, fields: tuple) -> Callable:
    import dataclasses

    scope: dict = {"__record_factory__": _FACTORY}
    params, lines = [], []
    for f in fields:
        if f.default is not dataclasses.MISSING:
            scope[f"__record_default_{f.name}__"] = f.default
            params.append(f"{f.name}=__record_default_{f.name}__")
            lines.append(f"    __record_dict__[{f.name!r}] = {f.name}")
        elif f.default_factory is not dataclasses.MISSING:
            scope[f"__record_make_{f.name}__"] = f.default_factory
            params.append(f"{f.name}=__record_factory__")
            lines.append(f"    __record_dict__[{f.name!r}] = __record_make_{f.name}__() "
                         f"if {f.name} is __record_factory__ else {f.name}")
        else:
            params.append(f.name)
            lines.append(f"    __record_dict__[{f.name!r}] = {f.name}")
    source = "\n".join([f"def __init__(__record_self__, {', '.join(params)}):",
                        "    __record_dict__ = __record_self__.__dict__", *lines, ""])
    exec(source, scope)  # noqa: S102 - the source is built above from the class's own field names
    init = scope["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__module__ = cls.__module__
    init.__annotations__ = {**{f.name: f.type for f in fields}, "return": None}
    return init


class _Factory:
    """The default of a field built by a factory: "not given" (shown as dataclass shows it)."""

    def __repr__(self) -> str:
        return "<factory>"


_FACTORY = _Factory()


def _values_of(names: tuple[str, ...]) -> Callable:
    """The fields' values as one tuple, as the methods dataclass generates compare and hash them."""
    if len(names) == 1:
        name = names[0]
        return lambda obj: (getattr(obj, name),)
    if not names:
        return lambda obj: ()
    import operator

    return operator.attrgetter(*names)


def _eq_of(values: Callable) -> Callable:
    def __eq__(self, other):
        if other.__class__ is self.__class__:
            return values(self) == values(other)
        return NotImplemented
    return __eq__


def _hash_of(values: Callable) -> Callable:
    def __hash__(self):
        return hash(values(self))
    return __hash__


def _repr_of(names: tuple[str, ...]) -> Callable:
    import reprlib

    @reprlib.recursive_repr()
    def __repr__(self):
        return f"{self.__class__.__qualname__}({', '.join(f'{n}={getattr(self, n)!r}' for n in names)})"
    return __repr__
