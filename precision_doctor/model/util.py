"""Small helpers shared across layers."""

from __future__ import annotations

import enum
import json
import re
from collections.abc import Callable, Hashable, Iterable
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from typing_extensions import dataclass_transform
else:  # typing has it from Python 3.11; at run time it only marks the decorator for type checkers

    def dataclass_transform(**_: Any) -> Callable[[T], T]:
        return lambda decorated: decorated


T = TypeVar("T")

CONFIG_SUFFIXES = (".yaml", ".yml", ".json")


def is_config_path(path: object) -> bool:
    """A recipe or config file (YAML, JSON): checked as its tool runs it; `fix` lists its changes as steps and
    never writes it."""
    return str(path).lower().endswith(CONFIG_SUFFIXES)


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


@dataclass_transform(frozen_default=True)
def record(cls: type[T]) -> type[T]:
    """`@dataclass(frozen=True)` with the same fields, defaults, immutability, equality, hash, repr and dataclass
    parameters, made faster. To define: only `__init__` is compiled for the class; `__eq__`, `__hash__`, `__repr__`
    and the frozen guards are shared functions over its field names (compiling generated methods is most of a
    dataclass's creation time, and the doctor defines some eighty of them in a fresh process for every check).
    To build: `__init__` calls object.__setattr__ without looking it up for every field (a fifth faster; the probe
    builds hundreds of thousands of Values, Locations and Origins over a large tree)."""
    import dataclasses

    direct = _plain_fields(cls)
    documented = bool(cls.__dict__.get("__doc__"))
    if direct and not documented:  # dataclass would read object.__init__'s signature for it (slowly, for nothing)
        cls.__doc__ = cls.__name__
    cls = dataclasses.dataclass(frozen=not direct, eq=False, repr=False, init=not direct)(cls)
    fields = dataclasses.fields(cls)
    if direct:
        cls.__init__ = _first_init(cls, fields)
        _uncompiled.append((cls, fields))
        names = frozenset(f.name for f in fields)
        cls.__setattr__, cls.__delattr__ = _frozen_guards(cls, names)
        params = cls.__dataclass_params__  # what @dataclass(frozen=True) records, which the class now is
        params.init = params.repr = params.eq = params.frozen = True
        if not documented:  # dataclass names the class with its signature; it saw none without an __init__
            cls.__doc__ = cls.__name__ + str(
                cls.__init__.__signature__.replace(parameters=list(cls.__init__.__signature__.parameters.values())[1:])
            ).replace(" -> None", "")
    own = cls.__dict__
    if "__repr__" not in own:
        cls.__repr__ = _repr_of(tuple(f.name for f in fields if f.repr))
    if "__eq__" not in own:
        cls.__eq__ = _eq_of(_values_of(tuple(f.name for f in fields if f.compare)))
    explicit_hash = "__hash__" in own and not (own["__hash__"] is None and "__eq__" in own)
    if not explicit_hash:
        cls.__hash__ = _hash_of(_values_of(tuple(f.name for f in fields if (f.compare if f.hash is None else f.hash))))
    return cls


_uncompiled: list[tuple[type, tuple]] = []  # record classes whose __init__ is compiled when first used


def compile_record_inits() -> None:
    """Compile every record class's `__init__` now (a resident process does, once, for all the processes it forks)."""
    while _uncompiled:
        cls, fields = _uncompiled.pop()
        if hasattr(cls.__dict__["__init__"], "__record_first__"):
            cls.__init__ = _init_of(cls, fields)  # type: ignore[misc]


