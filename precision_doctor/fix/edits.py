"""Turns a finding's edits (plain data) into source changes with libcst, so comments, formatting and quoting
elsewhere survive. Edits are matched by line and name, never by column (ast counts columns in UTF-8 bytes,
libcst in characters). The only module that imports libcst, and only `fix` imports it.
"""

from __future__ import annotations

import ast
import difflib

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider, QualifiedNameProvider, ScopeProvider

from ..model.errors import InputError
from ..model.findings import Edit
from ..model.python_source import parse_quietly
from ..model.util import python_lines, record
from ..system import safe_io
from ..system.notebooks import CELL_MARK, NOTEBOOK_LINE, NotFound, is_notebook, notebook_code, written_back

BOM = "\ufeff"


class EditFailed(Exception):
    """The edit's target is not where the finding said (the file changed, or the edit is stale)."""


@record
class SourceFile:
    """A script as `fix` reads it: its bytes, and its text with newlines exactly as written (libcst keeps CRLF, a
    missing final newline, form feeds and U+2028 when it is given the text as it is) and without the UTF-8 BOM,
    which is put back on writing."""

    path: str
    text: str
    bom: bool = False
    container: str = ""  # a notebook's JSON (without the BOM): `text` is its code cells (system/notebooks.py)


def read_source_file(path: str) -> SourceFile:
    try:
        data = safe_io.read_bytes(path)
    except InputError as exc:
        raise EditFailed(str(exc)) from None
    bom = data.startswith(BOM.encode("utf-8"))
    try:
        text = data.decode("utf-8")  # no newline translation, unlike read_text
    except UnicodeDecodeError as exc:
        raise EditFailed(f"{path}: not UTF-8 (byte offset {exc.start}); nothing changed") from None
    text = text[1:] if bom else text
    if is_notebook(path):
        try:
            return SourceFile(path, notebook_code(text).text, bom, container=text)
        except NotFound as exc:
            raise EditFailed(f"{path}: {exc}; nothing changed") from None
    return SourceFile(path, text, bom)


@record
class FileChange:
    path: str
    before: str  # the text without the BOM
    after: str
    bom: bool = False
    container: str = ""  # a notebook's JSON as read: before/after are its code cells, written back into it

    @property
    def before_bytes(self) -> bytes:
        return self._encode(self.container or self.before)

    @property
    def after_bytes(self) -> bytes:
        return self._encode(self.file_after)

    @property
    def file_after(self) -> str:
        """The file's text after the change (a notebook's JSON with its changed cells rewritten)."""
        if not self.container:
            return self.after
        return written_back(self.container, notebook_code(self.container), self.after)

    def _encode(self, text: str) -> bytes:
        return ((BOM if self.bom else "") + text).encode("utf-8")

    def diff(self, label: str | None = None) -> str:
        """A unified diff that `patch -p0` and `git apply -p0` take: lines split where Python splits them, each
        line's own newline kept (a CRLF file's patch carries CRLF lines), the BOM in the first line as in the
        file, and `\\ No newline at end of file` after a last line that has none."""
        name = label or self.path
        header = name + ("\t" if " " in name else "")  # as git writes it: `patch` ends a name at a space or a tab
        bom = BOM if self.bom else ""
        out = []
        for line in difflib.unified_diff(
            python_lines(bom + (self.container or self.before), keepends=True),
            python_lines(bom + self.file_after, keepends=True),
            fromfile=header,
            tofile=header,
        ):
            out.append(line if line.endswith(("\n", "\r")) else line + "\n\\ No newline at end of file\n")
        return "".join(out)


