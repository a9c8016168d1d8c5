"""The script probe: reads a training script's AST (never runs it) into ScriptFacts.

Every call that matters to precision, placement or the training loop becomes a `Call` with its
arguments resolved to `Value`s. `Call.refs` links an argument to the recorded call it evaluates
to (Trainer(model=model) -> the from_pretrained call), which is how checks follow the model.
"""

from __future__ import annotations

import ast
import gc
import io
import operator
import os
import re
import tokenize
from bisect import bisect_left, bisect_right
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

from ..model.call_kinds import CallKind, CallSite, is_trainer_class, is_training_arguments, kind_of
from ..model.errors import InputError
from ..model.facts import (
    CONDITIONAL,
    KNOWN,
    WATCHED_ATTRIBUTES,
    AttributeSet,
    Branch,
    Call,
    Location,
    Origin,
    ScriptFacts,
    Suppression,
    Unknown,
    Value,
    model_source,
)
from ..model.python_source import no_source_warnings
from ..model.redact import MODEL_CONFIG_KEYS, keep_read_keys
from ..model.util import unique
from ..system import reads
from ..system.notebooks import cell_line, is_notebook
from ..system.sources import (
    Unreadable,
    is_regular_file,
    parse_json,
    read_source,
    read_text_bounded,
    status,
    worth_reading,
)
from .checkpoint import probe_checkpoints
from .cli_functions import is_lightning_cli, lightning_cli_settings
from .config_files import read_deepspeed_config
from .frameworks import read_frameworks
from .keywords import local_classes, parsed_arguments
from .resolve import Imports, Resolver, plain_text
from .scopes import TOGETHER, Scope, ScopeIndex, dotted, names_in, walk_by_type
from .symbols import Context, DictSym, Known, Namespace, ObjSym

MAX_LOCAL_MODULES = 20
TOO_DEEP = "nested too deeply for the doctor to follow (RecursionError); simplify the deepest expression"


# --- what a call is ---------------------------------------------------------------------------

# The kinds the table gave, by the classes a script subclasses (usually none) and then by call site: a pure
# function of what it is asked, shared by every script of a run (each calls print, len, os.path.join...).
_KINDS: dict[tuple, dict[tuple, CallKind | None]] = {}


def classify(
    callee: str, node: ast.Call, local_trainers: set[str], local_args: set[str], memo: dict | None = None
) -> CallKind | None:
    """The kind of a call, looked up in the declared table (call_kinds.RECOGNISERS); None: not recorded.
    `callee` is the call's qualified dotted name ("" when what it calls is not a dotted name). `memo` keeps the
    answers of one script: the table is a pure function of what it is asked, and a script calls the same few
    names (print, len, range) thousands of times."""
    func = node.func
    if type(func) is ast.Attribute:
        method = func.attr
        # a dotted callee: its owner is the name before the method, as imported (`M` of `from transformers import
        # AutoModelForCausalLM as M` is the class)
        head = callee[: callee.rfind(".")] if callee else ""
        owner = head[head.rfind(".") + 1 :]
    else:
        method = owner = ""
    keywords = frozenset([k.arg for k in node.keywords if k.arg]) if node.keywords else _NO_KEYWORDS
    bare = not node.args and not node.keywords
    key = (callee, method, owner, bare, keywords)
    if memo is not None and key in memo:
        return memo[key]
    site = CallSite(
        callee=callee,
        method=method,
        owner=owner,
        bare=bare,
        keywords=keywords,
        local_trainers=frozenset(local_trainers),
        local_args=frozenset(local_args),
    )
    kind = kind_of(site)
    if memo is not None:
        memo[key] = kind
    return kind


_NO_KEYWORDS: frozenset[str] = frozenset()
_LOADER_METHODS = ("from_pretrained", "from_config")
_BARE_CALL = ast.Call(func=ast.Attribute(value=ast.Name(id="cls"), attr="from_pretrained"), args=[], keywords=[])
_POSITION = operator.attrgetter("lineno", "col_offset")
_FIRST = operator.itemgetter(0)


# --- reading the file -------------------------------------------------------------------------


def parse(path: Path, text: str) -> ast.Module:
    try:
        with no_source_warnings():
            return ast.parse(text, filename=str(path))
    except SyntaxError as exc:
        cell = cell_line(text, exc.lineno or 0) if is_notebook(path) else None
        line = f"cell {cell[0]}:{cell[1]}" if cell else str(exc.lineno or 0)
        where = f"{path}:{line}:{exc.offset or 0}"
        raise InputError(f"{where}: syntax error: {exc.msg}; the doctor reads scripts Python can parse") from None
    except (RecursionError, MemoryError) as exc:  # CPython's parser gives up on ~3,000 levels of nesting
        raise InputError(
            f"{path}: nested too deeply for Python to parse ({type(exc).__name__}); pass the training script itself"
        ) from None
    except ValueError as exc:
        raise InputError(
            f"{path}: cannot be parsed as Python ({type(exc).__name__}); pass the training script itself"
        ) from None


# --- the collector ----------------------------------------------------------------------------


