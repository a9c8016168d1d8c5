"""Versions of the ML stack each script trains with, and what the installed libraries do: read from package
metadata and source files of the training environment (never by importing the packages or running its Python).

Per script, in this order: a version given on the command line; the one installed in the training environment
(`--python`, else VIRTUAL_ENV / CONDA_PREFIX, else this interpreter when it has the ML stack); the one the
script's own project declares (probes/versions.py); else the current release (CURRENT).
"""

from __future__ import annotations

import os
import re
import sys
import weakref
from collections.abc import Mapping
from functools import lru_cache
from pathlib import Path

from ..knowledge.versions import CURRENT, TRAINER_SKIPS_DP_FOR_4BIT
from ..model.facts import LibraryBehaviour, PackageVersion, StackFacts, VersionSource
from ..model.util import record
from ..system import content_cache, reads
from ..system.notebooks import is_notebook
from ..system.sources import Unreadable, is_regular_file, read_prefix, read_text_bounded
from .versions import TRACKED, canonical_name, declared_for, declared_in_folder, notebook_requirements

_ML_STACK = ("torch", "transformers")  # an environment without either is not where training runs


@record
class Environment:
    """The Python environment training runs in: its site-packages folders, and how it was found."""

    label: str  # for people: "/venvs/train (--python)"
    site_dirs: tuple[str, ...]

    @property
    def folder(self) -> str:
        return self.label.split(" (", 1)[0]


def training_environment(python: str | None = None, environ: Mapping[str, str] | None = None) -> Environment | None:
    """Where training runs: `--python PATH`, else VIRTUAL_ENV / CONDA_PREFIX, else this interpreter when it has
    the ML stack. Found from the folder layout and `pyvenv.cfg`; the interpreter is never run. None: no
    environment with the ML stack is known (versions then come from the projects' declarations)."""
    environ = os.environ if environ is None else environ
    if python:
        prefix = _prefix_of(Path(python))
        return Environment(f"{prefix} (--python)", _site_dirs(prefix))
    for var in ("VIRTUAL_ENV", "CONDA_PREFIX"):
        if environ.get(var):
            prefix = Path(environ[var])
            env = Environment(f"{prefix} (${var})", _site_dirs(prefix))
            if _has_ml_stack(env.site_dirs):
                return env
    here = tuple(p for p in sys.path if p and Path(p).is_dir())
    if _has_ml_stack(here):
        return Environment(f"{sys.prefix} (the doctor's own environment)", here)
    return None


def _prefix_of(python: Path) -> Path:
    """The environment a Python executable belongs to: bin/python -> the folder above bin (Scripts on Windows);
    a folder is taken as the environment itself."""
    if python.is_dir():
        return python
    parent = python.parent
    return parent.parent if parent.name in ("bin", "Scripts") else parent


# Where an interpreter's packages live below its prefix: site-packages, and the dist-packages Debian, Ubuntu and the
# images built on them (NGC, CUDA) use for the system Python (their site.py adds /usr/local/lib/python3.X/
# dist-packages, /usr/lib/python3/dist-packages and /usr/lib/python3.X/dist-packages for the prefix /usr)
_PACKAGE_FOLDERS = (
    "lib/python3*/site-packages",
    "local/lib/python3*/dist-packages",
    "lib/python3/dist-packages",
    "lib/python3*/dist-packages",
)


def _package_dirs(prefix: Path) -> list[Path]:
    try:
        found = [p for pattern in _PACKAGE_FOLDERS for p in sorted(prefix.glob(pattern)) if p.is_dir()]
        return found + [p for p in (prefix / "Lib" / "site-packages",) if p.is_dir()]  # Windows
    except (OSError, ValueError):  # a name too long, a NUL byte: no environment there
        return []