def apply_edits(source: str, edits: tuple[Edit, ...] | list[Edit]) -> str:
    """The source with every edit applied, the imports its new code needs added, or EditFailed. The result always
    parses and uses no name that is not defined where it is used, unless the source already did."""
    try:
        module = cst.parse_module(source)
    except cst.ParserSyntaxError as exc:
        raise EditFailed(f"the file does not parse ({str(exc).splitlines()[0]})") from None
    before_undefined = undefined_names(module)
    # bottom-up and right to left, imports last: no edit shifts the place of an edit still to come
    ordered = sorted(enumerate(edits), key=lambda ie: (ie[1].kind == "add_import", -ie[1].line, -ie[1].column, ie[0]))
    for _, edit in ordered:
        try:
            module = _apply(module, edit)
        except (cst.ParserSyntaxError, ValueError) as exc:
            raise EditFailed(f"the edit would not parse ({str(exc).splitlines()[0]})") from None
    module = _complete_names(module, before_undefined)
    after = module.code
    try:
        parse_quietly(after)
    except SyntaxError as exc:  # never hand back a file that no longer parses
        raise EditFailed(f"the edit would not parse ({exc.msg}, line {exc.lineno})") from None
    return after


def _apply(module: cst.Module, edit: Edit) -> cst.Module:
    kind = edit.kind
    if kind == "add_import":
        return _add_import(module, edit.new)
    wrapper = MetadataWrapper(module)
    positions = wrapper.resolve(PositionProvider)
    tree = wrapper.module
    if kind == "replace_value":
        return _replace_value(tree, positions, edit)
    if kind in ("set_kwarg", "remove_kwarg", "rename_kwarg", "replace_callee"):
        call = _call_at(tree, positions, edit)
        if edit.library:
            _check_library(wrapper, call, edit)
        return tree.deep_replace(call, _edit_call(call, edit))
    if kind in ("insert_before", "insert_after"):
        return _insert(tree, positions, edit)
    raise EditFailed(f"unknown edit kind {kind!r}")


def _same_expression(a: str, b: str) -> bool:
    try:
        return ast.dump(parse_quietly(a.strip(), mode="eval")) == ast.dump(parse_quietly(b.strip(), mode="eval"))
    except SyntaxError:
        return a.strip() == b.strip()


def _replace_value(tree: cst.Module, positions, edit: Edit) -> cst.Module:
    """The value replaced in the form it is written: a dtype written as the string "float16" (read through
    getattr(torch, ...) or a dtype= string) becomes the string "float32", in the same quotes, and needs no import."""
    try:
        target = _expression_at(tree, positions, edit.line, edit.old, edit.column)
    except EditFailed:
        written = _string_form(tree, positions, edit)
        if written is None:
            raise
        return tree.deep_replace(*written)
    if isinstance(target, cst.SimpleString) and _dtype_name(edit.new):
        as_string = _as_string(target, edit.new)
        if as_string is not None:
            return tree.deep_replace(target, as_string)
    return tree.deep_replace(target, cst.parse_expression(edit.new))


def _dtype_name(expression: str) -> str:
    tail = expression.strip().removeprefix("torch.")
    return tail if tail.isidentifier() and ("float" in tail or tail in ("half", "bfloat16")) else ""


def _string_form(tree: cst.Module, positions, edit: Edit) -> tuple[cst.SimpleString, cst.SimpleString] | None:
    """Where an edit names the dtype `torch.float16` and the line writes it as a string: that string."""
    if not _dtype_name(edit.old):
        return None
    for node, pos in positions.items():
        if (
            isinstance(node, cst.SimpleString)
            and pos.start.line == edit.line
            and node.evaluated_value in (_dtype_name(edit.old), f"torch.{_dtype_name(edit.old)}")
        ):
            new = _as_string(node, edit.new)
            if new is not None:
                return node, new
    return None


def _as_string(node: cst.SimpleString, new: str) -> cst.SimpleString | None:
    """`"float16"` → `"float32"`, `'torch.float16'` → `'torch.float32'`: the new dtype in the string's own form."""
    value, name = node.evaluated_value, _dtype_name(new)
    if not isinstance(value, str) or not _dtype_name(value) or not name:
        return None
    text = f"torch.{name}" if value.startswith("torch.") else name
    return node.with_changes(value=f"{node.prefix}{node.quote}{text}{node.quote}")


