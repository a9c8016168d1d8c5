"""A Jupyter notebook as the Python the doctor reads, and back.

The code cells become one Python text, each cell after a marker line (`# %% [cell 3]`, the cell's position in the
notebook, markdown and raw cells counted), so that a location in the text names its cell and line. IPython's own
syntax (`!pip install ...`, `%matplotlib inline`, `x = !ls`, a `%%bash` cell, `obj?`) is not Python: each such line
is read as `pass` and counted. `fix` edits that text and writes it back into the notebook's JSON, replacing only
the `source` of the cells it changed: outputs, metadata and every other byte stay as they were.
"""

from __future__ import annotations

import json
import re

from ..model.util import record

NOTEBOOK_SUFFIX = ".ipynb"
CELL_MARK = re.compile(r"^# %% \[cell (\d+)\]$", re.M)  # a line of its own (`findall` over the text too)
NOTEBOOK_LINE = re.compile(r"^(\s*)pass  # notebook line (\d+)$")  # an IPython line, read as `pass`
_MAGIC = re.compile(r"^\s*(!|%|\w+\s*=\s*[!%])|\?\s*$")


class NotFound(ValueError):
    """The text is no notebook the doctor reads (its reason is the message)."""


@record
class NotebookCode:
    text: str  # the code cells as one Python text
    magics: tuple[str, ...] = ()  # the lines read as `pass`, in order (put back on writing)

    @property
    def skipped(self) -> int:
        return len(self.magics)


def is_notebook(path: object) -> bool:
    return str(path).lower().endswith(NOTEBOOK_SUFFIX)


def notebook_code(raw: str) -> NotebookCode:
    """The code cells of a notebook's JSON as one Python text."""
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError) as exc:  # RecursionError: nesting deeper than the parser goes
        raise NotFound(f"not valid notebook JSON ({type(exc).__name__})") from None
    if not isinstance(data, dict) or not isinstance(data.get("cells"), list):
        old = isinstance(data, dict) and "worksheets" in data
        raise NotFound(
            "an nbformat 3 notebook: convert it with `jupyter nbconvert --to notebook`"
            if old
            else "no `cells` list: not a Jupyter notebook"
        )
    out: list[str] = []
    magics: list[str] = []
    for number, cell in enumerate(data["cells"], 1):
        if not isinstance(cell, dict) or cell.get("cell_type") != "code":
            continue
        out.append(f"# %% [cell {number}]\n")
        lines = _source(cell.get("source")).splitlines()
        whole = bool(lines) and lines[0].lstrip().startswith("%%")  # a cell magic: the cell is not Python
        continuing, indent = False, ""  # a `!cmd \\` line goes on in the next line, whatever its indent
        for line in lines:
            if whole or continuing or _MAGIC.search(line):
                if not continuing:
                    indent = "" if whole else line[: len(line) - len(line.lstrip())]
                out.append(f"{indent}pass  # notebook line {len(magics)}\n")
                magics.append(line)
                continuing = not whole and line.rstrip().endswith("\\")
            else:
                out.append(line + "\n")
    return NotebookCode("".join(out), tuple(magics))


def _source(value: object) -> str:
    if isinstance(value, list):
        return "".join(v for v in value if isinstance(v, str))
    return value if isinstance(value, str) else ""


def cell_line(text: str, line: int) -> tuple[int, int] | None:
    """(cell, line in the cell) of a line of the notebook's Python text; None before the first cell."""
    lines = text.splitlines()
    for index in range(min(line, len(lines)) - 1, -1, -1):
        found = CELL_MARK.match(lines[index])
        if found:
            return int(found.group(1)), line - index - 1
    return None


