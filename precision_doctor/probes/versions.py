"""The versions a script's own project declares, read from its dependency files (never by running them).

From the script's folder up to its repository root (the first folder holding `.git`, else the filesystem root):
`requirements*.txt`, `pyproject.toml` (PEP 621 dependencies and optional-dependencies, Poetry), `setup.cfg`,
`setup.py` (`install_requires=` where it is a literal, read with `ast`), `environment.yml`. The nearest file that
names a package decides it. A range is decided against what a fresh install of it gets today: the newest release
in KNOWN_RELEASES that the range allows.
"""

from __future__ import annotations

import ast
import os
import re
from pathlib import Path

from ..knowledge.versions import canonical_name
from ..model.python_source import literal, parse_quietly
from ..model.util import record
from ..system import reads
from ..system.sources import Unreadable, is_regular_file, parse_toml, read_text_bounded
from ..system.walk import repository_root


def _minors(major: int, first: int, last: int, newest: str = "") -> tuple[str, ...]:
    out = [f"{major}.{m}.0" for m in range(first, last + 1)]
    if newest:
        out[-1] = newest
    return tuple(out)


# Releases of the tracked packages, oldest first: what a fresh install of a range can get. Minor releases are
# listed as x.y.0 (every version boundary the rules use is a minor release); the newest is the one the rules were
# checked against (probes/stack.py CURRENT).
KNOWN_RELEASES: dict[str, tuple[str, ...]] = {
    "torch": ("1.8.1", "1.9.1", "1.10.2", "1.11.0", "1.12.1", "1.13.1") + _minors(2, 0, 13),
    "transformers": _minors(4, 20, 57) + _minors(5, 0, 23),
    "accelerate": _minors(0, 15, 34) + _minors(1, 0, 15),
    "peft": _minors(0, 2, 21, "0.21.2"),
    "bitsandbytes": _minors(0, 35, 50),
    "trl": _minors(0, 4, 29) + _minors(1, 0, 16),
    "deepspeed": _minors(0, 8, 18),
}

# The packages whose declarations are read: a dependency file's other lines are skipped before parsing.
TRACKED = (
    "torch",
    "transformers",
    "accelerate",
    "peft",
    "bitsandbytes",
    "trl",
    "deepspeed",
    "transformer-engine",
    "torchao",
    "torchtune",  # `tune run`'s rendezvous (knowledge/launchers.py)
    # the recipe frameworks, and the optional packages their checks ask for (knowledge/recipe_checks): where the
    # framework is installed in the environment read, that environment is the job's
    "axolotl",
    "llamafactory",
    "flash-attn",
    "ring-flash-attn",
    "liger-kernel",
    "unsloth",
    "galore-torch",
    "apollo-torch",
    "badam",
    "adam-mini",
    "megatron-bridge",
    "kt-kernel",
    "datasets",  # LLaMA-Factory's start-up check ranges it (knowledge/version_gates.py)
    "transformers-kt",
    "accelerate-kt",
    "ms-amp",
    "gptqmodel",
    "autoawq",
    "torch-npu",  # Ascend's PyTorch adapter: an environment with it runs on NPUs (transformers is_torch_npu_available)
)
_NAME = re.compile(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)")
_CONDA_NAMES = {"pytorch": "torch"}  # conda package names that differ from the Python distribution


@record
class Declared:
    """One package as a dependency file names it."""

    name: str  # canonical: "transformers"
    spec: str  # the specifier as written, normalised: ">=4.28", "==4.31.0", "" (any)
    file: str  # the dependency file, as a path

    def resolve(self) -> tuple[str, str]:
        """(version, how): the exact pin, else the newest known release the range allows; ("", why) when
        neither can be said."""
        from packaging.specifiers import InvalidSpecifier, SpecifierSet
        from packaging.version import Version

        try:
            spec = SpecifierSet(self.spec)
        except InvalidSpecifier:
            return "", f"cannot read {self.spec!r}"
        exact = [s.version for s in spec if s.operator in ("==", "===") and "*" not in s.version]
        if exact:
            return exact[0], "pinned"
        known = KNOWN_RELEASES.get(self.name, ())
        allowed = [v for v in known if spec.contains(v, prereleases=True)]
        if allowed:
            return max(allowed, key=Version), "newest allowed"
        floors = [s.version for s in spec if s.operator in (">=", "~=", ">")]
        if floors:
            return floors[0], "lower bound; no newer release known"
        return "", "no known release satisfies it"