def _expression_at(tree: cst.Module, positions, line: int, old: str, column: int = 0) -> cst.CSTNode:
    found = [
        node
        for node, pos in positions.items()
        if pos.start.line == line
        and isinstance(node, cst.BaseExpression)
        and _same_expression(tree.code_for_node(node), old)
        and (not column or pos.start.column + 1 == column)
    ]  # both count characters, 1- vs 0-based
    if not found:
        raise EditFailed(f"line {line}: `{old}` is not there any more")
    return min(found, key=lambda n: positions[n].start.column)  # the outermost expression


def _call_name(call: cst.Call) -> str:
    func = call.func
    if isinstance(func, cst.Attribute):
        return func.attr.value
    if isinstance(func, cst.Name):
        return func.value
    return ""


def _call_at(tree: cst.Module, positions, edit: Edit) -> cst.Call:
    """The call an edit is for: on its line, by its callee; of twins on one line (`a = f(x=1); b = f(x=1)`) the
    first the edit still changes, as columns move once an earlier twin is edited."""
    name = edit.call
    found = sorted(
        (
            n
            for n, p in positions.items()
            if isinstance(n, cst.Call)
            and p.start.line == edit.line
            and (not name or _call_name(n) == name or tree.code_for_node(n.func).endswith(name))
        ),
        key=lambda n: positions[n].start.column,
    )
    if not found:
        raise EditFailed(f"line {edit.line}: no call to {name or 'anything'} there any more")
    for call in found if len(found) > 1 else ():
        try:
            if not call.deep_equals(_edit_call(call, edit)):
                return call
        except EditFailed:
            continue
    return found[0]  # the outermost


def _edit_call(call: cst.Call, edit: Edit) -> cst.Call:
    args = list(call.args)
    index = next(
        (
            i
            for i, a in enumerate(args)
            if a.keyword is not None and a.keyword.value == (edit.old if edit.kind == "rename_kwarg" else edit.name)
        ),
        None,
    )
    if edit.kind == "set_kwarg":
        value = cst.parse_expression(edit.new)
        if index is not None:
            args[index] = args[index].with_changes(value=value)
        else:
            args = _append_keyword(args, edit.name, value)
    elif edit.kind == "remove_kwarg":
        if index is None:
            raise EditFailed(f"no {edit.name}= to remove")
        del args[index]
        if args:  # the new last argument keeps no dangling comma
            args[-1] = args[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
    elif edit.kind == "rename_kwarg":
        if index is None:
            raise EditFailed(f"no {edit.old}= to rename")
        args[index] = args[index].with_changes(keyword=cst.Name(edit.new))
    elif edit.kind == "replace_callee":
        call = call.with_changes(func=cst.parse_expression(edit.new))
        if edit.name and not (
            args
            and args[0].keyword is None
            and _same_expression(cst.Module([]).code_for_node(args[0].value), edit.name)
        ):
            args = [
                cst.Arg(
                    value=cst.parse_expression(edit.name),
                    comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")) if args else cst.MaybeSentinel.DEFAULT,
                )
            ] + args
    return call.with_changes(args=args)


def _append_keyword(args: list[cst.Arg], name: str, value: cst.BaseExpression) -> list[cst.Arg]:
    new = cst.Arg(
        keyword=cst.Name(name),
        value=value,
        equal=cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace("")),
    )
    if not args:
        return [new]
    last = args[-1]
    if isinstance(last.comma, cst.Comma):  # a trailing comma (a multi-line call): one argument per line
        closing = last.comma.whitespace_after
        between = (
            args[-2].comma.whitespace_after if len(args) >= 2 and isinstance(args[-2].comma, cst.Comma) else closing
        )
        if isinstance(closing, cst.ParenthesizedWhitespace) and isinstance(between, cst.ParenthesizedWhitespace):
            # the old last argument keeps its comment and gets the argument indentation; the new one closes
            kept = last.comma.with_changes(
                whitespace_after=closing.with_changes(indent=between.indent, last_line=between.last_line)
            )
            ends = last.comma.with_changes(whitespace_after=closing.with_changes(first_line=cst.TrailingWhitespace()))
            return args[:-1] + [last.with_changes(comma=kept), new.with_changes(comma=ends)]
        return args[:-1] + [
            last.with_changes(comma=args[-2].comma if len(args) >= 2 else last.comma),
            new.with_changes(comma=last.comma),
        ]
    return args[:-1] + [last.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))), new]


