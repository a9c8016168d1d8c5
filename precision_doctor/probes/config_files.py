"""YAML and JSON configs read into values with their line numbers, for the evidence trail.

PyYAML's safe composer builds the node tree (every node keeps its start line; no Python object is ever
constructed from a tag, so a config cannot run anything), and each scalar is made a value by the safe
constructor. PyYAML is imported only when a YAML file or string is read. JSON is read by the same composer
(JSON is YAML 1.2 and, for the configs people write, YAML 1.1 too), so its values keep their lines as well;
a JSON text the composer refuses is read with `json` and its values point at line 1.

Every file is read through `sources` (regular files only, bounded). A document is at most `MAX_NODES` values:
aliases are shared nodes in YAML, and expanding them naively would let a few lines stand for billions.
"""

from __future__ import annotations

import json
from dataclasses import field
from pathlib import Path
from typing import Any

from ..model.facts import KNOWN, Location, Origin, Value
from ..model.redact import DEEPSPEED_KEYS, keep_read_keys, redact_data, secret_name
from ..model.util import record, shown_value
from ..system.sources import is_regular_file, parse_json, read_text_bounded

_MISSING = object()
MAX_NODES = 20_000
MAX_DEPTH = 64


class ConfigError(ValueError):
    """A config that is not YAML/JSON the doctor can read; the message says why, in a few words."""


@record
class ConfigDoc:
    """A config's top-level mapping: plain data, and the line each key path is written on."""

    path: str  # as shown in reports
    data: dict
    lines: dict[tuple, int] = field(default_factory=dict)  # ("optim", "lr") -> 12
    line_offset: int = 0  # a string inside a script: its first line's number in the script, minus one
    given: dict[tuple, str] = field(default_factory=dict)  # key paths set on the launch line, and how they were

    def overridden(self, values: dict[tuple, tuple[Any, str]]) -> ConfigDoc:
        """The config with these key paths set from the command line ({("lr",): (1e-5, "lr=1e-5")}), as the
        tool's CLI merges them over the file."""
        import copy

        data = copy.deepcopy(self.data)
        for keys, (value, _) in values.items():
            node = data
            for k in keys[:-1]:
                node = node.setdefault(k, {}) if isinstance(node.get(k), dict) or k not in node else {}
            node[keys[-1]] = value
        return ConfigDoc(
            self.path, data, self.lines, self.line_offset, {**self.given, **{k: w for k, (_, w) in values.items()}}
        )

    def has(self, *keys: str) -> bool:
        return self.get(*keys, default=_MISSING) is not _MISSING

    def get(self, *keys: str, default: Any = None) -> Any:
        node: Any = self.data
        for k in keys:
            if not isinstance(node, dict) or k not in node:
                return default
            node = node[k]
        return node

    def location(self, *keys: str) -> Location:
        return Location(self.path, self.lines.get(tuple(keys), 1) + self.line_offset)

    def value(self, *keys: str, via: str = "", meaning: Any = None) -> Value:
        """The value at a key path as a KNOWN `facts.Value` whose origin is the line that writes it:
        `recipe.yaml:12 bf16: true ← --config recipe.yaml`. `meaning`, when given, is what the written value
        stands for (`bf16: auto` -> False on this GPU)."""
        written = self.get(*keys)
        if tuple(keys) in self.given:  # set on the launch line: no line of the file to point at (or to edit)
            words = self.given[tuple(keys)]
            return Value(
                state=KNOWN,
                value=written if meaning is None else meaning,
                text=f"{keys[-1]}: {shown_value(redact_data(written) if secret_name(keys[-1]) else written)}",
                origins=(Origin("script-arg", f"{words} on the command line"),),
            )
        return config_value(self.location(*keys), keys[-1], written, written if meaning is None else meaning, via)


def config_value(where: Location, key: str, written: Any, value: Any, via: str = "") -> Value:
    """A value written at `where` as `key: written`; `value` is what it means (it may differ: `bf16: auto`)."""
    text = f"{key}: {shown_value(redact_data(written) if secret_name(key) else written)}"
    detail = via or f"written in {where.path}"  # the line itself is the evidence's location and excerpt
    return Value(state=KNOWN, value=value, text=text, origins=(Origin("config-file", detail, where),), location=where)


