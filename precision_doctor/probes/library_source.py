"""What a library class or function accepts, read from its source with `ast` (the library is never imported): the
fields of a dataclass (TrainingArguments, TRL's configs, peft's LoraConfig), the parameters of an `__init__`
(Trainer, BitsAndBytesConfig) and, for a function that takes `**kwargs`, the keywords it takes out of them
(`kwargs.pop("device_map")` in from_pretrained).

Shared by the probe of the training environment (probes/signatures.py) and by tools/gen_signatures.py, which builds
the shipped table from released wheels: one reading of the source, whichever way it arrives.
"""

from __future__ import annotations

import ast
import re
from dataclasses import field
from typing import Any

from ..model.facts import GateRequirement
from ..model.python_source import literal, parse_quietly
from ..model.util import record
from .scopes import walk

# HfArgumentParser treats a field as a flag (`--bf16`, `--bf16 False`, `--no_bf16`) when its type is bool or
# Optional[bool] (`hf_argparser.py`: `field.type is bool or field.type == bool | None`).
BOOL_ANNOTATIONS = frozenset(
    {
        "bool",
        "Optional[bool]",
        "bool | None",
        "None | bool",
        "Union[bool, None]",
        "typing.Optional[bool]",
        "Union[None, bool]",
    }
)


@record
class FieldDecl:
    """One field or parameter: its kind (for the command line) and its default, where the source writes a literal."""

    kind: str = ""  # bool | int | float | str | dict | list | "" (anything else)
    default: Any = None
    has_default: bool = False  # False: no default, or one computed at run time


@record
class Declaration:
    """What one class (or function) declares itself, before inheritance."""

    name: str
    line: int  # where the class (or function) starts in its file
    fields: dict[str, FieldDecl] = field(default_factory=dict)  # own fields / parameters, in order
    bases: tuple[str, ...] = ()  # base classes as the module names them, import aliases undone
    dataclass: bool = False
    init: bool = False  # a plain class that defines its own __init__ (its parameters are `fields`)
    open: str = ""  # takes **kwargs: "forwards" (to the base or another call) | "ignores" (drops them) | ""
    aliases: dict[str, str] = field(default_factory=dict)  # deprecated keyword -> its new name (deprecate_kwarg)


def kind_of(annotation: str) -> str:
    """bool for what HfArgumentParser parses as a flag; else the first plain type the annotation names."""
    text = annotation.replace("'", "").replace('"', "").strip()
    if text in BOOL_ANNOTATIONS:
        return "bool"
    first = re.findall(r"\b(int|float|str|dict|Dict|list|List)\b", text)
    return first[0].lower() if first else ""


# --- finding a class in a module's text --------------------------------------------------------

# A newline before a line at column 0 that is not a comment or a closing bracket: with the newline first, the
# search skips from one newline to the next instead of trying every character of a 5,000-line module.
_TOP_LEVEL = re.compile(r"\n(?=[^\s#)\]}])")


def _line_starting(text: str, prefix: str, whole_word: bool = False) -> int:
    """Where the first line that begins with `prefix` starts (`whole_word`: not followed by a letter, digit or
    underscore); -1: none. A plain search for the text, not a regular expression tried at every character (a
    millisecond a search on a large module, and a single check makes dozens)."""
    found = 0 if text.startswith(prefix) else _next_line_starting(text, prefix, 0)
    while found >= 0:
        after = found + len(prefix)
        if not whole_word or after >= len(text) or not (text[after].isalnum() or text[after] == "_"):
            return found
        found = _next_line_starting(text, prefix, found)
    return -1


def _next_line_starting(text: str, prefix: str, after: int) -> int:
    at = text.find("\n" + prefix, after)
    return at + 1 if at >= 0 else -1


def _class_block(text: str, name: str) -> tuple[int, str] | None:
    """The source of the top-level `class name`, its decorators included, and its first line (1-based): sliced
    by indentation, so a 5,000-line module is not parsed whole for one class."""
    statement = f"class {name}"
    found = _line_starting(text, statement, whole_word=True)
    if found < 0:
        return None
    start = found
    while True:  # decorators just above
        prev_end = text.rfind("\n", 0, start - 1) if start else -1
        prev = text[prev_end + 1 : start - 1] if start else ""
        if start and prev.startswith("@"):
            start = prev_end + 1
            continue
        break
    end_match = _TOP_LEVEL.search(text, found + len(statement))
    end = end_match.start() + 1 if end_match else len(text)
    return text.count("\n", 0, start) + 1, text[start:end]