def _insert(tree: cst.Module, positions, edit: Edit) -> cst.Module:
    statement = None
    for node, pos in positions.items():
        if isinstance(node, cst.SimpleStatementLine) and pos.start.line <= edit.line <= pos.end.line:
            statement = node
            break
    if statement is None:
        raise EditFailed(f"line {edit.line}: no statement there any more")
    new = cst.parse_statement(edit.new + "\n")
    code = tree.code_for_node(new).strip()
    if any(tree.code_for_node(s).strip() == code for s in _siblings(tree, statement)):
        return tree  # already there: applying twice changes nothing

    class Inserter(cst.CSTTransformer):
        def on_leave(self, original, updated):
            if original is statement:
                pair = [new, updated] if edit.kind == "insert_before" else [updated, new]
                return cst.FlattenSentinel(pair)
            return updated

    return tree.visit(Inserter())


def _siblings(tree: cst.Module, statement: cst.CSTNode) -> list[cst.CSTNode]:
    found: list[cst.CSTNode] = []

    class Finder(cst.CSTVisitor):
        def visit_IndentedBlock(self, node):
            if statement in node.body:
                found.extend(node.body)

    if statement in tree.body:
        return list(tree.body)
    tree.visit(Finder())
    return found


def _add_import(module: cst.Module, statement: str) -> cst.Module:
    """`statement` in the file's import block at the top (after the docstring), unless the file already has it."""
    new = cst.parse_statement(statement + "\n")
    wanted = ast.dump(parse_quietly(statement))
    for s in module.body:
        if isinstance(s, cst.SimpleStatementLine) and isinstance(s.body[0], (cst.Import, cst.ImportFrom)):
            code = module.code_for_node(s).strip()
            try:
                if ast.dump(parse_quietly(code)) == wanted:
                    return module
            except SyntaxError:
                pass
            if _imports_name(code, statement):
                return module
    # the end of the leading block: a later import (mid-file, after the code that needs the name) is no place.
    # In a notebook the block runs on past its IPython lines (`%pip install`, a `%%bash` cell, read as `pass`):
    # the import goes after them, never above a cell magic (which must open its cell) or before the install
    at = 0
    for i, s in enumerate(module.body):
        if not isinstance(s, cst.SimpleStatementLine):
            break
        first = s.body[0]
        docstring = (
            i == 0
            and isinstance(first, cst.Expr)
            and isinstance(first.value, (cst.SimpleString, cst.ConcatenatedString))
        )
        magic = NOTEBOOK_LINE.match(module.code_for_node(s).strip()) is not None
        if not (docstring or magic or isinstance(first, (cst.Import, cst.ImportFrom))):
            break
        at = i + 1
    body = list(module.body)
    if at < len(body):  # the cell marks above the statement it goes before stay above the import too
        lines = list(body[at].leading_lines)
        marks = [k for k, line in enumerate(lines) if line.comment and CELL_MARK.match(line.comment.value)]
        if marks:
            new = new.with_changes(leading_lines=lines[: marks[-1] + 1])
            body[at] = body[at].with_changes(leading_lines=lines[marks[-1] + 1 :])
    body.insert(at, new)
    return module.with_changes(body=body)


def _imports_name(existing: str, statement: str) -> bool:
    """`from transformers import AutoModel, BitsAndBytesConfig` already provides BitsAndBytesConfig."""
    try:
        want = parse_quietly(statement).body[0]
        have = parse_quietly(existing).body[0]
    except (SyntaxError, IndexError):
        return False
    if isinstance(want, ast.ImportFrom) and isinstance(have, ast.ImportFrom) and want.module == have.module:
        return {a.name for a in want.names} <= {a.name for a in have.names}
    if isinstance(want, ast.Import) and isinstance(have, ast.Import):
        return {a.name for a in want.names} <= {a.name for a in have.names}
    return False