class _Collector:
    def __init__(
        self, path: str, text: str, tree: ast.Module, script_args: tuple[str, ...], environ: tuple = (None, "")
    ):
        self.path = path
        self.tree = tree
        self.nodes, self.of_type = walk_by_type(tree)  # one walk; every pass below reads these
        self.index = ScopeIndex(tree, walruses=ast.NamedExpr in self.of_type)
        self.import_nodes = self.of(ast.Import, ast.ImportFrom)
        self.imports = Imports(self.import_nodes)
        self.r = Resolver(
            path,
            text,
            tree,
            self.index,
            self.imports,
            script_args,
            self.nodes,
            environ,
            self.of(ast.Call),
            self.of_type,
        )
        self.lines = self.r.lines  # one split of the source
        self.calls: list[Call] = []
        self.unknowns: list[Unknown] = []
        self.by_node: dict[int, int] = {}  # id(ast node) -> index in self.calls
        self.by_written: dict[int, int] = {}  # a local function's call as written (recorded bound by name) -> index
        self._parsed_args: dict[str, Call] = {}
        self._assigned_names: set[str] | None = None
        self._names_used: tuple[set[str], set[str]] | None = None  # bare names and attribute names the code uses
        self._branch_of: dict[tuple, Branch] = {}  # if-step -> its Branch
        self.targets = self._assignment_targets()
        self.local_trainers, self.local_args = self._local_subclasses()

    def of(self, *types: type, ordered: bool = True) -> list[ast.AST]:
        """The nodes of these types, in walk order (`ordered=False`: one type after the other)."""
        if types in TOGETHER:
            return self.of_type[types[0]]
        if any(t in group for t in types for group in TOGETHER):
            return [n for n in self.nodes if type(n) in types]
        present = [t for t in types if t in self.of_type]
        if len(present) <= 1:
            return self.of_type.get(present[0], []) if present else []
        if not ordered:
            return [n for t in present for n in self.of_type[t]]
        return [n for n in self.nodes if type(n) in types]  # several kinds: keep their order among each other

    def _local_subclasses(self) -> tuple[set[str], set[str]]:
        """The script's Trainer and TrainingArguments subclasses, a subclass of its own such class included."""
        trainers, args = set(), set()
        bases = {name: [self.r.qualified(b) for b in cls.bases] for name, cls in self.index.classes.items()}
        grew = True
        while grew:
            before = len(trainers) + len(args)
            for name, qualified in bases.items():
                if any(is_trainer_class(q) or q in trainers for q in qualified):
                    trainers.add(name)
                if any(is_training_arguments(q) or q in args for q in qualified):
                    args.add(name)
            grew = len(trainers) + len(args) > before
        return trainers, args

    def _assignment_targets(self) -> dict[int, str]:
        out: dict[int, str] = {}
        call, sequence = ast.Call, (ast.Tuple, ast.List)
        assigns = self.of(ast.Assign)
        for node in self.of(ast.Assign, ast.AnnAssign, ast.With, ast.AsyncWith, ordered=False):
            kind = type(node)
            if kind is ast.Assign:
                if type(node.value) is call:
                    names = [dotted(t) for t in node.targets if dotted(t)]
                    if names:
                        out[id(node.value)] = names[0]
            elif kind is ast.AnnAssign:
                if type(node.value) is call and dotted(node.target):
                    out[id(node.value)] = dotted(node.target)
            else:
                for item in node.items:
                    if isinstance(item.context_expr, ast.Call) and item.optional_vars is not None:
                        out[id(item.context_expr)] = dotted(item.optional_vars)
        for node in assigns:  # `model, opt = accelerator.prepare(model, opt)`
            if type(node.value) is call and isinstance(node.targets[0], sequence):
                out[id(node.value)] = ",".join(dotted(e) for e in node.targets[0].elts)
        return out

    def collect(self) -> None:
        nodes = sorted(self.of(ast.Call), key=_POSITION)
        kinds = _KINDS.setdefault((frozenset(self.local_trainers), frozenset(self.local_args)), {})
        for node in nodes:
            callee = self.r.qualified(node.func)
            if callee.startswith("self.") and (own := self._own_method(node)) is not None:
                # `self.step(batch)`: the class's own method, not torch's; named as defined ("Loop.step")
                self._add(node, CallKind.LOCAL_CALL, own.name, bind=own)
                continue
            kind = classify(callee, node, self.local_trainers, self.local_args, kinds)
            if (
                kind is None
                and type(node.func) is ast.Attribute
                and node.func.attr in _LOADER_METHODS
                and type(node.func.value) is ast.Name
            ):  # `cls = AutoModelForCausalLM ...; cls.from_pretrained()`
                held = self._class_held(node.func.value)
                if held:
                    kind = classify(f"{held}.{node.func.attr}", node, self.local_trainers, self.local_args, kinds)
                    callee = f"{held}.{node.func.attr}" if kind is not None else callee
            if kind is None:
                if callee in self.index.functions:
                    self._add(node, CallKind.LOCAL_CALL, callee, bind=self.index.functions[callee][0])
                elif self._flow(node, callee):
                    self._add(node, CallKind.FLOW, callee)
                elif isinstance(node.func, (ast.Name, ast.Attribute)) and self._is_variable(dotted(node.func)):
                    self._add(node, CallKind.CALL_VAR, dotted(node.func))
                continue
            if kind == CallKind.CAST and not self._cast_worth_recording(node):
                continue
            if not callee and isinstance(node.func, ast.Attribute):
                callee = f"<expr>.{node.func.attr}"  # a method of a call result: model = load().half()
            self._add(node, kind, callee or self.r.text(node.func))
        self._lightning_cli_trainers()
        self._loop_bindings()
        self._link_refs()
        self._apply_attribute_overrides()

    def _lightning_cli_trainers(self) -> None:
        """`LightningCLI(...)` builds a Trainer from its settings: recorded as that Trainer call, each setting
        pointing at the config line or launch-line word that gives it."""
        ctx = Context(self.r.script_args)
        for node in self.of(ast.Call):
            if not is_lightning_cli(self.r, node):
                continue
            settings = lightning_cli_settings(self.r, node, ctx)
            where = self.r.loc(node)
            for reason in settings.unknowns:
                self.unknowns.append(Unknown("LightningCLI's Trainer settings", reason, where))
            if not settings.from_launch:
                self.unknowns.append(
                    Unknown(
                        "LightningCLI's Trainer settings",
                        "they come from the launch line (`fit --config FILE`, `--trainer.precision ...`) and none is "
                        "given: trainer_defaults and Lightning's defaults assumed; pass the launch with --launcher",
                        where,
                    )
                )
            kwargs = {k: _cli_value(self.r, f"trainer.{k}", v, where) for k, v in settings.sections["trainer"].items()}
            qualified = self.r.qualified(node.func)
            package = "pytorch_lightning" if qualified.startswith("pytorch_lightning") else "lightning.pytorch"
            call = Call(
                kind=CallKind.ACCELERATOR,
                callee=f"{package}.Trainer",
                location=where,
                scope=self.index.scope_at(node).name,
                kwargs=kwargs,
                text="(the Trainer LightningCLI builds)",
            )
            self.calls.append(call)

    def _own_method(self, node: ast.Call) -> Scope | None:
        """`self.evaluate()` in a method of a class that defines `evaluate`, or inherits it from a class of the
        file: that method's scope."""
        func = node.func
        if type(func) is not ast.Attribute or type(func.value) is not ast.Name or func.value.id != "self":
            return None
        defined = {s.class_name: s for s in self.index.functions.get(func.attr, ()) if s.class_name}
        todo, seen = [self.index.scope_at(node).class_name], set()
        while todo:  # the class, then its bases in the order Python looks them up (as far as the file defines them)
            name = todo.pop(0)
            if not name or name in seen:
                continue
            if name in defined:
                return defined[name]
            seen.add(name)
            cls = self.index.classes.get(name)
            todo += [b.id for b in cls.bases if type(b) is ast.Name] if cls is not None else []
        return None

    def _class_held(self, name: ast.Name) -> str:
        """The library class a variable holds, qualified, where every assignment of it names one class (or picks
        between classes: `AutoModelForSeq2SeqLM if t5 else AutoModelForCausalLM`) and all of them load alike; ""
        otherwise."""
        scope: Scope | None = self.index.scope_at(name)
        while scope is not None and name.id not in scope.assigns:
            if name.id in scope.params:  # a parameter: what it holds is the caller's
                return ""
            scope = scope.parent
        if scope is None:
            return ""
        held: list[str] = []
        todo = [a.value for a in scope.assigns[name.id]]
        while todo:
            value = todo.pop()
            if type(value) is ast.IfExp:
                todo += [value.body, value.orelse]
            elif type(value) in (ast.Name, ast.Attribute) and (q := self.r.qualified(value)) and "." in q:
                held.append(q)
            else:
                return ""
        kinds = {classify(f"{q}.from_pretrained", _BARE_CALL, (), ()) for q in held}
        return held[-1] if len(kinds) == 1 and None not in kinds else ""

    def _flow(self, node: ast.Call, callee: str) -> bool:
        """`model = load_model(...)`: a local function whose result is assigned."""
        if id(node) not in self.targets:
            return False
        if callee in self.index.functions:
            return True
        return callee in self.imports.names.values() and callee.split(".")[0] not in (
            "torch",
            "transformers",
            "peft",
            "accelerate",
            "trl",
            "os",
            "sys",
            "json",
            "argparse",
        )

    def _loop_bindings(self) -> None:
        """`for x, y in loader:` binds x and y to each batch; names the body reassigns are left out."""
        loops = self.of(ast.For, ast.AsyncFor)
        if not loops:
            return
        assigned = self._assigned_by_position()
        starts = [a[0] for a in assigned]
        for node in loops:
            bound = names_in(node.target)
            first, last = node.body[0], node.body[-1]
            lo = bisect_left(starts, (first.lineno, first.col_offset))
            hi = bisect_right(starts, (last.end_lineno, last.end_col_offset))
            reassigned = {name for _, names in assigned[lo:hi] for name in names}
            kept = [b for b in bound if b not in reassigned]
            if kept:
                scope = self.index.scope_at(node.iter)
                self.calls.append(
                    Call(
                        kind=CallKind.LOOP_VAR,
                        callee=self.r.text(node.iter)[:80],
                        location=self.r.loc(node),
                        scope=scope.name,
                        target=",".join(kept),
                        receiver="dataloader" if self._is_dataloader(node.iter, scope) else "",
                        text=self.lines[node.lineno - 1].strip()[:160],
                    )
                )

    def _assigned_by_position(self) -> list[tuple[tuple[int, int], tuple[str, ...]]]:
        """Each assignment statement's start and the plain names it assigns, in source order: a loop's body
        reassigns exactly those that start within it (statements never overlap), found by bisection instead of a
        walk of every body (nested loops walked theirs again and again)."""
        out = []
        for stmt in self.of(ast.Assign, ast.AugAssign, ast.AnnAssign, ordered=False):
            targets = stmt.targets if type(stmt) is ast.Assign else [stmt.target]
            names = tuple(name for t in targets for name in names_in(t))
            if names:
                out.append(((stmt.lineno, stmt.col_offset), names))
        out.sort(key=_FIRST)
        return out

    def _is_dataloader(self, expr: ast.AST, scope) -> bool:
        """The loop iterates a torch DataLoader (batches are built on the CPU), directly or via enumerate/tqdm."""
        if isinstance(expr, ast.Call) and dotted(expr.func).rsplit(".", 1)[-1] in ("enumerate", "tqdm") and expr.args:
            return self._is_dataloader(expr.args[0], scope)
        sym = expr if isinstance(expr, ast.Call) else None
        if sym is None:
            resolved = self.r.sym(expr, scope, Context(self.r.script_args))
            if not isinstance(resolved, ObjSym):
                return False
            sym = resolved.call
        return self.r.qualified(sym.func).rsplit(".", 1)[-1] == "DataLoader"

    def _is_variable(self, name: str) -> bool:
        """A call of something the script assigned (a model called on inputs), not a function or class."""
        if not name or name in self.index.functions or name in self.index.classes or name in self.imports.names:
            return False
        if self._assigned_names is None:
            self._assigned_names = {n for s in self.index.scopes for n in s.assigns}
        return name in self._assigned_names

    def _cast_worth_recording(self, node: ast.Call) -> bool:
        method = node.func.attr
        if method in ("half", "bfloat16", "float", "double", "cuda", "cpu"):
            return not node.args or method == "cuda"
        return True

    def _add(self, node: ast.Call, kind: CallKind, callee: str, bind=None) -> Call:
        scope = self.index.scope_at(node)
        if bind is not None:  # a call of a local function: arguments by parameter name
            original = node
            names = sorted(bind.params, key=lambda n: bind.params[n][0])
            positional = [n for n in names if bind.params[n][0] >= 0]
            if bind.class_name:
                positional = positional[1:]
            node = ast.Call(
                func=node.func,
                args=[],
                keywords=[
                    ast.keyword(arg=positional[i], value=a)
                    for i, a in enumerate(node.args)
                    if i < len(positional) and not isinstance(a, ast.Starred)
                ]
                + list(node.keywords),
                lineno=node.lineno,
                col_offset=node.col_offset,
            )
            self.index.place(node, like=original)
        args = tuple(
            self.r.value(a, scope)
            if not isinstance(a, ast.Starred)
            else Value(state="dynamic", text=self.r.text(a), reason="*args cannot be followed")
            for a in node.args
        )
        kwargs: dict[str, Value] = {}
        for kw in node.keywords:
            if kw.arg is not None:
                kwargs[kw.arg] = self.r.value(kw.value, scope)
                continue
            sym = self.r.sym(kw.value, scope, Context(self.r.script_args))
            if kind == CallKind.CALL_VAR:  # model(**batch): keep the name the batch travels under
                kwargs["**"] = Value(state="dynamic", text=f"**{self.r.text(kw.value)}", reason="unpacked")
                continue
            if isinstance(sym, DictSym):
                for k, v in sym.items.items():
                    value = self.r.to_value(v, kw.value)
                    kwargs[k] = replace(value, text=f"{self.r.text(kw.value)}[{k!r}]")
            else:
                self.unknowns.append(
                    Unknown(
                        f"**{self.r.text(kw.value)} in {callee}()",
                        getattr(sym, "reason", "cannot be followed"),
                        self.r.loc(node),
                    )
                )
        receiver = dotted(node.func.value) if isinstance(node.func, ast.Attribute) else ""
        if isinstance(node.func, ast.Attribute) and not receiver:
            receiver = self._shallow_copy_of(node.func.value)
        line_text = self.lines[node.lineno - 1].strip() if node.lineno <= len(self.lines) else ""
        where = self.index.state(node)
        chain = where.chain if where is not None else ()
        call = Call(
            kind=kind,
            callee=callee,
            location=self.r.loc(node),
            scope=scope.name,
            target=self.targets.get(id(node), ""),
            receiver=receiver,
            args=args,
            kwargs=kwargs,
            text=line_text[:160],
            in_loop=where is not None and where.loops > 0,
            in_branch=any(step[0] in ("if", "try", "except") for step in chain),
            in_try=any(step[0] in ("try", "except") for step in chain),
            branches=self._branches(chain) if chain else (),
            loops=tuple(
                self.index.loop_lines[step[1]]
                for step in chain
                if step[0] == "loop" and step[1] in self.index.loop_lines
            )
            if chain
            else (),
        )
        self.by_node[id(node)] = len(self.calls)
        if bind is not None:
            self.by_written[id(original)] = len(self.calls)
        self.calls.append(call)
        for name, value in list(kwargs.items()) + [(str(i), v) for i, v in enumerate(args)]:
            if value.state == CONDITIONAL:
                self.unknowns.append(
                    Unknown(
                        f"{name}= of {callee.rsplit('.', 1)[-1]}()",
                        f"depends on the GPU ({value.predicate.text}); pass --target to decide",
                        value.location or call.location,
                        hardware=True,
                    )
                )
            if (
                value.state == "dynamic"
                and kind in _DYNAMIC_WORTH_REPORTING
                and not value.reason.endswith("an object, not a value")
                and name not in _UNINTERESTING_ARGS
            ):
                self.unknowns.append(
                    Unknown(f"{name}= of {callee.rsplit('.', 1)[-1]}()", value.reason, value.location or call.location)
                )
        return call

    def _shallow_copy_of(self, expr: ast.AST) -> str:
        """`copy.copy(model).half()`: a shallow copy of a module shares its parameters (the same `_parameters`
        dict), so a cast of the copy casts the original: the call's receiver is the original."""
        if (
            isinstance(expr, ast.Call)
            and self.r.qualified(expr.func) == "copy.copy"
            and len(expr.args) == 1
            and not expr.keywords
        ):
            return dotted(expr.args[0])
        return ""

    def _branches(self, chain: tuple) -> tuple[Branch, ...]:
        """The `if` branches of a call's branch chain, from its scope's root (the __main__ guard always runs)."""
        out = []
        for step in chain:
            if step[0] != "if":
                continue
            branch = self._branch_of.get(step)
            if branch is None:
                branch = self._branch_of[step] = self._branch(step)
            if branch is not _MAIN_GUARD:
                out.append(branch)
        return tuple(out)

    def _branch(self, step: tuple) -> Branch | None:
        """One if-step as a Branch (made once: the calls under one if share it); _MAIN_GUARD for the __main__ guard
        and for a step without a test, which a call's branches leave out."""
        test = self.index.if_tests.get(step[1])
        if test is None:
            return _MAIN_GUARD
        text = plain_text(test) or ast.unparse(test)
        if text.replace("'", '"') == '__name__ == "__main__"':
            return _MAIN_GUARD
        taken = bool(step[2])
        value = self._decided(test)
        return Branch(
            test.lineno,
            taken,
            text if len(text) <= 60 else text[:57] + "...",
            decided=None if value is None else value == taken,
        )

    def _decided(self, test: ast.expr) -> bool | None:
        """The condition's truth when the code alone fixes it: every value it reads is a literal written in the
        code (a constant, a parameter every call site passes the same literal). Parser defaults, the launch line,
        the environment and the GPU leave it to the run."""
        sym = self.r.sym(test, self.index.scope_at(test), Context(self.r.script_args))
        if not isinstance(sym, Known) or not all(o.kind == "code" for o in sym.origins):
            return None
        try:
            return bool(sym.value)
        except Exception:  # an object whose truth the doctor cannot take
            return None

    def _link_refs(self) -> None:
        """Point each argument that evaluates to a recorded call at that call."""
        ctx = Context(self.r.script_args)
        nodes = {id(n): n for n in self.of(ast.Call)}
        self._synthesize_parsed_training_args(nodes, ctx)
        for node_id, index in self.by_node.items():
            node = nodes.get(node_id)
            if node is None:  # a local-function call, recorded with its arguments bound by name
                continue
            scope = self.index.scope_at(nodes[node_id])
            refs: dict[str, str] = dict(self.calls[index].refs)
            pairs = [(str(i), a) for i, a in enumerate(node.args)] + [(k.arg, k.value) for k in node.keywords if k.arg]
            if isinstance(node.func, ast.Attribute):
                pairs.append(("self", node.func.value))
            for name, expr in pairs:
                if name in refs:
                    continue
                target = self._call_of(expr, scope, ctx)
                if target is not None:
                    refs[name] = target.key
            if refs:
                self.calls[index] = replace(self.calls[index], refs=refs)

    def _recorded(self, node: ast.Call) -> Call | None:
        """The call recorded for this node, or for a local function's call as written (recorded bound by name)."""
        index = self.by_node.get(id(node), self.by_written.get(id(node)))
        return self.calls[index] if index is not None else None

    def _call_of(self, expr: ast.AST, scope, ctx) -> Call | None:
        if isinstance(expr, ast.Call):
            if (found := self._recorded(expr)) is not None:
                return found
            if isinstance(expr.func, ast.Attribute) and expr.func.attr in ("parameters", "named_parameters"):
                return self._call_of(expr.func.value, scope, ctx)
            return None
        if isinstance(expr, (ast.Name, ast.Attribute)):
            sym = self.r.sym(expr, scope, ctx)
            if isinstance(sym, ObjSym):
                if (found := self._recorded(sym.call)) is not None:
                    return found
                return self._call_of(sym.call, sym.scope, ctx)
            if isinstance(sym, Namespace) and sym.class_name:
                return self._parsed_args.get(sym.class_name)
        return None

    def _synthesize_parsed_training_args(self, nodes: dict, ctx: Context) -> None:
        """Training arguments that come from HfArgumentParser exist only on the command line."""
        for node_id, index in list(self.by_node.items()):
            call = self.calls[index]
            if call.kind != CallKind.TRAINER:
                continue
            node = nodes[node_id]
            args_expr = next((k.value for k in node.keywords if k.arg == "args"), None)
            if args_expr is None and len(node.args) >= 2:
                args_expr = node.args[1]
            if args_expr is None:
                continue
            scope = self.index.scope_at(nodes[node_id])
            sym = self.r.sym(args_expr, scope, ctx)
            if not (isinstance(sym, Namespace) and sym.class_name and is_training_arguments(sym.class_name)):
                continue
            if sym.class_name not in self._parsed_args:
                kwargs = {
                    k: self.r.to_value(v, args_expr)
                    for k, v in sym.fields.items()
                    if not (isinstance(v, Known) and v.origins and v.origins[0].kind == "default")
                }
                self._parsed_args[sym.class_name] = Call(
                    kind=CallKind.TRAINING_ARGS,
                    callee=sym.class_name,
                    location=sym.location or call.location,
                    scope=call.scope,
                    target=dotted(args_expr),
                    text="(parsed from the command line)",
                    kwargs=kwargs,
                )
                self.calls.append(self._parsed_args[sym.class_name])
            self.calls[index] = replace(call, refs={**call.refs, "args": self._parsed_args[sym.class_name].key})

    def attribute_sets(self) -> tuple[AttributeSet, ...]:
        """The watched attributes the code sets on an object it names (facts.WATCHED_ATTRIBUTES): `x.name = v`,
        `type(x).name = v`, `setattr(x, "name", v)`, where the script runs that code and no decided condition
        leaves it out."""
        out = []
        for node in self.of(ast.Assign, ast.AnnAssign, ast.Call, ordered=False):  # (sorted below: few are kept)
            if type(node) is ast.Call:
                func, args = node.func, node.args
                if not (isinstance(func, ast.Name) and func.id == "setattr" and len(args) == 3):
                    continue
                if not (isinstance(args[1], ast.Constant) and args[1].value in WATCHED_ATTRIBUTES):
                    continue
                name, target, value = str(args[1].value), args[0], args[2]
            else:
                targets = node.targets if type(node) is ast.Assign else [node.target]
                found = [t for t in targets if isinstance(t, ast.Attribute) and t.attr in WATCHED_ATTRIBUTES]
                if not found or node.value is None:
                    continue
                name, target, value = found[0].attr, found[0].value, node.value
            reached = _set_on(target)
            if reached is None or not self._script_runs(value):  # (on an object it names, not on one of its parts)
                continue
            branches = self._branches(self.index.chain_at(value))
            if any(b.decided is False for b in branches):
                continue  # `if False:`: never set
            out.append(((node.lineno, node.col_offset), name, reached, value, any(b.decided is None for b in branches)))
        out.sort(key=_FIRST)
        sets = []
        for _, name, (owner, kind), value, conditional in out:
            scope = self.index.scope_at(value)
            sets.append(
                AttributeSet(
                    name,
                    owner,
                    scope.name,
                    self.r.value(value, scope),
                    on_class=kind == "class",
                    inner=kind == "inner",
                    held=kind == "held",
                    conditional=conditional,
                )
            )
        return tuple(sets)

    def _script_runs(self, node: ast.expr) -> bool:
        """Whether the script itself may run the expression `node`: each function around it trains itself, is named
        somewhere else in the file (called, or handed to whatever calls it), is a method (a framework may call it;
        not a TrainerCallback event past `on_init_end`, which runs after the Trainer switched checkpointing on), or
        is registered by a decorator (a framework calls it). A function nobody names never runs."""
        scope: Scope | None = self.index.scope_at(node)
        while scope is not None and scope.name != "<module>":
            define = scope.node
            if isinstance(define, (ast.FunctionDef, ast.AsyncFunctionDef)) and not self._may_run(define, scope):
                return False
            scope = scope.parent
        return True

    def _may_run(self, define: ast.FunctionDef | ast.AsyncFunctionDef, scope: Scope) -> bool:
        if any(c.scope == scope.name and c.kind in (CallKind.TRAIN, CallKind.GC_ENABLE) for c in self.calls):
            return True  # (its training is judged as running: so is the rest of it)
        if any(_decorator_name(d) not in _PLAIN_DECORATORS for d in define.decorator_list):
            return True
        if scope.class_name:
            if not self._named_elsewhere(scope.class_name.rsplit(".", 1)[-1], attributes=True):
                return False  # a class nothing names: nothing makes one or calls its methods
            if define.name.startswith("on_") and define.name != "on_init_end":
                return self._named_elsewhere(define.name, attributes=True)
            return True
        return self._named_elsewhere(define.name, attributes=False)

    def _named_elsewhere(self, name: str, attributes: bool) -> bool:
        """A plain function is named by a bare name (or `getattr(module, "name")`); a method through an attribute."""
        if self._names_used is None:
            bare: set[str] = set()
            attrs: set[str] = set()
            for n in self.of(ast.Name, ast.Attribute, ordered=False):
                if type(n) is ast.Name:
                    bare.add(n.id)
                else:
                    attrs.add(n.attr)
            for n in self.of(ast.Call):
                if isinstance(n.func, ast.Name) and n.func.id in ("getattr", "hasattr") and len(n.args) > 1:
                    key = n.args[1]
                    if isinstance(key, ast.Constant) and isinstance(key.value, str):
                        bare.add(key.value)
            self._names_used = (bare, attrs)
        bare, attrs = self._names_used
        return name in bare or (attributes and name in attrs)

    def _apply_attribute_overrides(self) -> None:
        """`training_args.bf16 = True` after construction changes what the Trainer sees (and `config.torch_dtype =`
        what from_config builds, `lora_config.target_modules =` what peft attaches)."""
        attributes: dict[str, list] = {}  # "training_args" -> [(scope, "training_args.bf16", events)]
        for scope in self.index.scopes:
            for name, events in scope.assigns.items():
                owner, dot, _ = name.rpartition(".")
                if dot:
                    attributes.setdefault(owner, []).append((scope, name, events))
        for i, call in enumerate(self.calls):
            if (
                call.kind
                not in (CallKind.TRAINING_ARGS, CallKind.BNB_CONFIG, CallKind.CONFIG_LOAD, CallKind.PEFT_CONFIG)
                or not call.target
                or "," in call.target
            ):
                continue
            prefix = call.target + "."
            for scope, name, events in attributes.get(call.target, ()):
                last = events[-1]
                if last.value is None:
                    continue
                value = self.r.value(last.value, scope)
                value = replace(
                    value,
                    origins=(
                        Origin("code", f"{name} = {self.r.text(last.value)}", self.r.loc(last.node or last.value)),
                    )
                    + value.origins[1:],
                )
                kwargs = dict(call.kwargs)
                kwargs[name[len(prefix) :]] = value
                self.calls[i] = call = replace(call, kwargs=kwargs)