def _header(block: str) -> str:
    """The class statement alone (decorators, name, bases) with an empty body: enough for its bases."""
    lines = []
    for line in block.split("\n"):
        lines.append(line)
        if line.split("#", 1)[0].rstrip().endswith(":") and not line.startswith("@"):
            break
    return "\n".join(lines) + "\n    pass\n"


_METHOD_END = re.compile(r"\n {0,4}(?=[^\s#)\]}])")  # a newline before a line at the class's level or above


def _method_node(block: str, name: str) -> ast.FunctionDef | None:
    """One method of a class block, parsed alone (decorators included) as the body of an empty class, so that it
    needs no dedent; None when it cannot be cut out."""
    defs = [
        at
        for at in (_line_starting(block, f"    def {name}("), _line_starting(block, f"    async def {name}("))
        if at >= 0
    ]
    if not defs:
        return None
    start = first_def = min(defs)
    while start:  # the decorator lines just above, one line each
        prev = block.rfind("\n", 0, start - 1) + 1
        if not block.startswith("    @", prev):
            break
        start = prev
    body = block.find("\n", block.find(":\n", block.index("(", first_def) + 1))
    end_match = _METHOD_END.search(block, body) if body >= 0 else None
    try:
        tree = parse_quietly("class _:\n" + block[start : end_match.start() + 1 if end_match else len(block)])
    except SyntaxError:
        return None
    return next((n for n in tree.body[0].body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))), None)


def _parse(block: str, full: str, name: str) -> tuple[ast.ClassDef | None, ast.Module | None]:
    """The class node from its slice; the whole module when the slice does not parse on its own (a string at
    column 0 inside the class cuts it short)."""
    try:
        tree = parse_quietly(block)
    except SyntaxError:
        try:
            tree = parse_quietly(full)
        except SyntaxError:
            return None, None
    node = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name), None)
    return node, tree


def _aliases_of_imports(text: str) -> dict[str, str]:
    """`from x import A as _B` -> {"_B": "x:A"}, read from the import statements alone."""
    out = {}
    for m in re.finditer(r"^[ \t]*from[ \t]+([\w.]+)[ \t]+import[ \t]+(?:\(([^)]*)\)|([^(\n]+))", text, re.M):
        for part in (m.group(2) or m.group(3)).replace("\n", " ").split(","):
            words = part.split("#", 1)[0].split()
            if len(words) == 3 and words[1] == "as":
                out[words[2]] = f"{m.group(1)}:{words[0]}"
    return out


def read_class(text: str, name: str, method: str = "") -> Declaration | None:
    """What `class name` declares in this module's text: its dataclass fields, or its `__init__` parameters, or
    with `method` that method's parameters and the keywords it pops from **kwargs. None: not defined here.

    Only what is needed is parsed: the class statement, the one method, or the class body with its methods cut
    out (a dataclass's fields are class-level statements; TrainingArguments' methods are most of its 2,000 lines).
    """
    found = _class_block(text, name)
    if found is None:
        return None
    first_line, block = found
    node, _ = _parse(_header(block), text, name)
    if node is None:
        return None
    line = first_line if node.lineno < first_line else node.lineno  # the whole module was parsed: its own number
    aliases = _aliases_of_imports(text)
    bases = tuple(_base_name(b, aliases) for b in node.bases)
    if method:
        func = _method_node(block, method)
        if func is None:
            return Declaration(name, line, bases=bases)
        fields, open_, renamed = signature(func)
        return Declaration(
            name,
            line,
            fields={**fields, **{k: FieldDecl() for k in _popped(func)}},
            bases=bases,
            init=method == "__init__",
            open=open_,
            aliases=renamed,
        )
    is_dataclass = any(
        _dotted(d.func if isinstance(d, ast.Call) else d).endswith("dataclass") for d in node.decorator_list
    )
    init = _method_node(block, "__init__")
    if init is not None:
        fields, open_, renamed = signature(init)
        return Declaration(
            name, line, fields=fields, bases=bases, dataclass=is_dataclass, init=True, open=open_, aliases=renamed
        )
    if not is_dataclass:
        return Declaration(name, line, bases=bases)
    body, _ = _parse(_without_methods(block), text, name)
    return Declaration(
        name, line, fields=dataclass_fields(body) if body is not None else {}, bases=bases, dataclass=True
    )


