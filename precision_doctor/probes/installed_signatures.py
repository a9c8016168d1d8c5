"""The keywords the installed libraries accept, read from their source in the training environment (never imported):
for each class a script configures (and the bases it inherits from), what its installed release declares. A class
whose package is not installed, or whose file is not where the table says, is left to the table
(precision_doctor/signatures.py) at the version the stack names.

Only the classes the scripts use are read, each once per run, and only for an installed version the table was not
generated from (a patch release it did not read, a dev build, a newer release): a slice of its module is parsed,
not the module.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import replace
from functools import lru_cache
from pathlib import Path

from ..knowledge.signatures import (
    LLAMAFACTORY_TRAIN,
    LLAMAFACTORY_TRAINING_BEFORE,
    LOADER,
    class_id,
    local_id,
    table,
    table_key,
)
from ..knowledge.version_gates import GATED, family_of, runs_framework, shipped_gate
from ..knowledge.versions import native_model_key
from ..model.facts import GateRequirement, LibraryBehaviour, ScriptFacts, Signature, Unknown, VersionGate
from ..system import content_cache, reads
from ..system.sources import Unreadable, is_regular_file, read_text_bounded
from .library_source import Declaration, read_class, read_loader, read_version_gate, resolve_base

_MAX_SOURCE = 8 * 1024 * 1024
_KINDS = ("training_args", "trainer", "bnb_config", "peft_config", "model_load")


def wanted_ids(script: ScriptFacts) -> set[str]:
    """The table ids a script's keywords are judged against."""
    out: set[str] = set()
    for call in script.of(*_KINDS):
        cid = class_id(call.callee)
        if cid:
            out.add(cid)
    names = [b for cls in script.classes.values() for b in cls.bases]
    names += [c for p in script.parsed for c in p.classes]
    if script.recipe is not None and script.recipe.family == "LLaMA-Factory":  # its parser's (PD217)
        names += [*LLAMAFACTORY_TRAIN, LLAMAFACTORY_TRAINING_BEFORE]
    for name in names:
        if local_id(name, script.classes) is None:
            cid = class_id(name)
            if cid:
                out.add(cid)
    return out


def with_installed_signatures(
    scripts: tuple[ScriptFacts, ...], site_dirs: tuple[str, ...], installed: dict[str, str]
) -> tuple[ScriptFacts, ...]:
    """Each script's stack with the signatures its installed libraries declare for the classes it uses (and, for a
    checkpoint with its own model code, whether the installed transformers has that model itself)."""
    scripts = tuple(
        _with_version_gates(_with_native_models(s, site_dirs, installed), site_dirs, installed) for s in scripts
    )
    if not site_dirs or not installed:
        return scripts
    out = []
    for script in scripts:
        wanted = wanted_ids(script)
        # only the libraries the script runs at their installed release (a notebook's own `pip install` may pin
        # another: its table signatures at that release judge it)
        here = (
            {n: v for n, v in installed.items() if script.stack.get(n).version == v} if script.stack is not None else {}
        )
        found = (
            installed_signatures(site_dirs, tuple(sorted(here.items())), frozenset(wanted))
            if wanted and script.stack is not None and here
            else {}
        )
        out.append(replace(script, stack=replace(script.stack, signatures=found)) if found else script)
    return tuple(out)


def installed_signatures(
    site_dirs: tuple[str, ...],
    installed: tuple[tuple[str, str], ...],
    wanted: frozenset[str],
    releases_read: bool = False,
) -> dict[str, Signature]:
    """What the installed packages declare for these classes and their bases. A package installed at exactly a
    release the table was generated from is left to the table (it is that release's source, read ahead of time),
    unless `releases_read`."""
    versions = {
        name: version
        for name, version in installed
        if releases_read or table()["releases"].get(name, {}).get(table_key(name, version)) != version
    }
    classes = table()["classes"]
    out: dict[str, Signature] = {}
    todo = sorted(wanted)
    while todo:
        cid = todo.pop()
        if cid in out or cid not in classes:
            continue
        package = classes[cid]["package"]
        if package not in versions:
            continue
        found = _read(site_dirs, cid, versions[package])
        if found is None:
            continue
        out[cid] = found
        todo += [b for b in found.bases if b not in out]
    return out