def _set_on(node: ast.expr) -> tuple[str, str] | None:
    """What an attribute is set on, as (the name it is reached through, how): "" the object itself, "class" its
    class (`type(model)`, `model.__class__`), "inner" the model peft wraps (`model.base_model.model`,
    `model.get_base_model()`), "held" the model an object holds (`trainer.model`, `self.model`); None for another
    part of it (`model.config.x` is the config's)."""
    if isinstance(node, ast.Name):
        return node.id, ""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "type" and node.args:
        return (node.args[0].id, "class") if isinstance(node.args[0], ast.Name) else None
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get_base_model":
        return (node.func.value.id, "inner") if isinstance(node.func.value, ast.Name) else None
    if not isinstance(node, ast.Attribute):
        return None
    path = dotted(node)
    head, _, rest = path.partition(".")
    if rest == "__class__":
        return head, "class"
    if rest in ("base_model.model", "base_model.model.model"):
        return head, "inner"
    if rest == "model":
        return head, "held"
    return None


def _decorator_name(node: ast.expr) -> str:
    node = node.func if isinstance(node, ast.Call) else node
    return dotted(node).rsplit(".", 1)[-1]


# decorators that wrap a function without handing it to anything that calls it
_PLAIN_DECORATORS = frozenset(
    {"lru_cache", "cache", "wraps", "no_grad", "inference_mode", "enable_grad", "staticmethod", "classmethod"}
)