def project_root(start: Path) -> Path:
    """The first folder from `start` up that holds `.git`, else the filesystem root."""
    here = Path(os.path.abspath(start))  # not resolve(): a link loop among the scripts must not stop the run
    repo = repository_root(str(here))
    return Path(repo) if repo else (here.parents[-1] if here.parents else here)


def declared_for(script: Path, names: tuple[str, ...] = TRACKED) -> dict[str, Declared]:
    """Each of these tracked packages the script's project declares, the nearest dependency file first."""
    return declared_in_folder(os.path.dirname(os.path.abspath(script)), names)


def declared_in_folder(folder: str, names: tuple[str, ...] = TRACKED) -> dict[str, Declared]:
    """Each of these tracked packages a project declares for the scripts of this folder."""
    if not names:
        return {}
    return dict(_declared_from(Path(folder), project_root(Path(folder)), names))


@reads.remembered  # a cached answer that used a declaration records the files it was read from
def _declared_from(folder: Path, root: Path, names: tuple[str, ...]) -> tuple[tuple[str, Declared], ...]:
    found: dict[str, Declared] = {}
    for d in (folder, *folder.parents):
        for name, decl in _declared_in(d, names):
            found.setdefault(name, decl)
        if d == root:
            break
    return tuple(found.items())


@reads.remembered
def _declared_in(folder: Path, names: tuple[str, ...]) -> tuple[tuple[str, Declared], ...]:
    found: dict[str, Declared] = {}
    try:
        requirement_files = sorted(p for p in folder.glob("requirements*.txt"))
    except OSError:
        requirement_files = []
    requirement_files.sort(key=lambda p: p.name != "requirements.txt")  # the main file first
    readers = [(p, _requirements_file) for p in requirement_files] + [
        (folder / "pyproject.toml", _pyproject),
        (folder / "setup.cfg", _setup_cfg),
        (folder / "setup.py", _setup_py),
        (folder / "environment.yml", _environment_yml),
        (folder / "environment.yaml", _environment_yml),
    ]
    for path, reader in readers:
        if not is_regular_file(path):
            continue
        try:
            text = read_text_bounded(path, errors="replace")
        except Unreadable:
            continue
        for line in reader(text, path):
            named = _NAME.match(line)
            if named is None or canonical_name(named.group(1)) not in names:
                continue  # (a full requirement parse is most of the time here, and only these are used)
            decl = _parse(line, str(path))
            if decl is not None:
                found.setdefault(decl.name, decl)
    return tuple(found.items())


def _parse(text: str, file: str) -> Declared | None:
    text = text.strip()
    if not text or text.startswith(("#", "-", "git+", "http:", "https:", "file:")):
        return None
    from packaging.markers import InvalidMarker, UndefinedComparison, UndefinedEnvironmentName
    from packaging.requirements import InvalidRequirement, Requirement

    try:
        req = Requirement(text)
    except InvalidRequirement:
        return None
    if req.marker is not None:
        try:
            if not req.marker.evaluate({"extra": ""}):
                return None
        except (InvalidMarker, UndefinedEnvironmentName, UndefinedComparison):
            pass
    return Declared(canonical_name(req.name), str(req.specifier), file)


_PIP_VALUE_OPTIONS = {
    "-r",
    "--requirement",
    "-c",
    "--constraint",
    "-i",
    "--index-url",
    "--extra-index-url",
    "-f",
    "--find-links",
    "-t",
    "--target",
    "--prefix",
    "--root",
    "-e",
    "--editable",
    "--python",
    "-p",
}