_METHOD_START = re.compile(r"^    (?:@|def |async def )")
_CLASS_LEVEL = re.compile(r"^ {0,4}(?=[^\s#)\]}])")


def _without_methods(block: str) -> str:
    """A class block with its methods (and their decorators) cut out, line by line."""
    out, skipping = [], False
    for line in block.split("\n"):
        if _METHOD_START.match(line):
            skipping = True
            continue
        if skipping and _CLASS_LEVEL.match(line):
            skipping = False
        if not skipping:
            out.append(line)
    return "\n".join(out)


def read_classes(text: str, pattern: str) -> dict[str, Declaration]:
    """Every top-level class of a module whose name matches `pattern` (a regular expression)."""
    out = {}
    for m in re.finditer(rf"^class ({pattern})\b", text, re.M):
        found = read_class(text, m.group(1))
        if found is not None:
            out[found.name] = found
    return out


def read_function_keywords(text: str, name: str, owners: tuple[str, ...]) -> set[str]:
    """The keywords a method of one of these classes names as parameters or takes out of its **kwargs (each
    method is cut out of its class and parsed alone)."""
    out: set[str] = set()
    for owner in owners:
        found = _class_block(text, owner)
        func = _method_node(found[1], name) if found else None
        if func is not None:
            fields, _, renamed = signature(func)
            out |= set(fields) | set(renamed) | _popped(func)
    return out


# --- the pieces ------------------------------------------------------------------------------


def _dotted(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    return ""


def _base_name(node: ast.AST, aliases: dict[str, str]) -> str:
    """A base class by the name it was imported under: `_KTOConfig` -> `trl.experimental.kto:KTOConfig`; a name
    defined or imported plainly stays as written (its last part)."""
    written = _dotted(node.value if isinstance(node, ast.Subscript) else node)
    last = written.rsplit(".", 1)[-1]
    return aliases.get(last, last)


def _method(node: ast.ClassDef, name: str) -> ast.FunctionDef | None:
    for stmt in node.body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) and stmt.name == name:
            return stmt
    return None


def _literal(node: ast.AST | None, names: dict[str, Any]) -> tuple[bool, Any]:
    if node is None:
        return False, None
    if isinstance(node, ast.Name) and node.id in names:
        return True, names[node.id]
    try:
        return True, literal(node)
    except (ValueError, TypeError, SyntaxError, RecursionError):
        return False, None


def _class_constants(node: ast.ClassDef) -> dict[str, Any]:
    """Names the class body binds to a literal before its fields use them (`default_optim = "adamw_torch"`): the
    first binding, the one that holds without the optional imports a later `if` tests."""
    out: dict[str, Any] = {}
    for stmt in node.body:
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
            ok, value = _literal(stmt.value, {})
            if ok and stmt.targets[0].id not in out:
                out[stmt.targets[0].id] = value
    return out


def _annotation_kind(node: ast.AST | None) -> str:
    """kind_of() read from the annotation's nodes: `bool`, `Optional[bool]`, `bool | None` are flags; else the first
    plain type named."""
    if node is None:
        return ""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):  # a string annotation
        return kind_of(node.value)
    names = [n for n in _names_in_order(node) if n not in ("Optional", "Union", "typing")]
    if set(names) <= {"bool", "None"} and "bool" in names:
        return "bool"
    return next((n.lower() for n in names if n in ("int", "float", "str", "dict", "Dict", "list", "List")), "")


def _names_in_order(node: ast.AST) -> list[str]:
    """The type names an annotation mentions, as they are written left to right."""
    if isinstance(node, ast.Name):
        return [node.id]
    if isinstance(node, ast.Attribute):
        return [node.attr]
    if isinstance(node, ast.Constant):
        return ["None"] if node.value is None else []
    return [n for child in ast.iter_child_nodes(node) for n in _names_in_order(child)]