@reads.remembered
def _read(site_dirs: tuple[str, ...], cid: str, version: str) -> Signature | None:
    """From the content cache while the library files it was read from are unchanged."""
    return content_cache.cached(
        "signature",
        (site_dirs, cid, version),
        None,
        lambda: _read_source(site_dirs, cid, version),
        returns=(Signature, type(None)),
    )


def _read_source(site_dirs: tuple[str, ...], cid: str, version: str) -> Signature | None:
    entry = table()["classes"][cid]
    package = entry["package"]
    name = cid.rsplit(".", 1)[-1]
    known = table()["classes"]
    if cid in (LOADER, "transformers.PreTrainedConfig"):
        loader, config = _loader(site_dirs)
        decl = loader if cid == LOADER else config
        where = "modeling_utils.py from_pretrained" if cid == LOADER else "configuration_utils.py"
        if decl is None or not decl.fields:
            return None
        return _signature(decl, cid, known, f"{package} {version} (installed) {where}")
    for path in entry["files"]:
        text = _text(site_dirs, path)
        if text is None:
            continue
        trainer = cid in ("transformers.Trainer", "transformers.Seq2SeqTrainer")
        decl = read_class(text, name, "__init__" if trainer else "")
        if decl is not None:
            return _signature(decl, cid, known, f"{package} {version} (installed) {path}:{decl.line}")
    return None


@reads.remembered
def _loader(site_dirs: tuple[str, ...]):
    return read_loader(lambda path: _text(site_dirs, path))


def _signature(decl: Declaration, cid: str, known, evidence: str) -> Signature:
    bases = tuple(b for b in (resolve_base(base, cid, known) for base in decl.bases) if b)
    return Signature(
        names=tuple(decl.fields) + tuple(decl.aliases), bases=bases, open=decl.open, init=decl.init, evidence=evidence
    )


def _text(site_dirs: tuple[str, ...], relative: str) -> str | None:
    for path in _candidates(site_dirs, relative):
        if is_regular_file(path):
            try:
                return read_text_bounded(path, _MAX_SOURCE, errors="replace")
            except Unreadable:
                return None
    return None


def _candidates(site_dirs: tuple[str, ...], relative: str) -> Iterator[Path]:
    """Where a package file may be: in a site folder, else where an editable install (`pip install -e .`, the way
    LLaMA-Factory's README installs it) keeps its source. Lazy: the editable installs are listed only when the
    caller did not find the file in a site folder (listing a large environment costs more than the read)."""
    top, _, rest = relative.partition("/")
    for folder in site_dirs:
        yield Path(folder) / relative
    for package, folder in editable_sources(site_dirs):
        if package is None:
            yield Path(folder) / relative
        elif package == top:
            yield Path(folder) / rest


@reads.remembered
def editable_sources(site_dirs: tuple[str, ...]) -> tuple[tuple[str | None, str], ...]:
    """(package, its folder) for each editable install in the site folders, read as text, never run: a
    setuptools finder module's MAPPING (`__editable___NAME_finder.py`: package -> its folder), and a `.pth` file's
    folder lines ((None, folder): packages below it). A `.pth` line that imports something is not followed."""
    import ast

    out: list[tuple[str | None, str]] = []
    for site in site_dirs:
        try:
            names = sorted(os.listdir(site))
        except OSError:
            continue
        for name in names:
            finder = name.startswith("__editable__") and name.endswith("_finder.py")
            if not finder and not name.endswith(".pth"):
                continue
            path = Path(site) / name
            if finder and is_regular_file(path):
                try:
                    tree = ast.parse(read_text_bounded(path, _MAX_PTH, errors="replace"))
                except (Unreadable, SyntaxError, ValueError, RecursionError):
                    continue
                out += [(pkg, folder) for pkg, folder in _mapping(tree)]
            elif name.endswith(".pth") and is_regular_file(path):
                try:
                    lines = read_text_bounded(path, _MAX_PTH, errors="replace").splitlines()
                except Unreadable:
                    continue
                for line in lines:
                    line = line.strip()
                    if line and not line.startswith(("#", "import ", "import\t")):
                        out.append((None, os.path.join(site, line)))
    return tuple(out)