def notebook_requirements(path: Path, names: tuple[str, ...] = TRACKED) -> dict[str, Declared]:
    """What a notebook's own `!pip install` / `%pip install` lines install (`transformers==4.11.3`,
    `"trl<0.9"`): the versions it runs with, whatever the machine it is checked on has."""
    from ..system.sources import read_notebook

    try:
        lines = read_notebook(path).magics
    except (Unreadable, OSError):
        return {}
    found: dict[str, Declared] = {}
    where = f"{path.name} (pip install)"
    for line in lines:
        words = re.findall(r"\"[^\"]*\"|'[^']*'|\S+", line.strip().lstrip("!%"))
        words = [w.strip("\"'") for w in words]
        if "install" not in words or not any(w in ("pip", "pip3", "uv") or w.endswith("/pip") for w in words):
            continue
        skip = False
        for word in words[words.index("install") + 1 :]:
            if skip:
                skip = False
                continue
            if word in _PIP_VALUE_OPTIONS:
                skip = True
                continue
            if word.startswith("-") or word in ("&&", ";", "|"):
                if word in ("&&", ";", "|"):
                    break
                continue
            named = _NAME.match(word)
            if named is None or canonical_name(named.group(1)) not in names:
                continue
            decl = _parse(word, where)
            if decl is not None:
                found[decl.name] = decl  # a later install wins
    return found


MAX_REQUIREMENT_LINE = 8 * 1024


def _without_comment(line: str) -> str:
    """The line up to a `#` that starts a comment (at the start, or after whitespace), as pip reads it; linear."""
    at = line.find("#")
    while at > 0 and not line[at - 1].isspace():
        at = line.find("#", at + 1)
    return line if at < 0 else line[:at]


def _requirements_file(text: str, path: Path, depth: int = 0, seen: set[str] | None = None) -> list[str]:
    """The requirement lines of a requirements file with its `-r` includes (three deep), each file read once however
    often it is included (a file that includes itself 300 times is read once)."""
    seen = {os.path.realpath(path)} if seen is None else seen
    out: list[str] = []
    for raw in text.splitlines():
        if len(raw) > MAX_REQUIREMENT_LINE:
            continue  # no requirement is that long; the parsers are not linear on one that is
        line = _without_comment(raw).strip()
        include = re.match(r"^(?:-r|--requirement)\s*=?\s*(\S+)", line)
        if include and depth < 3:
            nested = path.parent / include.group(1)
            try:
                real = os.path.realpath(nested)
            except (OSError, ValueError):  # a NUL byte, a name too long: no file pip could read either
                continue
            if real not in seen and is_regular_file(nested):
                seen.add(real)
                try:
                    out.extend(_requirements_file(read_text_bounded(nested, errors="replace"), nested, depth + 1, seen))
                except Unreadable:
                    pass
            continue
        out.append(line)
    return out


def _pyproject(text: str, path: Path) -> list[str]:
    try:
        data = parse_toml(text)
    except ValueError:
        return []
    out: list[str] = []
    project = _table(data.get("project"))
    out.extend(s for s in _array(project.get("dependencies")) if isinstance(s, str))
    for group in _table(project.get("optional-dependencies")).values():
        out.extend(s for s in _array(group) if isinstance(s, str))
    poetry = _table(_table(data.get("tool")).get("poetry"))
    tables = [_table(poetry.get("dependencies"))]
    tables += [_table(_table(g).get("dependencies")) for g in _table(poetry.get("group")).values()]
    for table in tables:
        out.extend(_poetry(name, value) for name, value in table.items() if name != "python")
    return out


def _table(value) -> dict:
    """A TOML table where one is expected; anything else (a project's typo, a hostile file) is an empty one."""
    return value if isinstance(value, dict) else {}


def _array(value) -> list:
    return value if isinstance(value, list) else []