def _plain_fields(cls: type) -> bool:
    """Fields that only have defaults or default factories, on a class with no __init__ or __post_init__ of its
    own and no dataclass base: the `__init__` record writes. Anything else keeps the one dataclass writes."""
    import dataclasses

    if (
        any(name in cls.__dict__ for name in ("__init__", "__setattr__", "__delattr__"))
        or hasattr(cls, "__post_init__")
        or any(dataclasses.is_dataclass(base) for base in cls.__mro__[1:])
    ):
        return False
    for name, kind in cls.__dict__.get("__annotations__", {}).items():
        if (
            not isinstance(kind, str)
            or any(w in kind for w in ("ClassVar", "InitVar", "KW_ONLY"))
            or name.startswith("__record_")
        ):
            return False
        value = cls.__dict__.get(name)
        if isinstance(value, dataclasses.Field) and (not value.init or value.kw_only is True):
            return False
    return True


def _first_init(cls: type, fields: tuple) -> Callable:
    """An `__init__` that compiles the real one (`_init_of`) when the first instance is made, and hands over to it:
    most record classes are never instantiated in a given check, and compiling is most of what defining costs."""
    import dataclasses
    import inspect

    def __init__(self, *args, **kwargs):
        init = cls.__dict__["__init__"]
        if hasattr(init, "__record_first__"):  # (not `init is __init__`: a function naming itself is a cycle)
            init = cls.__init__ = _init_of(cls, fields)
        init(self, *args, **kwargs)

    __init__.__record_first__ = True
    empty = inspect.Parameter.empty
    __init__.__signature__ = inspect.Signature(  # what the compiled one will have (help(), inspect)
        [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
        + [
            inspect.Parameter(
                f.name,
                inspect.Parameter.POSITIONAL_OR_KEYWORD,
                annotation=f.type,
                default=f.default
                if f.default is not dataclasses.MISSING
                else _FACTORY
                if f.default_factory is not dataclasses.MISSING
                else empty,
            )
            for f in fields
        ],
        return_annotation=None,
    )
    __init__.__qualname__ = f"{cls.__qualname__}.__init__"
    __init__.__module__ = cls.__module__
    return __init__


def _init_of(cls: type, fields: tuple) -> Callable:
    """The class's __init__: each field set with object.__setattr__ held in a global (a frozen dataclass's looks it
    up on `object` for every field), which keeps the values in the instance's compact layout."""
    import dataclasses

    scope: dict = {"__record_factory__": _FACTORY, "__record_set__": object.__setattr__}
    params, lines = [], []
    for f in fields:
        if f.default is not dataclasses.MISSING:
            scope[f"__record_default_{f.name}__"] = f.default
            params.append(f"{f.name}=__record_default_{f.name}__")
            value = f.name
        elif f.default_factory is not dataclasses.MISSING:
            scope[f"__record_make_{f.name}__"] = f.default_factory
            params.append(f"{f.name}=__record_factory__")
            value = f"__record_make_{f.name}__() if {f.name} is __record_factory__ else {f.name}"
        else:
            params.append(f.name)
            value = f.name
        lines.append(f"    __record_set__(__record_self__, {f.name!r}, {value})")
    source = "\n".join([f"def __init__(__record_self__, {', '.join(params)}):", *lines, ""])
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


def _frozen_guards(cls: type, names: frozenset[str]) -> tuple[Callable, Callable]:
    """__setattr__ and __delattr__ of a frozen dataclass: a field is never assigned or deleted (nor anything on an
    instance of the class itself)."""
    from dataclasses import FrozenInstanceError

    def __setattr__(self, name, value):
        if type(self) is cls or name in names:
            raise FrozenInstanceError(f"cannot assign to field {name!r}")
        super(cls, self).__setattr__(name, value)

    def __delattr__(self, name):
        if type(self) is cls or name in names:
            raise FrozenInstanceError(f"cannot delete field {name!r}")
        super(cls, self).__delattr__(name)

    __setattr__.__qualname__ = f"{cls.__qualname__}.__setattr__"
    __delattr__.__qualname__ = f"{cls.__qualname__}.__delattr__"
    return __setattr__, __delattr__


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


SHOWN_VALUE = 60  # characters of a value an evidence line shows


def shown_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    text = json.dumps(value) if isinstance(value, (dict, list)) else str(value)
    return text if len(text) <= SHOWN_VALUE else text[: SHOWN_VALUE - 3] + "..."