def _check_library(wrapper: MetadataWrapper, call: cst.Call, edit: Edit) -> None:
    """Never rewrite a look-alike: Unsloth's FastLanguageModel.from_pretrained is not transformers'."""
    found = wrapper.resolve(QualifiedNameProvider).get(call.func, ())
    names = {q.name for q in (found() if callable(found) else found)}  # computed lazily by libcst
    if names and not any(n == edit.library or n.startswith(edit.library + ".") for n in names):
        shown = sorted(names)[0]
        raise EditFailed(f"line {edit.line}: the call is {shown}, not {edit.library}'s; left as it is")


# what the new code of an edit may name, and the import that provides it
IMPORTS = {
    "torch": "import torch",
    "os": "import os",
    "BitsAndBytesConfig": "from transformers import BitsAndBytesConfig",
    "prepare_model_for_kbit_training": "from peft import prepare_model_for_kbit_training",
    "PartialState": "from accelerate import PartialState",
}


def undefined_names(module: cst.Module) -> dict[str, int]:
    """Each name read where no assignment, import or builtin defines it, with the first line it is read on."""
    wrapper = MetadataWrapper(module, unsafe_skip_copy=True)
    scopes = wrapper.resolve(ScopeProvider)
    positions = wrapper.resolve(PositionProvider)
    found: dict[str, int] = {}
    for scope in {s for s in scopes.values() if s is not None}:
        for access in scope.accesses:
            if not access.referents and isinstance(access.node, cst.Name):
                line = positions[access.node].start.line
                found[access.node.value] = min(line, found.get(access.node.value, line))
    return found


def _import_aliases(module: cst.Module) -> dict[str, str]:
    """`import torch as T` → {"torch": "T"}; `from transformers import BitsAndBytesConfig as BNB` →
    {"BitsAndBytesConfig": "BNB"}: what the file already calls the things an edit names."""
    aliases: dict[str, str] = {}
    for node in ast.walk(parse_quietly(module.code)):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            for a in node.names:
                if a.asname and "." not in a.name:
                    wanted = (
                        f"import {a.name}" if isinstance(node, ast.Import) else f"from {node.module} import {a.name}"
                    )
                    if IMPORTS.get(a.name) == wanted:
                        aliases[a.name] = a.asname
    return aliases


def _complete_names(module: cst.Module, before: dict[str, int]) -> cst.Module:
    """Names the edits introduced: written with the file's own alias when it has one (`T.bfloat16` where torch is
    imported as T), else imported in the file's import block; any other new undefined name is EditFailed."""
    new = {n: line for n, line in undefined_names(module).items() if n not in before}
    if not new:
        return module
    aliases = _import_aliases(module)
    renames = {n: aliases[n] for n in new if n in aliases}
    if renames:
        module = _rename_undefined(module, renames)
    for name in sorted(set(new) - set(renames)):
        if name in IMPORTS:
            module = _add_import(module, IMPORTS[name])
    still = {n: line for n, line in undefined_names(module).items() if n not in before}
    if still:
        name, line = min(still.items(), key=lambda kv: kv[1])
        raise EditFailed(f"line {line}: `{name}` is not defined there")
    return module


def _rename_undefined(module: cst.Module, renames: dict[str, str]) -> cst.Module:
    wrapper = MetadataWrapper(module)
    scopes = wrapper.resolve(ScopeProvider)
    targets = {
        id(a.node)
        for s in {s for s in scopes.values() if s is not None}
        for a in s.accesses
        if not a.referents and isinstance(a.node, cst.Name) and a.node.value in renames
    }

    class Renamer(cst.CSTTransformer):
        def leave_Name(self, original, updated):
            return updated.with_changes(value=renames[original.value]) if id(original) in targets else updated

    return wrapper.module.visit(Renamer())


def write_change(change: FileChange, what: str = "") -> None:
    """Write the change by safe_io's rules; refused if the file is no longer what the change was computed on."""
    safe_io.write_file(
        change.path, change.after_bytes, what=what or change.path, unchanged_since=safe_io.digest(change.before_bytes)
    )