_MAX_PTH = 256 * 1024


def _mapping(tree) -> list[tuple[str, str]]:
    import ast

    for node in tree.body:
        target = (
            node.targets[0]
            if isinstance(node, ast.Assign) and len(node.targets) == 1
            else getattr(node, "target", None)
        )
        if isinstance(target, ast.Name) and target.id == "MAPPING" and isinstance(node.value, ast.Dict):
            try:
                mapping = ast.literal_eval(node.value)
            except ValueError:
                return []
            return [(k, v) for k, v in mapping.items() if isinstance(k, str) and isinstance(v, str)]
    return []


# --- the version check a framework runs as it starts ------------------------------------------------------------


def _with_version_gates(script: ScriptFacts, site_dirs: tuple[str, ...], installed: dict[str, str]) -> ScriptFacts:
    """The start-up version check of each framework the job runs (knowledge/version_gates.py), at the release it
    runs: read from the installed framework's source, else from the doctor's table for a pinned or given release."""
    if script.stack is None:
        return script
    gates, unknowns = [], []
    for package, relative in GATED.items():
        have = script.stack.get(package)
        if not runs_framework(script, package, have.version):
            continue
        if not have.exact:
            unknowns.append(
                Unknown(
                    f"{family_of(package)}'s start-up version check",
                    f"{have.describe()}: the release the job runs is not known; install it where the doctor reads "
                    "versions (--python) or pin it with ==",
                )
            )
            continue
        gate = None
        here = installed.get(package) == have.version and bool(site_dirs)  # the environment read is the framework's
        if here:
            requirements, disable = _installed_gate(site_dirs, relative)
            if requirements:
                where = f"{package} {have.version} (installed) {relative}"
                gate = VersionGate(package, have.version, tuple(requirements), disable, where)
        if gate is None:
            gate = shipped_gate(package, have.version)
        if gate is not None:
            gates.append(replace(gate, installed=here))
        else:
            unknowns.append(
                Unknown(
                    f"{family_of(package)}'s start-up version check",
                    f"{package} {have.version} is neither installed where the doctor looks nor a release in its "
                    "table: its check_dependencies() was not read",
                )
            )
    if gates:
        script = replace(script, stack=replace(script.stack, version_gates=tuple(gates)))
    return replace(script, unknowns=script.unknowns + tuple(unknowns)) if unknowns else script


@reads.remembered
def _installed_gate(site_dirs: tuple[str, ...], relative: str) -> tuple[list[GateRequirement], tuple[str, ...]]:
    text = _text(site_dirs, relative)
    return read_version_gate(text) if text is not None else ([], ())


# --- which model types the installed transformers builds itself -----------------------------------------------

AUTO_MODULE = "transformers/models/auto/modeling_auto.py"


def _with_native_models(script: ScriptFacts, site_dirs: tuple[str, ...], installed: dict[str, str]) -> ScriptFacts:
    asked = {
        (c.auto_class, checkpoint.model_type)
        for checkpoint in script.checkpoints.values()
        for c in checkpoint.remote_classes
        if checkpoint.model_type
    }
    if not asked or script.stack is None:
        return script
    version = script.stack.get("transformers").version
    mappings, where = None, ""
    if version and installed.get("transformers") == version and site_dirs:
        mappings, where = _auto_mappings(site_dirs, version), "installed"
    if mappings is None and version:
        mappings, where = _shipped(version), f"the doctor's table of {table_key('transformers', version)}"
    if mappings is None:
        return script
    found = {}
    for auto_class, model_type in sorted(asked):
        if auto_class in mappings:
            types, line = mappings[auto_class]
            found[native_model_key(auto_class, model_type)] = LibraryBehaviour(
                model_type in types,
                f"transformers {version} ({where}) models/auto/modeling_auto.py" + (f":{line}" if line else ""),
            )
    if not found:
        return script
    return replace(script, stack=replace(script.stack, behaviours={**script.stack.behaviours, **found}))