_MAIN_GUARD = Branch(0, True, "__main__")  # a branch every run takes: left out of a call's branches

# calls whose dynamic arguments are listed as unknowns (a run-time dtype there hides a precision problem)
_DYNAMIC_WORTH_REPORTING = (
    CallKind.TRAINING_ARGS,
    CallKind.MODEL_LOAD,
    CallKind.ACCELERATOR,
    CallKind.AUTOCAST,
    CallKind.GRAD_SCALER,
    CallKind.BNB_CONFIG,
    CallKind.TRAINER,
)

_UNINTERESTING_ARGS = {
    "0",
    "output_dir",
    "model",
    "train_dataset",
    "eval_dataset",
    "tokenizer",
    "processing_class",
    "data_collator",
    "callbacks",
    "compute_metrics",
    "args",
    "pretrained_model_name_or_path",
    "params",
    "cache_dir",
    "token",
    "revision",
    "trust_remote_code",
    "device",
    "peft_config",
    "formatting_func",
    "report_to",
    "run_name",
    "logging_dir",
}


# --- suppressions ------------------------------------------------------------------------------

_MARKER = "precision-doctor:"
_NOQA_HINT = re.compile(r"noqa\s*:[^\n]*PD[0-9]", re.I)  # before tokenizing: most files have neither
_SUPPRESSION = re.compile(r"#\s*precision-doctor:\s*ignore\b(?:\[([^\]]*)\])?")
# flake8's form, a `noqa` comment naming PD201 (or PD201, PD202). Only codes of this doctor count, and a bare `noqa`
# (or one naming only other tools' codes) does not silence it: a bare noqa is usually written for flake8 or ruff
# about another problem on the line, and a crash at the first step should not vanish with it.
_NOQA = re.compile(r"#\s*noqa\s*:\s*([A-Za-z]+[0-9]+(?:[\s,]+[A-Za-z]+[0-9]+)*)", re.I)
_OUR_CODE = re.compile(r"PD[0-9]{3}$")