# --- reading ----------------------------------------------------------------------------------


def find_config(name: str, bases: tuple[Path, ...]) -> Path | None:
    """A config named relatively (to the script, then the working directory) or absolutely."""
    p = Path(name).expanduser()
    candidates = (p,) if p.is_absolute() else tuple(b / p for b in bases)
    return next((c for c in candidates if is_regular_file(c)), None)


def display(path: Path) -> str:
    """A found config as reports name it: relative to the working directory when it lies below it."""
    import os

    try:
        rel = os.path.relpath(path)
    except ValueError:
        return str(path)
    return rel if not rel.startswith("..") else str(path)


def read_deepspeed_config(path: Path) -> dict:
    """A DeepSpeed JSON: the settings the rules read. Raises Unreadable (the file) or ValueError (not JSON)."""
    return keep_read_keys(parse_json(read_text_bounded(path)), DEEPSPEED_KEYS)


def read_config(path: Path, shown: str) -> ConfigDoc:
    """Raises Unreadable (the file) or ConfigError (its content)."""
    text = read_text_bounded(path)
    return parse_config(text, shown, json_only=False)


def parse_config(text: str, shown: str, json_only: bool = False, line_offset: int = 0) -> ConfigDoc:
    """A YAML or JSON text whose top level is a mapping."""
    if json_only:
        try:
            data = json.loads(text)
        except (ValueError, RecursionError) as exc:
            raise ConfigError(f"not valid JSON ({type(exc).__name__})") from None
        try:  # the same text through the composer, for the lines
            doc = _compose(text, shown, line_offset)
            if doc.data == data:
                return doc
        except ConfigError:
            pass
        if not isinstance(data, dict):
            raise ConfigError("its top level is not a mapping")
        return ConfigDoc(shown, data, {}, line_offset)
    return _compose(text, shown, line_offset)


def _compose(text: str, shown: str, line_offset: int) -> ConfigDoc:
    import yaml  # only here: a run that reads no config never imports it

    loader = None
    try:
        # libyaml's parser when PyYAML was built with it (16x faster on recipes), the same safe constructor
        loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)(text)  # its reader refuses control characters
        root = loader.get_single_node()
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1 + line_offset}" if mark is not None else ""
        raise ConfigError(f"not valid YAML{where} ({getattr(exc, 'problem', None) or type(exc).__name__})") from None
    except RecursionError:
        raise ConfigError("nested too deeply") from None
    finally:
        if loader is not None:
            loader.dispose()
    if root is None:
        return ConfigDoc(shown, {}, {}, line_offset)
    if not isinstance(root, yaml.MappingNode):
        raise ConfigError("its top level is not a mapping")
    lines: dict[tuple, int] = {}
    budget = [MAX_NODES]
    data = _plain(loader, root, (), lines, budget, 0)
    return ConfigDoc(shown, data, lines, line_offset)


def _plain(loader, node, path: tuple, lines: dict, budget: list, depth: int) -> Any:
    import yaml

    budget[0] -= 1
    if budget[0] < 0:
        raise ConfigError(f"more than {MAX_NODES} values (aliases expanded)")
    if depth > MAX_DEPTH:
        raise ConfigError("nested too deeply")
    if isinstance(node, yaml.MappingNode):
        loader.flatten_mapping(node)  # `<<: *defaults`
        out = {}
        for key_node, value_node in node.value:
            if not isinstance(key_node, yaml.ScalarNode):
                continue
            key = str(key_node.value)
            lines[path + (key,)] = key_node.start_mark.line + 1
            out[key] = _plain(loader, value_node, path + (key,), lines, budget, depth + 1)
        return out
    if isinstance(node, yaml.SequenceNode):
        return [_plain(loader, item, path + (str(i),), lines, budget, depth + 1) for i, item in enumerate(node.value)]
    try:
        return loader.construct_object(node, deep=True)
    except yaml.YAMLError:  # a tag the safe loader does not know (`!!python/object`): keep the text, run nothing
        return node.value