def _user_site_dirs() -> list[Path]:
    """The user's own site-packages (`pip install --user`: $PYTHONUSERBASE, else ~/.local), which a system or conda
    interpreter, and a virtualenv that includes the system site-packages, put on sys.path (site.ENABLE_USER_SITE)."""
    if os.environ.get("PYTHONNOUSERSITE"):
        return []
    try:
        base = Path(os.environ.get("PYTHONUSERBASE") or Path.home() / ".local")
        return [p for p in sorted(base.glob("lib/python3*/site-packages")) if p.is_dir()]
    except (OSError, RuntimeError, ValueError):  # no home, a name too long
        return []


def _site_dirs(prefix: Path) -> tuple[str, ...]:
    """The package folders of an environment (lib/pythonX.Y/site-packages, Lib/site-packages, a system Python's
    dist-packages), plus the base interpreter's when pyvenv.cfg includes the system site-packages, and the user's
    own where the interpreter reads them."""
    found = _package_dirs(prefix)
    cfg = prefix / "pyvenv.cfg"
    if not is_regular_file(cfg):  # a system or conda interpreter
        return tuple(str(p) for p in found + _user_site_dirs())
    try:
        settings = dict(
            line.split("=", 1) for line in read_text_bounded(cfg, errors="replace").splitlines() if "=" in line
        )
    except Unreadable:
        settings = {}
    settings = {k.strip(): v.strip() for k, v in settings.items()}
    if settings.get("include-system-site-packages", "").lower() == "true" and settings.get("home"):
        try:
            found += _package_dirs(_prefix_of(Path(settings["home"]) / "python"))
        except (OSError, ValueError):  # a home no folder could be
            pass
        found += _user_site_dirs()
    return tuple(str(p) for p in found)


def _has_ml_stack(site_dirs: tuple[str, ...]) -> bool:
    found = installed_versions(site_dirs)
    return any(name in found for name in _ML_STACK)


@lru_cache(maxsize=16)
def installed_versions(site_dirs: tuple[str, ...]) -> dict[str, str]:
    """The tracked distributions' versions in these folders, from their metadata (METADATA / PKG-INFO; no package
    is imported). The folders are searched as importlib.metadata searches them, the first found of a name wins; only
    the metadata folders named after a tracked distribution are opened (an environment holds hundreds)."""
    wanted = set(TRACKED)
    found: dict[str, str] = {}
    for info in _metadata_folders(site_dirs, {_folder_key(n) for n in wanted}):
        try:
            name, version = _name_and_version(info)
            name = canonical_name(name or "")
        except (KeyError, TypeError, ValueError):
            continue
        if name in wanted and name not in found and version:
            found[name] = version
    return found


def _folder_key(name: str) -> str:
    """A distribution's name as importlib.metadata files its metadata folder (`Transformer.Engine` and
    `transformer-engine-1.0.dist-info` both give "transformer_engine")."""
    return canonical_name(name).replace("-", "_")


def _metadata_folders(site_dirs: tuple[str, ...], keys: set[str]) -> list[Path]:
    """The `*.dist-info` / `*.egg-info` entries (and an .egg folder's EGG-INFO) of these folders whose name gives one
    of `keys`, in the order importlib.metadata.distributions(path=...) yields them: folder by folder, grouped by name
    in the order each name is first listed, egg folders last."""
    out: list[Path] = []
    for folder in site_dirs:
        try:
            children = os.listdir(folder or ".")
        except OSError:
            continue
        base = os.path.basename(folder).lower()
        infos: dict[str, list[Path]] = {}
        eggs: list[Path] = []
        for child in children:
            low = child.lower()
            if low.endswith((".dist-info", ".egg-info")):
                key = _folder_key(low.rpartition(".")[0].partition("-")[0])
                infos.setdefault(key, []).append(Path(folder, child))
            elif base.endswith(".egg") and low == "egg-info":
                key = base.rpartition(".")[0].partition("-")[0].lower().replace("-", "_")
                if key in keys:
                    eggs.append(Path(folder, child))
        out += [path for key, paths in infos.items() if key in keys for path in paths] + eggs
    return out