def _cli_value(r: Resolver, name: str, sym, where: Location) -> Value:
    """A LightningCLI setting as a call's keyword value; a `class_path`/`init_args` mapping reads as the
    constructor it names (`DeepSpeedStrategy(stage=3)`)."""
    if isinstance(sym, Known):
        return Value(
            state=KNOWN,
            value=sym.value,
            text=f"{name}: {sym.value}",
            origins=sym.origins or (Origin("config", name, where),),
            location=sym.location or where,
        )
    if isinstance(sym, DictSym):
        plain = {k: v.value for k, v in sym.items.items() if isinstance(v, Known)}
        init = sym.items.get("init_args")
        if isinstance(plain.get("class_path"), str):
            arguments = (
                {k: v.value for k, v in init.items.items() if isinstance(v, Known)} if isinstance(init, DictSym) else {}
            )
            constructor = str(plain["class_path"]).rsplit(".", 1)[-1]
            text = f"{constructor}({', '.join(f'{k}={v!r}' for k, v in arguments.items())})"
            return Value(
                state=KNOWN,
                value={"class_path": plain["class_path"], "init_args": arguments},
                text=text,
                origins=(Origin("config", f"{name}: {text}", sym.location or where),),
                location=sym.location or where,
            )
        return Value(
            state=KNOWN,
            value=plain,
            text=f"{name}: {plain}",
            origins=(Origin("config", name, sym.location or where),),
            location=sym.location or where,
        )
    return Value(state="dynamic", text=name, location=where, reason=getattr(sym, "reason", "cannot be followed"))