@lru_cache(maxsize=1)
def shipped_auto_mappings() -> dict:
    """data/auto_mappings.json (tools/gen_auto_mappings.py): for each Auto class, the releases (by minor, as
    signatures.json reads them) whose mapping holds each model type, for a job whose transformers is not
    installed where the doctor looks."""
    path = Path(__file__).resolve().parent.parent / "knowledge" / "data" / "auto_mappings.json"
    return json.loads(path.read_text(encoding="utf-8"))


def _shipped(version: str) -> dict[str, tuple[frozenset[str], int]] | None:
    """The mappings of the minor release `version` belongs to, or None outside the releases read."""
    data = shipped_auto_mappings()
    minors = data["minors"]
    key = table_key("transformers", version)
    if key not in minors:
        return None
    at = minors.index(key)
    return {
        name: (
            frozenset(t for t, (first, last) in types.items() if first <= at and (last is None or at <= last)),
            0,
        )
        for name, types in data["classes"].items()
    }


@reads.remembered
def _auto_mappings(site_dirs: tuple[str, ...], version: str) -> dict[str, tuple[frozenset[str], int]] | None:
    """Auto class -> (the model types its mapping holds, the line of that mapping), from the content cache while
    modeling_auto.py is unchanged."""
    return content_cache.cached(
        "auto-mappings", (site_dirs, version), None, lambda: _read_auto_mappings(site_dirs), returns=(dict, type(None))
    )


def _read_auto_mappings(site_dirs: tuple[str, ...]) -> dict[str, tuple[frozenset[str], int]] | None:
    """`class AutoModelForCausalLM: _model_mapping = MODEL_FOR_CAUSAL_LM_MAPPING`, that a
    `_LazyAutoMapping(CONFIG_MAPPING_NAMES, MODEL_FOR_CAUSAL_LM_MAPPING_NAMES)`, that an OrderedDict of
    (model type, class name) pairs: read as text, never imported."""
    text = _text(site_dirs, AUTO_MODULE)
    return auto_mappings_of(text) if text is not None else None


def auto_mappings_of(text: str) -> dict[str, tuple[frozenset[str], int]] | None:
    """modeling_auto.py's text -> Auto class -> (its model types, the line of its mapping)."""
    import ast

    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError):
        return None
    names: dict[str, tuple[frozenset[str], int]] = {}  # X_MAPPING_NAMES -> its model types
    lazy: dict[str, str] = {}  # X_MAPPING -> X_MAPPING_NAMES
    out: dict[str, tuple[frozenset[str], int]] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            target, value = node.targets[0].id, node.value
            if not isinstance(value, ast.Call) or not isinstance(value.func, ast.Name):
                continue
            if value.func.id == "OrderedDict" and value.args:
                try:
                    pairs = ast.literal_eval(value.args[0])
                except ValueError:
                    continue
                names[target] = (frozenset(p[0] for p in pairs if isinstance(p, tuple) and p), node.lineno)
            elif value.func.id == "_LazyAutoMapping" and len(value.args) == 2 and isinstance(value.args[1], ast.Name):
                lazy[target] = value.args[1].id
        elif isinstance(node, ast.ClassDef):
            for stmt in node.body:
                if (
                    isinstance(stmt, ast.Assign)
                    and len(stmt.targets) == 1
                    and isinstance(stmt.targets[0], ast.Name)
                    and stmt.targets[0].id == "_model_mapping"
                    and isinstance(stmt.value, ast.Name)
                    and lazy.get(stmt.value.id) in names
                ):
                    out[node.name] = names[lazy[stmt.value.id]]
    return out or None