def dataclass_fields(node: ast.ClassDef) -> dict[str, FieldDecl]:
    constants = _class_constants(node)
    out: dict[str, FieldDecl] = {}
    body = list(node.body)
    while body:
        stmt = body.pop(0)
        if isinstance(stmt, ast.If):  # fields declared under `if is_torch_available():`
            body[:0] = stmt.body + stmt.orelse
            continue
        if not isinstance(stmt, ast.AnnAssign) or not isinstance(stmt.target, ast.Name):
            continue
        annotation = stmt.annotation
        if _dotted(annotation.value if isinstance(annotation, ast.Subscript) else annotation).endswith("ClassVar"):
            continue
        value = stmt.value
        has, default = _literal(value, constants)
        if isinstance(value, ast.Call) and _dotted(value.func).endswith("field"):
            keywords = {k.arg: k.value for k in value.keywords if k.arg}
            init = keywords.get("init")
            if isinstance(init, ast.Constant) and init.value is False:
                continue  # not an __init__ argument
            if "default" in keywords:
                has, default = _literal(keywords["default"], constants)
            elif "default_factory" in keywords:
                factory = _dotted(keywords["default_factory"])
                has, default = (True, [] if factory == "list" else {}) if factory in ("list", "dict") else (False, None)
            else:
                has, default = False, None
        out[stmt.target.id] = FieldDecl(_annotation_kind(annotation), default if has else None, has)
    return out


def signature(func: ast.FunctionDef) -> tuple[dict[str, FieldDecl], str, dict[str, str]]:
    """A function's keyword parameters (self and *args left out), whether it takes **kwargs and what it does with
    them, and the old names its `deprecate_kwarg` decorators still accept."""
    args = func.args
    positional = args.posonlyargs + args.args
    defaults = [None] * (len(positional) - len(args.defaults)) + list(args.defaults)
    fields: dict[str, FieldDecl] = {}
    pairs = list(zip(positional, defaults, strict=False))
    pairs += zip(args.kwonlyargs, args.kw_defaults, strict=False)
    for arg, default in pairs:
        if arg.arg in ("self", "cls"):
            continue
        has, value = _literal(default, {})
        fields[arg.arg] = FieldDecl(_annotation_kind(arg.annotation), value if has else None, has)
    for arg in args.posonlyargs:  # positional-only: not a keyword
        fields.pop(arg.arg, None)
    open_ = ""
    if args.kwarg is not None:
        open_ = "forwards" if _forwards(func, args.kwarg.arg) else "ignores"
    renamed = {}
    for dec in func.decorator_list:
        if (
            isinstance(dec, ast.Call)
            and _dotted(dec.func).endswith("deprecate_kwarg")
            and dec.args
            and isinstance(dec.args[0], ast.Constant)
        ):
            new = next(
                (k.value.value for k in dec.keywords if k.arg == "new_name" and isinstance(k.value, ast.Constant)), None
            )
            if isinstance(new, str):
                renamed[str(dec.args[0].value)] = new
    return fields, open_, renamed


def _forwards(func: ast.FunctionDef, kwargs_name: str) -> bool:
    """Does the body pass its **kwargs on to another call (`super().__init__(**kwargs)`)?"""
    for node in walk(func):
        if isinstance(node, ast.Call):
            for kw in node.keywords:
                if kw.arg is None and isinstance(kw.value, ast.Name) and kw.value.id == kwargs_name:
                    return True
    return False


def _popped(func: ast.FunctionDef) -> set[str]:
    """Keywords a function takes out of its **kwargs: `kwargs.pop("x")`, `kwargs.get("x")`, `"x" in kwargs`, and
    the names of a literal list it pops in a loop (`for name in [...]: kwargs.pop(name)`, or a comprehension).
    One walk of the function."""
    kwarg = func.args.kwarg.arg if func.args.kwarg is not None else "kwargs"
    lists: dict[str, list] = {}
    loops: list[tuple[str, ast.AST]] = []  # (loop variable, what it iterates)
    popped_vars: set[str] = set()
    out: set[str] = set()
    for node in walk(func):
        kind = type(node)
        if kind is ast.Call:
            f = node.func
            if (
                isinstance(f, ast.Attribute)
                and f.attr in ("pop", "get")
                and isinstance(f.value, ast.Name)
                and f.value.id == kwarg
                and node.args
            ):
                first = node.args[0]
                if isinstance(first, ast.Constant) and isinstance(first.value, str):
                    out.add(first.value)
                elif isinstance(first, ast.Name):
                    popped_vars.add(first.id)
        elif kind is ast.Compare:
            if (
                len(node.ops) == 1
                and isinstance(node.ops[0], ast.In)
                and isinstance(node.left, ast.Constant)
                and isinstance(node.left.value, str)
                and isinstance(node.comparators[0], ast.Name)
                and node.comparators[0].id == kwarg
            ):
                out.add(node.left.value)
        elif kind is ast.Assign:
            if (
                len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name)
                and isinstance(node.value, (ast.List, ast.Tuple))
            ):
                ok, value = _literal(node.value, {})
                if ok:
                    lists[node.targets[0].id] = list(value)
        elif kind in (ast.For, ast.comprehension) and isinstance(node.target, ast.Name):
            loops.append((node.target.id, node.iter))
    for var, iterated in loops:
        if var not in popped_vars:
            continue
        names = (
            lists.get(iterated.id, [])
            if isinstance(iterated, ast.Name)
            else _literal(iterated, {})[1]
            if isinstance(iterated, (ast.List, ast.Tuple))
            else []
        )
        out.update(n for n in names or () if isinstance(n, str))
    return out