def read_suppressions(path: str, text: str) -> list[Suppression]:
    """Suppression comments (real comments only, found with tokenize, never inside strings)."""
    if _MARKER not in text and ("noqa" not in text.lower() or not _NOQA_HINT.search(text)):
        return []  # (a lower-cased copy is searched faster than the case-blind pattern runs over the text)
    out = []
    try:
        for tok in tokenize.generate_tokens(io.StringIO(text).readline):
            if tok.type != tokenize.COMMENT:
                continue
            where = Location(path, tok.start[0], tok.start[1] + 1)
            m = _SUPPRESSION.search(tok.string)
            if m:
                ids = tuple(i.strip().upper() for i in (m.group(1) or "").split(",") if i.strip())
                out.append(Suppression(where, ids))
                continue
            n = _NOQA.search(tok.string)
            if n:
                ids = tuple(c.upper() for c in re.split(r"[\s,]+", n.group(1)) if _OUR_CODE.match(c.upper()))
                if ids:
                    out.append(Suppression(where, ids))
    except (tokenize.TokenError, SyntaxError):
        pass
    return out


# --- local modules, model configs --------------------------------------------------------------


def _local_modules(script: Path, nodes: list[ast.AST]) -> list[Path]:
    base = script.parent
    present = _listing(base)  # one listing instead of two lookups per imported name (torch, os, ... are never here)
    found = []
    for node in nodes:
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level <= 1:
            names = [node.module]
        for name in names:
            head = name.split(".", 1)[0]
            if present is not None and head not in present and f"{head}.py" not in present:
                continue
            rel = Path(*name.split("."))
            for candidate in (base / rel.with_suffix(".py"), base / rel / "__init__.py"):
                if worth_reading(candidate) and os.path.realpath(candidate) != os.path.realpath(script):
                    found.append(candidate)
    return list(dict.fromkeys(found))  # `import models` and `from models.vit import ...` name one file twice