def _poetry(name: str, value) -> str:
    """A Poetry constraint ("^4.31", "~2.1", "*", {version = ...}) as a PEP 508 requirement."""
    if isinstance(value, dict):
        value = value.get("version", "*")
    if isinstance(value, list):  # several constraints by marker: the first
        value = value[0].get("version", "*") if value and isinstance(value[0], dict) else "*"
    spec = str(value).strip()
    parts = []
    for piece in spec.split(","):
        piece = piece.strip()
        if piece in ("", "*"):
            continue
        if piece[0] in "^~" and piece[1:2] != "=":
            nums = [int(n) for n in re.findall(r"\d+", piece)[:3]] or [0]
            if piece[0] == "^":
                i = next((k for k, n in enumerate(nums) if n), len(nums) - 1)
                upper = nums[:i] + [nums[i] + 1]
            else:
                upper = [nums[0], nums[1] + 1] if len(nums) > 1 else [nums[0] + 1]
            parts += [f">={'.'.join(map(str, nums))}", f"<{'.'.join(map(str, upper))}"]
        elif piece[0].isdigit():
            parts.append(f"=={piece}")
        else:
            parts.append(piece)
    return f"{name}{','.join(parts)}"


def _setup_cfg(text: str, path: Path) -> list[str]:
    import configparser

    parser = configparser.ConfigParser(interpolation=None)
    try:
        parser.read_string(text)
    except configparser.Error:
        return []
    out = []
    if parser.has_option("options", "install_requires"):
        out.extend(parser.get("options", "install_requires").splitlines())
    if parser.has_section("options.extras_require"):
        for _, value in parser.items("options.extras_require"):
            out.extend(value.splitlines())
    return out


def _setup_py(text: str, path: Path) -> list[str]:
    """`install_requires=` / `extras_require=` of the `setup(...)` call, where they are literals (or names bound
    to literals at module level). Read, never run."""
    try:
        tree = parse_quietly(text)
    except (SyntaxError, ValueError, RecursionError):
        return []
    bound: dict[str, ast.AST] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            bound[node.targets[0].id] = node.value
    out: list[str] = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", "")) == "setup"):
            continue
        for kw in node.keywords:
            if kw.arg not in ("install_requires", "extras_require"):
                continue
            value = bound.get(kw.value.id, kw.value) if isinstance(kw.value, ast.Name) else kw.value
            try:
                listed = literal(value)
            except (ValueError, TypeError, SyntaxError, RecursionError):
                continue
            groups = listed.values() if isinstance(listed, dict) else [listed]
            for group in groups:
                if isinstance(group, (list, tuple)):
                    out.extend(s for s in group if isinstance(s, str))
    return out


def _environment_yml(text: str, path: Path) -> list[str]:
    """The `dependencies:` list of a conda environment file: conda entries (`pytorch=2.1`) and its `pip:` list."""
    out = []
    in_deps = False
    for raw in text.splitlines():
        if not raw.strip() or raw.lstrip().startswith("#"):
            continue
        if not raw.startswith((" ", "\t", "-")):
            in_deps = raw.split(":", 1)[0].strip() == "dependencies"
            continue
        item = raw.strip()
        if not in_deps or not item.startswith("- "):
            continue
        entry = item[2:].strip().strip("'\"")
        if entry.startswith("pip:") or "::" in entry and not entry.split("::", 1)[1]:
            continue
        entry = entry.split("::", 1)[-1]
        m = re.match(r"^([A-Za-z0-9_.\-]+)\s*(.*)$", entry)
        if not m:
            continue
        name, spec = m.group(1), m.group(2).split()[0] if m.group(2).strip() else ""
        name = _CONDA_NAMES.get(name.lower(), name)
        if re.match(r"^=[^=]", spec):  # conda's single '=' is a prefix match: 2.1 means 2.1.*
            spec = f"=={spec[1:]}" + ("" if spec.count(".") >= 2 or "*" in spec else ".*")
        out.append(name + spec)
    return out