MAX_METADATA_HEAD = 1024 * 1024  # bytes of METADATA read: its headers come first, the long description after


def _name_and_version(info: Path) -> tuple[str | None, str | None]:
    """The Name and Version headers of a distribution's metadata, from a bounded read of a regular file only (a
    FIFO or a link to /dev/zero in an environment neither hangs nor fills memory). Installers write plain
    `Key: value` lines, read here directly; anything else goes to the email parser importlib.metadata uses."""
    for candidate in (info / "METADATA", info / "PKG-INFO", info):
        try:
            data = read_prefix(candidate, MAX_METADATA_HEAD)
        except (OSError, Unreadable):
            continue
        end = data.find(b"\n\n")
        try:
            text = (data[: end + 1] if end >= 0 else data).decode("utf-8")
        except UnicodeDecodeError:
            continue
        if text:
            plain = _plain_headers(text)
            if plain is not None:
                return plain.get("name"), plain.get("version")
            from email.parser import HeaderParser

            headers = HeaderParser().parsestr(text)
            return headers["Name"], headers["Version"]
    return None, None


_HEADER_NAME = re.compile(r"[\x21-\x39\x3b-\x7e]+\Z")  # what the email parser takes for a header's name


def _plain_headers(text: str) -> dict[str, str] | None:
    """The first Name and Version of a header block of plain `Key: value` lines; None when the block holds
    anything else (a folded line, a line without a colon, a carriage return, a "From " line)."""
    found: dict[str, str] = {}
    for line in text.split("\n"):
        if not line:
            return found
        if "\r" in line or line[0] in " \t" or ":" not in line or line.startswith("From "):
            return None
        key, value = line.split(":", 1)
        if not _HEADER_NAME.match(key):
            return None
        key = key.lower()
        if key in ("name", "version") and key not in found:
            found[key] = value.lstrip(" \t")
    return found