def _listing(folder: Path) -> set[str] | None:
    """The names in a folder (None: it cannot be listed); within one run, listed once for all its scripts."""
    key = str(folder)
    found: set[str] | None
    if _IN_RUN[0] and key in _LISTINGS:  # listed for an earlier script: this one read it too, as it was then
        found, seen = _LISTINGS[key]
    else:
        try:
            names, seen = reads.list_folder(folder)
            found = set(names)
        except OSError as exc:
            found, seen = None, ("error", exc.errno)
        if _IN_RUN[0]:
            _LISTINGS[key] = found, seen
    reads.note("list", folder, seen)
    return found


def _local_model_configs(script: Path, calls: list[Call]) -> dict[str, dict]:
    """config.json of local checkpoint directories, for the dtype and family the weights really have."""
    out: dict[str, dict] = {}
    for call in calls:
        if call.kind not in ("model_load", "peft_load", "config_load"):
            continue
        source = model_source(call)
        if source.state != KNOWN or not isinstance(source.value, str):
            continue
        for base in (script.parent, Path.cwd()):
            cfg = base / source.value / "config.json"
            if is_regular_file(cfg):
                try:
                    data = parse_json(read_text_bounded(cfg))
                except (Unreadable, ValueError):
                    continue
                out[source.value] = keep_read_keys(data, MODEL_CONFIG_KEYS)
                out[source.value]["path"] = os.path.relpath(cfg)
                break
    return out


# One file's own facts (and the sibling modules it imports), read once per run however it comes in: as a script
# of a folder and as the module other scripts import. Keyed by the file's identity and size, and by how it is
# shown and the script arguments, which the facts depend on.
# Each entry keeps the reads behind it (reads.py), replayed for every script it serves while a cache records.
_FILE_CACHE: dict[tuple, tuple[ScriptFacts, tuple[Path, ...], reads.Frame | None]] = {}


_IN_RUN = [False]  # inside one_run(): scripts are cached too, not only the modules they import
_LISTINGS: dict[str, tuple[set[str] | None, object]] = {}  # folder -> its names and listing, within one run


def forget_files() -> None:
    """Files may have changed since the last run in this process (fix, tests, a long session)."""
    _FILE_CACHE.clear()
    _KINDS.clear()
    _LISTINGS.clear()
    reads.forget()


@contextmanager
def one_run():
    """A run over a set of files (a folder): each file is read once, whether it comes in as a script or as a
    module another script imports; afterwards the next run reads them afresh. The cyclic collector pauses for the
    run as it does for each file (see _without_gc_pauses): between files it would rescan every fact gathered so
    far, again and again."""
    forget_files()
    _IN_RUN[0] = True
    try:
        with _without_gc_pauses():
            yield
    finally:
        _IN_RUN[0] = False
        forget_files()


def _file_key(path: Path, shown: str, script_args: tuple[str, ...], environ: tuple) -> tuple:
    info = status(path)
    return (
        os.path.realpath(path),
        info.st_mtime_ns,
        info.st_size,
        shown,
        script_args,
        None if environ[0] is None else getattr(environ[0], "digest", None) or frozenset(environ[0].items()),
        environ[1],
    )


def _own_facts(
    path: Path, shown: str, script_args: tuple[str, ...], environ: tuple = (None, ""), module: bool = False
) -> tuple[ScriptFacts, tuple[Path, ...]]:
    """The facts of this file alone and the local modules it imports. Raises InputError on bad input and
    RecursionError on a file too deep to follow. A script probed outside one_run() is read afresh each time."""
    key = _file_key(path, shown, script_args, environ)
    kept = _FILE_CACHE.get(key)
    if kept is None or not (module or _IN_RUN[0]) or (reads.recording_now() and kept[2] is None):
        with reads.nested() as frame:
            text = read_source(path)
            own, modules = _collect_own(path, shown, text, parse(path, text), script_args, environ)
        kept = _FILE_CACHE[key] = (own, modules, frame)
    else:
        reads.replay(kept[2])
    return kept[0], kept[1]


def _collect_own(
    path: Path, shown: str, text: str, tree: ast.Module, script_args: tuple[str, ...], environ: tuple = (None, "")
) -> tuple[ScriptFacts, tuple[Path, ...]]:
    _PROBED[0] += 1
    collector = _Collector(shown, text, tree, script_args, environ)
    collector.collect()
    skipped = text.count("  # notebook line ") if is_notebook(path) else 0
    notebook = (Unknown("notebook", f"{skipped} IPython line(s) (`!shell`, `%magic`) not read"),) if skipped else ()
    own = ScriptFacts(
        path=shown,
        calls=tuple(collector.calls),
        imports=tuple(collector.imports.modules),
        unknowns=tuple(collector.unknowns) + notebook,
        suppressions=tuple(read_suppressions(shown, text)),
        classes=local_classes(collector.r),
        parsed=parsed_arguments(collector.r, collector.of(ast.Call)),
        attribute_sets=collector.attribute_sets(),
    )
    return own, tuple(_local_modules(path, collector.import_nodes))


def _local_module(module: Path, shown: str, script_args: tuple[str, ...], environ: tuple = (None, "")) -> ScriptFacts:
    """A sibling module's facts, read once per run however many scripts import it."""
    try:
        return _own_facts(module, shown, script_args, environ, module=True)[0]
    except RecursionError:
        raise InputError(f"{shown}: {TOO_DEEP}") from None