def written_back(raw: str, code: NotebookCode, edited: str) -> str:
    """The notebook's JSON with each code cell's source replaced by its part of the edited text; only the cells
    whose source changed are rewritten, in place."""
    cells: dict[int, list[str]] = {}
    current: list[str] | None = None
    for line in edited.splitlines(keepends=True):
        found = CELL_MARK.match(line.rstrip("\r\n"))
        if found:
            current = cells.setdefault(int(found.group(1)), [])
            continue
        if current is None:  # an edit above the first cell (an import added at the top): the first cell's
            current = cells.setdefault(min((int(m) for m in CELL_MARK.findall(edited)), default=1), [])
        magic = NOTEBOOK_LINE.match(line.rstrip("\r\n"))
        if magic and int(magic.group(2)) < len(code.magics):
            line = code.magics[int(magic.group(2))] + "\n"
        current.append(line)
    spans = _source_spans(raw)
    out, last = [], 0
    for number in sorted(spans):
        start, end = spans[number]
        if number not in cells:
            continue
        old = json.loads(raw[start:end])
        new = "".join(cells[number])
        if new.endswith("\n") and not _source(old).endswith("\n"):
            new = new[:-1]  # nbformat keeps no newline after a cell's last line
        if new == _source(old):
            continue
        out.append(raw[last:start])
        out.append(_as_json(new, raw[start:end], isinstance(old, list)))
        last = end
    out.append(raw[last:])
    return "".join(out)


def _as_json(source: str, written: str, as_list: bool) -> str:
    """The new source as the old one was written: a list of lines, one per line at the old indent, or a string."""
    if not as_list:
        return json.dumps(source, ensure_ascii=False)
    items = [json.dumps(line, ensure_ascii=False) for line in source.splitlines(keepends=True)]
    gap = re.match(r"\[(\s*)", written).group(1)  # type: ignore[union-attr]
    if "\n" not in gap or not items:
        return "[" + ", ".join(items) + "]"
    indent = gap.rsplit("\n", 1)[1]
    end = re.search(r"\n([ \t]*)\]\s*$", written)
    close = end.group(1) if end else indent[:-1]
    return "[\n" + indent + (",\n" + indent).join(items) + "\n" + close + "]"


_WS_CHARS = re.compile(r"[ \t\n\r]*")
_DECODER = json.JSONDecoder()


def _skip(raw: str, i: int) -> int:
    """The first position at or after i that is not JSON whitespace."""
    found = _WS_CHARS.match(raw, i)
    return found.end() if found else i


def _source_spans(raw: str) -> dict[int, tuple[int, int]]:
    """Where each cell's `source` value is written in the JSON text: {cell number: (start, end)}."""
    spans: dict[int, tuple[int, int]] = {}
    for key, start, _ in _members(raw, _skip(raw, 0)):
        if key != "cells" or raw[start] != "[":
            continue
        for number, cell_start in enumerate(_elements(raw, start), 1):
            if raw[cell_start] != "{":
                continue
            for cell_key, value_start, value_end in _members(raw, cell_start):
                if cell_key == "source":
                    spans[number] = (value_start, value_end)
    return spans


def _members(raw: str, i: int):
    """(key, value start, value end) of each member of the object at i."""
    i = _skip(raw, i + 1)
    while i < len(raw) and raw[i] != "}":
        key, i = _DECODER.raw_decode(raw, i)
        i = _skip(raw, i) + 1  # the colon
        start = _skip(raw, i)
        _, end = _DECODER.raw_decode(raw, start)
        yield key, start, end
        i = _skip(raw, end)
        if i < len(raw) and raw[i] == ",":
            i = _skip(raw, i + 1)


def _elements(raw: str, i: int):
    """The start of each element of the array at i."""
    i = _skip(raw, i + 1)
    while i < len(raw) and raw[i] != "]":
        yield i
        _, end = _DECODER.raw_decode(raw, i)
        i = _skip(raw, end)
        if i < len(raw) and raw[i] == ",":
            i = _skip(raw, i + 1)


def file_line(raw: str, cell: int, line: int) -> int | None:
    """The line of the notebook's file (its JSON) that holds line `line` of cell `cell` (both 1-based, the cell
    counted as the marker counts it): what a code-scanning UI showing the `.ipynb` file needs. None when the JSON
    cannot be followed that far."""
    try:
        span = _source_spans(raw).get(cell) if raw else None
        if span is None:
            return None
        start = span[0]
        # `source` is one string, or a list of strings (a line each, as Jupyter saves it)
        pieces = [start] if raw[start] != "[" else list(_elements(raw, start))
        strings = [(at, text) for at in pieces if isinstance(text := _DECODER.raw_decode(raw, at)[0], str)]
    except (ValueError, IndexError, RecursionError):
        return None
    seen = 0  # source lines begun before this string
    for at, text in strings:
        seen_after = seen + text.count("\n")
        if line - 1 <= seen_after - (1 if text.endswith("\n") else 0) or at == strings[-1][0]:
            return raw.count("\n", 0, at) + 1
        seen = seen_after
    return None