class StackResolver:
    """Each script's stack, for one run: the environment is read once, each project's declarations once."""

    def __init__(self, overrides: dict[str, str] | None = None, environment: Environment | None = None):
        self.overrides = {canonical_name(k): v for k, v in (overrides or {}).items()}
        self.environment = None if overrides else environment
        self.installed = installed_versions(self.environment.site_dirs) if self.environment else {}
        # once per run, each value served with the reads behind it (a cached answer that used it records them);
        # through a weak reference, so a resolver is freed without the cyclic collector
        me = weakref.ref(self)
        self.behaviours = reads.remembered(lambda: me()._behaviours())  # type: ignore[union-attr]
        self._folder_stack = reads.remembered(lambda folder: me()._stack_of_folder(folder))  # type: ignore[union-attr]

    @property
    def identity(self) -> tuple:
        """What decides this resolver's answers besides the files it reads: the versions given, and the
        environment read (as the stack names it: two environments may share their package folders) with the
        versions installed there."""
        where = (self.environment.label, self.environment.site_dirs) if self.environment else ()
        return (tuple(sorted(self.overrides.items())), where, tuple(sorted(self.installed.items())))

    def _behaviours(self) -> dict[str, LibraryBehaviour]:
        if self.environment and "transformers" in self.installed:
            return installed_behaviours(self.installed["transformers"], self.environment.site_dirs)
        return {}

    def environment_stack(self) -> StackFacts:
        """The stack of no particular project: given, installed, else current."""
        return self._stack({})

    def for_script(self, script: Path) -> StackFacts:
        """The stack of the script's project (one per folder: its scripts declare through the same files)."""
        found = self._folder_stack(os.path.dirname(os.path.abspath(script)))
        if is_notebook(script) and not self.overrides:  # what its own `!pip install` lines install
            pins = content_cache.cached(
                "notebook-pins", (os.fspath(script),), None, lambda: notebook_requirements(Path(script)), returns=dict
            )
            pinned = {n for n, d in pins.items() if d.spec}  # `pip install x` keeps an installed x
            if pins:
                return self._stack({**declared_for(script, TRACKED), **pins}, over_installed=pinned)
        return found

    def _stack_of_folder(self, folder: str) -> StackFacts:
        # only what neither --stack nor the environment decides is read from the project's files
        wanted = () if self.overrides else tuple(n for n in TRACKED if n not in self.installed)
        return self._stack(declared_in_folder(folder, wanted))

    def _stack(self, declared: dict, over_installed: set[str] | frozenset[str] = frozenset()) -> StackFacts:
        packages: dict[str, PackageVersion] = {}
        where = self.environment.folder if self.environment else ""
        for name in TRACKED:
            if name in self.overrides:
                packages[name] = PackageVersion(name, self.overrides[name], VersionSource.GIVEN)
            elif name in self.installed and name not in over_installed:
                packages[name] = PackageVersion(name, self.installed[name], VersionSource.INSTALLED, origin=where)
            elif name in declared:
                decl = declared[name]
                version, how = decl.resolve()
                if version:
                    packages[name] = PackageVersion(
                        name, version, VersionSource.DECLARED, spec=decl.spec, origin=f"{how}, {_short(decl.file)}"
                    )
                elif name in CURRENT:
                    packages[name] = PackageVersion(
                        name, CURRENT[name], VersionSource.ASSUMED, spec=decl.spec, origin=f"{how}, {_short(decl.file)}"
                    )
                else:  # declared at a release the doctor cannot name: the job still has the package
                    packages[name] = PackageVersion(
                        name, "", VersionSource.DECLARED, spec=decl.spec, origin=f"{how}, {_short(decl.file)}"
                    )
            elif name in CURRENT:
                packages[name] = PackageVersion(name, CURRENT[name], VersionSource.ASSUMED)
        return StackFacts(packages=packages, behaviours=self.behaviours())


def _short(path: str) -> str:
    """A dependency file as `project/requirements.txt`: the file and its folder."""
    p = Path(path)
    return f"{p.parent.name}/{p.name}" if p.parent.name else p.name


def probe_stack(
    script: Path | None = None, overrides: dict[str, str] | None = None, environment: Environment | None = None
) -> StackFacts:
    """One stack: the script's (its project's declarations under the environment), or the environment's."""
    if environment is None and not overrides:
        environment = training_environment()
    resolver = StackResolver(overrides, environment)
    return resolver.for_script(script) if script is not None else resolver.environment_stack()


def installed_behaviours(
    transformers_version: str, site_dirs: tuple[str, ...] | list[str] | None = None
) -> dict[str, LibraryBehaviour]:
    """Read from the training environment's transformers/trainer.py (sys.path when no folders are given), once per
    run: does `_wrap_model` exempt 4-bit models from DataParallel? Nothing is recorded when the file cannot be
    found or read."""
    for entry in sys.path if site_dirs is None else site_dirs:
        candidate = Path(entry or ".") / "transformers" / "trainer.py"
        if not is_regular_file(candidate):
            continue
        try:
            lines = read_text_bounded(candidate, 8 * 1024 * 1024, errors="replace").split("\n")
        except Unreadable:
            return {}
        start = next((i for i, line in enumerate(lines) if line.lstrip().startswith("def _wrap_model")), None)
        if start is None:
            return {}
        body = lines[start : start + 60]
        hit = next((i for i, line in enumerate(body) if "is_loaded_in_4bit" in line), None)
        where = start + (hit if hit is not None else 0) + 1
        shown = (body[hit] if hit is not None else body[0]).strip()
        return {
            TRAINER_SKIPS_DP_FOR_4BIT: LibraryBehaviour(
                hit is not None, f"transformers {transformers_version} trainer.py:{where}  {shown[:120]}"
            )
        }
    return {}