# --- from_pretrained ---------------------------------------------------------------------------

# The keywords from_pretrained takes: the model's loader, the Auto classes', the config's hub keywords. What is left
# becomes an attribute of the model's config when the config has one of that name, else goes to the model's
# __init__, which refuses it (`LlamaForCausalLM.__init__() got an unexpected keyword argument 'load_in_4bit'`).
CONFIG_FILE = "transformers/configuration_utils.py"
CONFIG_CLASSES = ("PreTrainedConfig", "PretrainedConfig")  # renamed in 5.0; a dataclass from 5.4
AUTO_CLASSES = ("_BaseAutoModelClass", "_BaseAutoBackboneClass")
LOADER_FUNCTIONS = (
    ("transformers/modeling_utils.py", ("PreTrainedModel",), "from_pretrained"),
    ("transformers/models/auto/auto_factory.py", AUTO_CLASSES, "from_pretrained"),
    (CONFIG_FILE, CONFIG_CLASSES, "from_pretrained"),
    (CONFIG_FILE, CONFIG_CLASSES, "get_config_dict"),
    (CONFIG_FILE, CONFIG_CLASSES, "_get_config_dict"),
    (CONFIG_FILE, CONFIG_CLASSES, "from_dict"),
)


def read_loader(read) -> tuple[Declaration, Declaration | None]:
    """from_pretrained's own keywords, and the attributes every model config has (its __init__ parameters or
    dataclass fields, its class attributes and its properties: `num_labels`). `read(path)` gives a file of the
    package, or None; each file is read once."""
    texts: dict[str, str | None] = {}

    def text_of(path: str) -> str | None:
        if path not in texts:
            texts[path] = read(path)
        return texts[path]

    loader: set[str] = set()
    for path, owners, func in LOADER_FUNCTIONS:
        text = text_of(path)
        if text:
            loader |= read_function_keywords(text, func, owners)
    base = Declaration(
        "from_pretrained",
        0,
        fields={k: FieldDecl() for k in sorted(loader)},
        bases=("transformers:PreTrainedConfig",),
        open="forwards",
    )
    text = text_of(CONFIG_FILE) or ""
    for cls in CONFIG_CLASSES:
        found = _class_block(text, cls)
        body = _parse(_without_methods(found[1]), text, cls)[0] if found else None
        if body is None:
            continue
        init = _method_node(found[1], "__init__")
        if init is not None:
            params, _, _ = signature(init)
            fields = {**params, **{k: FieldDecl() for k in _popped(init)}}
        else:
            fields = dataclass_fields(body)
        fields.update({k: FieldDecl() for k in sorted(_attributes(body, found[1])) if k not in fields})
        return base, Declaration(cls, found[0], fields=fields, dataclass=True)
    return base, None


_PROPERTY = re.compile(r"^    @(?:\w*property\n(?:    @.*\n)*    def (\w+)|(\w+)\.setter\b)", re.M)


def _attributes(body: ast.ClassDef, block: str) -> set[str]:
    """Names a class body binds (`model_type: str = ""`) and its properties: `hasattr(config, name)` is true."""
    out = {a or b for a, b in _PROPERTY.findall(block)}
    for stmt in body.body:
        targets = (
            stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target] if isinstance(stmt, ast.AnnAssign) else []
        )
        out.update(t.id for t in targets if isinstance(t, ast.Name))
    return out