def _deepspeed_configs(script: Path, calls: list[Call]) -> tuple[dict[str, dict], list[Unknown]]:
    """DeepSpeed JSON files named by `deepspeed=` (relative to the script, then the working directory)."""
    found: dict[str, dict] = {}
    missing: list[Unknown] = []
    for call in calls:
        if call.kind not in ("training_args", "hf_deepspeed_config", "deepspeed_initialize"):
            continue
        if call.kind == "training_args":
            v = call.kwarg("deepspeed")
        elif call.kind == "deepspeed_initialize":
            v = call.deepspeed_config()
        else:
            v = call.args[0] if call.args else None
        if v is None or v.state != KNOWN or not isinstance(v.value, str) or v.value in found:
            continue
        for base in (script.parent, Path.cwd()):
            candidate = base / v.value
            if is_regular_file(candidate):
                try:
                    found[v.value] = read_deepspeed_config(candidate)
                except Unreadable as exc:
                    missing.append(Unknown(f"deepspeed={v.value!r}", exc.reason, v.location or call.location))
                except ValueError as exc:
                    missing.append(
                        Unknown(
                            f"deepspeed={v.value!r}",
                            f"not valid JSON ({type(exc).__name__})",
                            v.location or call.location,
                        )
                    )
                break
        else:
            missing.append(
                Unknown(
                    f"deepspeed={v.value!r}",
                    "the DeepSpeed config file is not here (looked next to the script and in the working directory)",
                    v.location or call.location,
                )
            )
    return found, missing


@contextmanager
def _without_gc_pauses():
    """The probe allocates a few objects per AST node (indexes, symbols) and makes no reference cycles (the
    parsers it rebuilds are taken apart after use, literals are read without ast.literal_eval's closures); the
    cyclic collector would rescan all of them every few thousand allocations (a quarter of a large script's
    time). Collection resumes, as it was, when the probe returns, with everything the probe made moved to the
    oldest generation unscanned: a collection there would only scan it all (0.18 s after a 500-file run), and
    the young collections after it would scan it again. The young generations are collected first, before the
    probe (cheap: they hold only what the caller made lately), so that the caller's own garbage is not moved
    there with it. A program around the doctor that froze objects itself gets one young collection at the end
    instead (unfreezing must not thaw its objects)."""
    enabled = gc.isenabled()
    moves = enabled and not gc.get_freeze_count()
    if moves:
        gc.collect(1)
    gc.disable()
    probed = _PROBED[0]
    try:
        yield
    finally:
        if enabled:
            if moves and not gc.get_freeze_count():
                gc.freeze()
                gc.unfreeze()  # every object now sits in the oldest generation, unscanned
            elif _PROBED[0] != probed:
                gc.collect(1)
            gc.enable()


_PROBED = [0]  # files probed in this process: a run that probed none made no cycles here


def probe_script(
    path: Path, script_args: tuple[str, ...] = (), display: str | None = None, environ: tuple = (None, "")
) -> ScriptFacts:
    """Read a script (and the sibling modules it imports) into facts. Raises InputError on bad input.
    `environ` is (the job's environment variables as far as known, or None; where they come from)."""
    with _without_gc_pauses():
        return _probe_script(path, script_args, display, environ)


def _probe_script(path: Path, script_args: tuple[str, ...], display: str | None, environ: tuple) -> ScriptFacts:
    shown = display or str(path)
    key = _file_key(path, shown, tuple(script_args), environ)
    kept = _FILE_CACHE.get(key) if _IN_RUN[0] else None
    if kept is not None and not (reads.recording_now() and kept[2] is None):  # read this run, as a module
        own, modules, _ = kept  # another script imports
        reads.replay(kept[2])
    else:
        with reads.nested() as frame:
            text = read_source(path)
            tree = parse(path, text)  # here, not deeper: each frame above the parser lowers the nesting it accepts
            try:
                own, modules = _collect_own(path, shown, text, tree, tuple(script_args), environ)
            except RecursionError:  # one file the probe cannot follow is reported, never the end of the run
                return ScriptFacts(
                    path=shown,
                    unknowns=(Unknown("not checked", TOO_DEEP),),
                    files=(shown,),
                    suppressions=tuple(read_suppressions(shown, text)),
                )
        if _IN_RUN[0]:
            _FILE_CACHE[key] = (own, modules, frame)
    calls = list(own.calls)
    unknowns = list(own.unknowns)
    imports = list(own.imports)
    files = [shown]
    suppressions = list(own.suppressions)
    classes, parsed = dict(own.classes), list(own.parsed)
    attribute_sets = list(own.attribute_sets)
    for module in modules[:MAX_LOCAL_MODULES]:
        mshown = (
            os.path.relpath(module)
            if display is None
            else os.path.normpath(Path(shown).parent / os.path.relpath(module, path.parent))
        )  # utils/x.py, not x.py
        try:
            sub = _local_module(module, mshown, tuple(script_args), environ)
        except InputError as exc:
            unknowns.append(Unknown(f"local module {module.name}", str(exc)))
            continue
        calls.extend(sub.calls)
        unknowns.extend(sub.unknowns)
        imports.extend(sub.imports)
        suppressions.extend(sub.suppressions)
        classes = {**sub.classes, **classes}
        parsed.extend(sub.parsed)
        attribute_sets.extend(sub.attribute_sets)
        files.append(mshown)
    calls, found = read_frameworks(calls)  # Lightning, Sentence Transformers, Unsloth, diffusers
    unknowns.extend(found)
    deepspeed, missing = _deepspeed_configs(path, calls)
    unknowns.extend(missing)
    return ScriptFacts(
        path=shown,
        calls=tuple(calls),
        imports=tuple(dict.fromkeys(imports)),
        unknowns=tuple(unique(unknowns, key=lambda u: (u.what, u.location))),
        local_configs=_local_model_configs(path, calls),
        files=tuple(files),
        suppressions=tuple(suppressions),
        deepspeed_configs=deepspeed,
        checkpoints=probe_checkpoints(path, calls),
        classes=classes,
        parsed=tuple(parsed),
        configs_read=_configs_read(calls, files),
        attribute_sets=tuple(attribute_sets),
    )


def _configs_read(calls: list[Call], files: list[str]) -> tuple[str, ...]:
    """The config files the script's values were read from (`yaml.safe_load`, a parser's `--config`)."""
    found = {
        os.path.normpath(o.location.path)
        for c in calls
        for v in (*c.args, *c.kwargs.values())
        for o in v.origins
        if o.kind == "config-file" and o.location is not None
    }
    return tuple(sorted(found - {os.path.normpath(f) for f in files}))
