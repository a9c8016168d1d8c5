"""Build precision_doctor/knowledge/data/signatures.json: which keywords each release of transformers, TRL, peft,
sentence-transformers and LLaMA-Factory accepts in the classes and functions training scripts and recipes configure
(TrainingArguments, TRL's configs and trainers, ModelConfig, BitsAndBytesConfig, peft's configs, Trainer.__init__,
from_pretrained, LLaMA-Factory's hparams dataclasses).

    python tools/gen_signatures.py [--cache DIR] [--out FILE] [--only PACKAGE]

Each release's wheel is fetched with `pip download --no-deps` (kept in --cache, so a second run reads them from
there) and read with `ast` through precision_doctor/probes/library_source.py, the same reader the doctor uses on
an installed package; nothing is imported or installed. The table holds, per class, each own field or parameter
with the releases that accept it, its bases, and the renames a deprecation names (each checked: the new name is
accepted where the old one no longer is). One release per minor version is read, its last patch; a version is
looked up by its minor. LLaMA-Factory is read at every release and looked up by release (signatures.BY_PATCH).
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from precision_doctor.knowledge.signatures import table_key  # noqa: E402
from precision_doctor.probes.library_source import (  # noqa: E402
    CONFIG_FILE,
    LOADER_FUNCTIONS,
    Declaration,
    read_class,
    read_classes,
    read_loader,
    resolve_base,
)

# The last patch of every minor release: transformers 4.36 (the oldest the rules speak of) to the newest, TRL since
# its configs (0.9), peft since 0.7, sentence-transformers since its TrainingArguments (3.0; a few releases: its
# own fields are few and stable, what matters is the transformers underneath).
RELEASES = {
    "transformers": [
        "4.36.2",
        "4.37.2",
        "4.38.2",
        "4.39.3",
        "4.40.2",
        "4.41.2",
        "4.42.4",
        "4.43.4",
        "4.44.2",
        "4.45.2",
        "4.46.3",
        "4.47.1",
        "4.48.3",
        "4.49.0",
        "4.50.3",
        "4.51.3",
        "4.52.4",
        "4.53.3",
        "4.54.1",
        "4.55.4",
        "4.56.2",
        "4.57.6",
        "5.0.0",
        "5.1.0",
        "5.2.0",
        "5.3.0",
        "5.4.0",
        "5.5.4",
        "5.6.2",
        "5.7.0",
        "5.8.1",
        "5.9.0",
        "5.10.4",
        "5.11.0",
        "5.12.1",
        "5.13.1",
        "5.14.1",
        "5.15.1",
        "5.16.1",
        "5.17.0",
        "5.18.0",
        "5.19.0",
        "5.20.2",
        "5.21.1",
        "5.22.2",
        "5.23.0",
    ],
    "trl": [
        "0.9.6",
        "0.10.1",
        "0.11.4",
        "0.12.2",
        "0.13.0",
        "0.14.0",
        "0.15.2",
        "0.16.1",
        "0.17.0",
        "0.18.2",
        "0.19.1",
        "0.20.0",
        "0.21.0",
        "0.22.2",
        "0.23.1",
        "0.24.0",
        "0.25.1",
        "0.26.2",
        "0.27.2",
        "0.28.0",
        "0.29.1",
        "1.0.0",
        "1.1.0",
        "1.2.0",
        "1.3.0",
        "1.4.0",
        "1.5.1",
        "1.6.0",
        "1.7.1",
        "1.8.0",
        "1.9.2",
        "1.10.0",
        "1.11.0",
        "1.12.0",
        "1.13.0",
        "1.14.2",
        "1.15.0",
        "1.16.0",
    ],
    "peft": [
        "0.7.1",
        "0.8.2",
        "0.9.0",
        "0.10.0",
        "0.11.1",
        "0.12.0",
        "0.13.2",
        "0.14.0",
        "0.15.2",
        "0.16.0",
        "0.17.1",
        "0.18.1",
        "0.19.1",
        "0.20.0",
        "0.21.2",
    ],
    "sentence-transformers": ["3.0.1", "3.4.1", "4.1.0", "5.0.0", "5.7.0", "6.2.0"],
    # every release on PyPI: LLaMA-Factory adds and drops recipe keys in patch releases (0.9.0 to 0.9.5 span a year)
    "llamafactory": ["0.7.1", "0.8.0", "0.8.1", "0.8.2", "0.8.3", "0.9.0", "0.9.1", "0.9.2", "0.9.3", "0.9.4", "0.9.5"],
}

# transformers: named classes in known files (the module moved: the first path that exists is read).
TRANSFORMERS_CLASSES = {
    "TrainingArguments": ("transformers/training_args.py",),
    "Seq2SeqTrainingArguments": ("transformers/training_args_seq2seq.py",),
    "BitsAndBytesConfig": ("transformers/utils/quantization_config.py",),
    "Trainer": ("transformers/trainer.py",),
    "Seq2SeqTrainer": ("transformers/trainer_seq2seq.py",),
}

# Other packages: every class of these modules whose name matches.
DISCOVER = {
    "trl": (r"trl/.*\.py", r"\w*(?:Config|Trainer|Arguments)"),
    "peft": (r"peft/(?:config|tuners/.*config)\.py", r"\w*Config\w*"),
    "sentence-transformers": (r"sentence_transformers/.*\.py", r"\w*TrainingArguments"),
    # the dataclasses `llamafactory-cli train` fills from a recipe (hparams/parser.py), and their mixins
    "llamafactory": (r"llamafactory/hparams/\w+_args\.py", r"\w*Arguments?"),
}
IMPORT_NAMES = {
    "trl": "trl",
    "peft": "peft",
    "sentence-transformers": "sentence_transformers",
    "transformers": "transformers",
    "llamafactory": "llamafactory",
}

# Renames whose deprecation message the pattern below does not catch (each is still checked against the fields).
CURATED_RENAMES = {
    "transformers.Trainer": {"tokenizer": "processing_class"},
    "transformers.TrainingArguments": {
        "per_gpu_train_batch_size": "per_device_train_batch_size",
        "per_gpu_eval_batch_size": "per_device_eval_batch_size",
        "push_to_hub_token": "hub_token",
        "push_to_hub_model_id": "hub_model_id",
        "fp16_backend": "half_precision_backend",
        "include_inputs_for_metrics": "include_for_metrics",
        "no_cuda": "use_cpu",
    },
    "transformers.from_pretrained": {"use_auth_token": "token", "torch_dtype": "dtype"},
    "trl.ModelConfig": {"torch_dtype": "dtype"},
    # LLaMA-Factory 0.8.0 renamed its DPO settings for every preference stage (hparams/finetuning_args.py)
    "llamafactory.RLHFArguments": {"dpo_beta": "pref_beta", "dpo_ftx": "pref_ftx", "dpo_loss": "pref_loss"},
}
# Deprecations that name a successor which is not the same setting under a new name (the value moves into a dict,
# or means something else): never offered as a rename.
NOT_RENAMES = {
    ("transformers.TrainingArguments", "fsdp_min_num_params"),
    ("transformers.TrainingArguments", "fsdp_transformer_layer_cls_to_wrap"),
    ("trl.SFTConfig", "num_of_sequences"),
}
_DEPRECATION = re.compile(
    r"`?'?(\w+)'?`? (?:argument |parameter |field )?(?:is|are|has been|was) deprecated"
    r"[^\n]{0,200}?(?:[Uu]se|[Ii]n favou?r of|replaced by|renamed to|instead of) `?'?(\w+)'?`?"
)


def wheel(cache: Path, package: str, version: str) -> Path:
    dist = package.replace("-", "_")
    found = sorted(cache.glob(f"{dist}-{version}-*.whl"))
    if not found:
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--no-deps",
                "--quiet",
                "-d",
                str(cache),
                f"{package}=={version}",
            ],
            check=True,
        )
        found = sorted(cache.glob(f"{dist}-{version}-*.whl"))
    if not found:
        raise SystemExit(f"no wheel for {package}=={version} in {cache}")
    return found[0]


# What TrlParser does with a `--config` key no dataclass has, by the message its source raises it with.
TRL_CONFIG_KEYS = {
    "raises": "Unknown arguments from config file",  # 0.19+: fail_with_unknown_args=True
    "raises_legacy": "Some specified config arguments are not used by the TrlParser",
}  # <= 0.12


_TRANSFORMERS_CAP = re.compile(r"<=\s*([0-9][0-9.]*)")


def transformers_cap(path: Path) -> str:
    """The newest transformers a release allows (its METADATA's `Requires-Dist: transformers ...<=X`, the highest
    across platform markers, extras ignored): a fresh install of it resolves transformers no newer."""
    with zipfile.ZipFile(path) as z:
        name = next((n for n in z.namelist() if n.endswith(".dist-info/METADATA")), None)
        text = z.read(name).decode("utf-8", "replace") if name else ""
    caps = [
        m.group(1)
        for line in text.splitlines()
        if re.match(r"Requires-Dist:\s*transformers\s*[<>=!~(]", line) and "extra ==" not in line
        for m in _TRANSFORMERS_CAP.finditer(line)
    ]
    return max(caps, key=lambda v: tuple(int(p) for p in v.split(".") if p.isdigit()), default="")


def trl_parser_behaviour(path: Path) -> str:
    with zipfile.ZipFile(path) as z:
        for name in z.namelist():
            if name.endswith(".py") and name.startswith("trl/"):
                text = z.read(name).decode("utf-8", "replace")
                if "class TrlParser" in text:
                    return next((k for k, marker in TRL_CONFIG_KEYS.items() if marker in text), "ignores")
    return ""


def read_release(package: str, path: Path) -> tuple[dict[str, tuple[Declaration, str]], str]:
    """{class id: (its declaration, the file it is in)} for one wheel, and the text of its files (for the
    deprecation messages)."""
    out: dict[str, tuple[Declaration, str]] = {}
    texts: list[str] = []
    with zipfile.ZipFile(path) as z:
        names = set(z.namelist())

        def text(name: str) -> str:
            return z.read(name).decode("utf-8", "replace")

        if package == "transformers":
            for cls, files in TRANSFORMERS_CLASSES.items():
                for f in files:
                    if f in names:
                        t = text(f)
                        found = read_class(t, cls, "__init__" if cls.endswith("Trainer") else "")
                        if found is not None:
                            out[f"transformers.{cls}"] = (found, f)
                            texts.append(t)
                            break
            loader, config = read_loader(lambda f: text(f) if f in names else None)
            out["transformers.from_pretrained"] = (loader, LOADER_FUNCTIONS[0][0])
            if config is not None:
                out["transformers.PreTrainedConfig"] = (config, CONFIG_FILE)
            texts.extend(text(f) for f in {p for p, _, _ in LOADER_FUNCTIONS} if f in names)
            return out, "\n".join(texts)
        pattern, classes = DISCOVER[package]
        root = IMPORT_NAMES[package]
        for f in sorted(n for n in names if re.fullmatch(pattern, n) and "/tests/" not in n):
            t = text(f)
            found = read_classes(t, classes)
            if not found:
                continue
            texts.append(t)
            experimental = "/experimental/" in f
            for name, decl in found.items():
                key = f"{root}.experimental.{name}" if experimental else f"{root}.{name}"
                if key in out and _preferred(out[key][1]) <= _preferred(f):
                    continue
                out[key] = (decl, f)
    return out, "\n".join(texts)


def _preferred(path: str) -> int:
    """Where a class of a given name is taken from when several modules define one: its main module first."""
    return 0 if "/trainer/" in path or path.endswith("/config.py") else 1 if "/scripts/" in path else 2


def ranges(present: list[bool], minors: list[str]) -> str:
    """Releases as runs of minors: "4.36-4.45", "4.41-" (to the newest read), "4.36-4.40,4.45-"."""
    runs, start = [], None
    for i, ok in enumerate(present + [False]):
        if ok and start is None:
            start = i
        elif not ok and start is not None:
            end = i - 1
            runs.append(
                f"{minors[start]}-"
                if end == len(minors) - 1
                else minors[start]
                if start == end
                else f"{minors[start]}-{minors[end]}"
            )
            start = None
    return ",".join(runs)


def build(cache: Path, only: str = "", previous: dict | None = None) -> dict:
    """The table; with `only`, that package's classes read afresh and merged into `previous` (the other packages'
    classes, bases and parser facts kept as they are)."""
    per_release: dict[str, list[dict[str, tuple[Declaration, str]]]] = {}
    texts: dict[str, list[str]] = {}
    trl_parser: list[str] = []
    caps: dict[str, str] = {}
    for package, versions in RELEASES.items():
        if only and package != only:
            continue
        per_release[package], texts[package] = [], []
        for version in versions:
            path = wheel(cache, package, version)
            if package == "trl":
                trl_parser.append(trl_parser_behaviour(path))
            if package == "llamafactory":
                caps[version] = transformers_cap(path)
            decls, text = read_release(package, path)
            per_release[package].append(decls)
            texts[package].append(text)
            print(f"{package} {version}: {len(decls)} classes", file=sys.stderr)
    all_ids = {cid for releases in per_release.values() for decls in releases for cid in decls}
    if only and previous is not None:
        all_ids |= set(previous["classes"])
    classes: dict[str, dict] = {}
    for package, releases in per_release.items():
        minors = [table_key(package, v) for v in RELEASES[package]]
        ids = sorted({cid for decls in releases for cid in decls})
        for cid in ids:
            present = [cid in decls for decls in releases]
            entry: dict = {"package": package, "exists": ranges(present, minors)}
            names: dict[str, list[bool]] = {}
            bases: dict[str, list[bool]] = {}
            opens: dict[str, list[bool]] = {}
            own_init: list[bool] = []
            aliases: dict[str, str] = {}
            files: list[str] = []
            newest: dict[str, list] = {}
            for i, decls in enumerate(releases):
                if cid not in decls:
                    own_init.append(False)
                    continue
                decl, file = decls[cid]
                if file not in files:
                    files.insert(0, file)
                own_init.append(decl.init)
                for name, fd in decl.fields.items():
                    names.setdefault(name, [False] * len(releases))[i] = True
                    if decl.dataclass and not decl.init:
                        newest[name] = [fd.kind, fd.default] if fd.has_default and _jsonable(fd.default) else [fd.kind]
                for old, new in decl.aliases.items():
                    names.setdefault(old, [False] * len(releases))[i] = True
                    aliases[old] = new
                for base in decl.bases:
                    resolved = resolve_base(base, cid, all_ids)
                    if resolved:
                        bases.setdefault(resolved, [False] * len(releases))[i] = True
                if decl.open:
                    opens.setdefault(decl.open, [False] * len(releases))[i] = True
            entry["files"] = files
            entry["names"] = {n: ranges(p, minors) for n, p in names.items()}
            if bases:
                entry["bases"] = {b: ranges(p, minors) for b, p in bases.items()}
            if any(own_init):
                entry["init"] = ranges(own_init, minors)
            if opens:
                entry["open"] = {k: ranges(p, minors) for k, p in opens.items()}
            if newest:
                entry["defaults"] = newest
            renames = _renames(cid, names, aliases, texts[package], releases)
            if renames:
                entry["renames"] = renames
            classes[cid] = entry
    if only and previous is not None:
        kept = {cid: entry for cid, entry in previous["classes"].items() if entry["package"] != only}
        return {
            **previous,
            "releases": {**previous["releases"], only: {table_key(only, v): v for v in RELEASES[only]}},
            "classes": {**kept, **classes},
            **({"transformers_caps": caps} if only == "llamafactory" else {}),
        }
    trl_minors = [table_key("trl", v) for v in RELEASES["trl"]]
    parsers = {
        "trl.TrlParser": {
            "config_keys": {
                kind: ranges([b == kind for b in trl_parser], trl_minors) for kind in sorted(set(trl_parser)) if kind
            }
        }
    }
    return {
        "transformers_caps": caps,  # llamafactory release -> the newest transformers it allows
        "format": 1,
        "generated_by": "tools/gen_signatures.py",
        "releases": {p: {table_key(p, v): v for v in vs} for p, vs in RELEASES.items()},
        "classes": classes,
        "parsers": parsers,
    }


def _jsonable(value) -> bool:
    try:
        json.dumps(value)
        return True
    except (TypeError, ValueError):
        return False


_SEEN_TEXTS: dict[int, dict[str, str]] = {}


def deprecations(text: str) -> dict[str, str]:
    """old -> new for each deprecation message of the form "`old` is deprecated ... use `new` instead", read once
    per release."""
    key = id(text)
    if key not in _SEEN_TEXTS:
        found: dict[str, str] = {}
        for line in text.split("\n"):
            if "deprecated" in line:
                for m in _DEPRECATION.finditer(line):
                    found.setdefault(m.group(1), m.group(2))
        _SEEN_TEXTS[key] = found
    return _SEEN_TEXTS[key]


def _renames(
    cid: str, names: dict[str, list[bool]], aliases: dict[str, str], texts: list[str], releases: list
) -> dict[str, str]:
    """old -> new for each name a release stops accepting while a deprecation names its successor, and the new
    name is accepted from then on."""
    candidates = dict(CURATED_RENAMES.get(cid, {}))
    candidates.update(aliases)
    for old, present in names.items():
        if old in candidates or all(present) or not any(present):
            continue
        last = max(i for i, ok in enumerate(present) if ok)
        new = deprecations(texts[last]).get(old)
        if new in names and new != old:
            candidates[old] = new
    out = {}
    for old, new in candidates.items():
        if new not in names or (cid, old) in NOT_RENAMES:
            continue
        present = names.get(old, [])
        if not any(present) or present[-1]:
            continue  # never read, or still accepted by the newest release: nothing to rename yet
        last = max(i for i, ok in enumerate(present) if ok)
        if all(names[new][last + 1 :]):  # the new name is accepted wherever the old one has gone
            out[old] = new
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument(
        "--cache",
        default=str(Path.home() / ".cache" / "precision-doctor-wheels"),
        help="folder for the downloaded wheels",
    )
    parser.add_argument("--out", default=str(ROOT / "precision_doctor" / "knowledge" / "data" / "signatures.json"))
    parser.add_argument("--only", choices=sorted(RELEASES), help="read one package again, keep the rest of --out")
    args = parser.parse_args()
    cache = Path(args.cache)
    cache.mkdir(parents=True, exist_ok=True)
    previous = json.loads(Path(args.out).read_text(encoding="utf-8")) if args.only else None
    table = build(cache, args.only or "", previous)
    text = json.dumps(table, indent=1, sort_keys=True, ensure_ascii=False) + "\n"
    Path(args.out).write_text(text, encoding="utf-8")
    print(f"wrote {args.out}: {len(table['classes'])} classes, {len(text) // 1024} KiB", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