# Bases a module names through a variable it assigns: LLaMA-Factory's hparams/training_args.py sets
# `BaseTrainingArguments` to mcore_adapter's Seq2SeqTrainingArguments under USE_MCA, else to transformers' (the
# table reads the second; an MCA run is not judged by it).
BASE_ALIASES = {"llamafactory.BaseTrainingArguments": "transformers.Seq2SeqTrainingArguments"}


def resolve_base(base: str, owner: str, known: set[str] | dict) -> str | None:
    """A base as a module names it (Declaration.bases) -> the id of a class the table reads, or None (a mixin the
    table does not read). `owner` is the id of the class it is a base of: `trl.SFTConfig`."""
    top = owner.split(".", 1)[0]
    aliased = BASE_ALIASES.get(f"{top}.{base}")
    if aliased is not None:
        return aliased if aliased in known else None
    if ":" in base:  # imported under another name: `from ..experimental.kto import KTOConfig as _KTOConfig`
        module, name = base.split(":", 1)
        module = module.lstrip(".")
        if "experimental" in module:
            candidate = f"{top}.experimental.{name}"
        elif module.split(".", 1)[0] in ("transformers", "trl", "peft", "sentence_transformers", "llamafactory"):
            candidate = f"{module.split('.', 1)[0]}.{name}"
        else:
            candidate = f"{top}.{name}"
        return candidate if candidate in known else None
    for candidate in (f"{top}.{base}", f"{top}.experimental.{base}", f"transformers.{base}"):
        if candidate in known and candidate != owner:
            return candidate
    return None


# --- a framework's own start-up version check ------------------------------------------------------------------

_GATE_CALLS = ("require_version", "check_version")


def read_version_gate(text: str, function: str = "check_dependencies") -> tuple[list[GateRequirement], tuple[str, ...]]:
    """The requirements a start-up check such as LLaMA-Factory's `check_dependencies()` (extras/misc.py) hands to
    `require_version` / `check_version`, and the DISABLE_VERSION_CHECK values that skip them. 0.7-0.9.1 write
    `if os.environ.get("DISABLE_VERSION_CHECK", "0").lower() in ["true", "1"]: <log> else: require_version(...)`;
    from 0.9.2 each `check_version(req, mandatory=False)` asks `is_env_enabled`, whose list is read. A check under
    another condition (0.9.2's warning on transformers 4.46-4.48) is no refusal. Empty when the function is not
    there."""
    tree = parse_quietly(text)
    functions = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)} if tree is not None else {}
    gate = functions.get(function)
    if gate is None:
        return [], ()
    found: list[GateRequirement] = []
    disable: tuple[str, ...] = ()
    todo = list(gate.body)
    while todo:
        stmt = todo.pop(0)
        if isinstance(stmt, ast.If):
            if "DISABLE_VERSION_CHECK" in ast.unparse(stmt.test):
                disable = disable or _listed_values(stmt.test)
                todo[:0] = stmt.orelse  # (its body logs that checking is off)
            continue
        call = stmt.value if isinstance(stmt, ast.Expr) else None
        if not isinstance(call, ast.Call) or _dotted(call.func).rsplit(".", 1)[-1] not in _GATE_CALLS:
            continue
        first = call.args[0] if call.args else None
        if not (isinstance(first, ast.Constant) and isinstance(first.value, str)):
            continue
        # check_version(requirement, mandatory=False); require_version's second argument is its hint
        mandatory = next((k.value for k in call.keywords if k.arg == "mandatory"), None)
        if mandatory is None and len(call.args) > 1 and _dotted(call.func).endswith("check_version"):
            mandatory = call.args[1]
        found.append(
            GateRequirement(first.value, call.lineno, isinstance(mandatory, ast.Constant) and mandatory.value is True)
        )
    if not disable and "is_env_enabled" in functions:
        disable = _listed_values(functions["is_env_enabled"])
    return found, disable


def _listed_values(node: ast.AST) -> tuple[str, ...]:
    """The strings a `... .lower() in ["true", "1"]` test compares with."""
    for n in ast.walk(node):
        if isinstance(n, ast.Compare) and isinstance(n.ops[0], ast.In):
            options = n.comparators[0]
            if isinstance(options, (ast.List, ast.Tuple, ast.Set)):
                return tuple(e.value for e in options.elts if isinstance(e, ast.Constant) and isinstance(e.value, str))
    return ()
