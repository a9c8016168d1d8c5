"""Versions belong to the script's own project, and installed versions to the training environment: per-script
resolution up to the repository root, ranges decided as a fresh install would, and the same verdict for a script
whether it is checked alone or in a folder of other projects."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from precision_doctor import engine
from precision_doctor.knowledge.versions import CURRENT, TRAINER_SKIPS_DP_FOR_4BIT
from precision_doctor.probes.collect import gather
from precision_doctor.probes.stack import StackResolver, installed_versions, training_environment
from precision_doctor.probes.versions import Declared, declared_for

from .conftest import bare_env
from .fake_nvml import NO_NVML

_TRAINER = (
    "from transformers import AutoModelForCausalLM, AutoTokenizer, Trainer, TrainingArguments\n"
    "tok = AutoTokenizer.from_pretrained('gpt2')\n"
    "m = AutoModelForCausalLM.from_pretrained('gpt2')\n"
    "Trainer(model=m, args=TrainingArguments('o'), tokenizer=tok).train()\n"
)


def _write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def _run(paths, python, target=None):
    facts = gather([str(p) for p in paths], target=target, environ={}, system=NO_NVML, python=str(python))
    return engine.run(facts), facts


def _mixed_tree(tmp_path: Path) -> Path:
    """Two repositories side by side: one pins transformers 4.31 at its root two folders above the script, one
    declares a range in pyproject.toml."""
    tree = tmp_path / "checkouts"
    _write(
        tree,
        {
            "old/.git/HEAD": "ref: refs/heads/main\n",
            "old/requirements.txt": "torch==2.0.1\ntransformers==4.31.0  # the QLoRA era\npeft==0.4.0\n",
            "old/scripts/training/train.py": _TRAINER,
            "new/.git/HEAD": "ref: refs/heads/main\n",
            "new/pyproject.toml": '[project]\nname = "new"\ndependencies = ["transformers>=4.28", "torch>=1.10"]\n',
            "new/src/new/train.py": _TRAINER,
        },
    )
    return tree


def test_each_script_is_judged_by_its_own_projects_pins(tmp_path):
    tree = _mixed_tree(tmp_path)
    result, facts = _run([tree], bare_env(tmp_path))
    by_path = {s.path: s for s in facts.scripts}
    old = next(s for p, s in by_path.items() if p.endswith("old/scripts/training/train.py"))
    new = next(s for p, s in by_path.items() if p.endswith("new/src/new/train.py"))
    assert old.stack.get("transformers").version == "4.31.0"
    assert new.stack.get("transformers").version == CURRENT["transformers"]
    # a range is what a fresh install of it gets today, and the stack line says so
    assert (
        new.stack.get("transformers").describe()
        == f"transformers >=4.28 → {CURRENT['transformers']} (newest allowed, new/pyproject.toml)"
    )
    assert new.stack.get("torch").version == CURRENT["torch"]  # `torch>=1.10` is not torch 1.10
    removed = {f.path for f in result.findings if f.rule_id == "PD216"}
    assert removed == {new.path}  # Trainer(tokenizer=) exists on 4.31, not on 5.x


def test_a_folder_run_and_a_run_per_file_give_the_same_findings(tmp_path):
    tree = _mixed_tree(tmp_path)
    python = bare_env(tmp_path)
    folder, facts = _run([tree], python, target="t4")
    per_file = []
    for script in facts.scripts:
        result, _ = _run([script.path], python, target="t4")
        per_file.extend(result.findings)

    def key(f):
        return f.rule_id, f.severity, f.path, f.locations, f.message

    assert sorted(map(key, folder.findings)) == sorted(map(key, per_file))
    assert folder.findings


@pytest.mark.parametrize(
    "files,expected",
    [
        (
            {
                "pyproject.toml": '[project]\nname = "x"\ndependencies = []\n[project.optional-dependencies]\n'
                'train = ["transformers[torch]~=4.36.0"]\n'
            },
            ("4.36.0", "newest allowed"),
        ),
        (
            {"pyproject.toml": '[tool.poetry.dependencies]\npython = "^3.10"\ntransformers = "^4.40"\n'},
            ("4.57.0", "newest allowed"),
        ),
        (
            {"pyproject.toml": '[tool.poetry.dependencies]\ntransformers = {version = "4.38.2", extras = ["torch"]}\n'},
            ("4.38.2", "pinned"),
        ),
        (
            {"setup.cfg": "[options]\ninstall_requires =\n    numpy\n    transformers>=4.30,<4.35\n"},
            ("4.34.0", "newest allowed"),
        ),
        (
            {
                "setup.py": "from setuptools import setup\nREQS = ['transformers==4.33.1', 'torch']\n"
                "setup(name='x', install_requires=REQS)\n"
            },
            ("4.33.1", "pinned"),
        ),
        (
            {
                "environment.yml": "name: x\ndependencies:\n  - python=3.10\n  - pip\n  - pip:\n"
                "    - transformers==4.39.3\n"
            },
            ("4.39.3", "pinned"),
        ),
        (
            {
                "requirements.txt": "-r requirements/base.txt\n",
                "requirements/base.txt": "transformers<4.42 ; python_version >= '3'\n",
            },
            ("4.41.0", "newest allowed"),
        ),
        (
            {"requirements.txt": "transformers==4.30.0 ; python_version < '3'\ntransformers==4.29.0\n"},
            ("4.29.0", "pinned"),
        ),
    ],
)
def test_dependency_files_are_parsed_not_pattern_matched(tmp_path, files, expected):
    _write(tmp_path / "repo", {".git/HEAD": "", "train/x/train.py": "", **files})
    declared = declared_for(tmp_path / "repo" / "train" / "x" / "train.py")
    version, how = declared["transformers"].resolve()
    assert (version, how.split(",")[0]) == expected


def test_the_walk_stops_at_the_repository_root(tmp_path):
    _write(tmp_path, {"requirements.txt": "transformers==4.20.0\n", "repo/.git/HEAD": "", "repo/train.py": ""})
    assert "transformers" not in declared_for(tmp_path / "repo" / "train.py")


def test_the_nearest_file_decides(tmp_path):
    _write(
        tmp_path,
        {
            "repo/.git/HEAD": "",
            "repo/requirements.txt": "transformers==4.31.0\n",
            "repo/examples/requirements.txt": "transformers>=4.45\n",
            "repo/examples/train.py": "",
        },
    )
    assert declared_for(tmp_path / "repo" / "examples" / "train.py")["transformers"].spec == ">=4.45"


def test_a_range_no_known_release_meets_falls_back_to_its_floor():
    assert Declared("transformers", ">=9.1", "r.txt").resolve() == ("9.1", "lower bound; no newer release known")


def _fake_env(root: Path, versions: dict[str, str], trainer: str | None = None) -> Path:
    """A virtualenv as its folder layout: pyvenv.cfg and dist-info metadata, nothing that could run."""
    site = root / "lib" / "python3.11" / "site-packages"
    site.mkdir(parents=True)
    (root / "bin").mkdir()
    (root / "bin" / "python").write_text("#!/bin/sh\necho this must never run >&2; exit 9\n")
    (root / "bin" / "python").chmod(0o755)
    (root / "pyvenv.cfg").write_text("home = /nowhere/bin\ninclude-system-site-packages = false\n")
    for name, version in versions.items():
        info = site / f"{name.replace('-', '_')}-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    if trainer is not None:
        (site / "transformers").mkdir()
        (site / "transformers" / "trainer.py").write_text(trainer)
    return root / "bin" / "python"


def test_the_training_environment_is_read_from_its_metadata_never_run(tmp_path):
    python = _fake_env(
        tmp_path / "train-env",
        {"torch": "2.1.2", "transformers": "4.40.0"},
        trainer="class Trainer:\n    def _wrap_model(self, model):\n        return model\n",
    )
    env = training_environment(str(python), environ={})
    assert installed_versions(env.site_dirs) == {"torch": "2.1.2", "transformers": "4.40.0"}
    stack = StackResolver(None, env).for_script(tmp_path / "train.py")
    assert stack.get("torch").describe().startswith("torch 2.1.2 (installed, ")
    assert str(tmp_path / "train-env") in stack.get("torch").origin
    assert stack.behaviours[TRAINER_SKIPS_DP_FOR_4BIT].value is False  # that environment's trainer.py


def test_virtual_env_is_the_training_environment_when_it_has_the_ml_stack(tmp_path):
    _fake_env(tmp_path / "venv", {"transformers": "4.45.0"})
    env = training_environment(None, environ={"VIRTUAL_ENV": str(tmp_path / "venv")})
    assert env is not None and "$VIRTUAL_ENV" in env.label
    assert installed_versions(env.site_dirs)["transformers"] == "4.45.0"


def test_check_python_flag_end_to_end(tmp_path):
    python = _fake_env(tmp_path / "env", {"transformers": "4.31.0"})
    script = tmp_path / "train.py"
    script.write_text(_TRAINER)
    cmd = [sys.executable, "-m", "precision_doctor", "check", str(script), "--python", str(python), "--format", "json"]
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "PD216" not in out.stdout and "must never run" not in out.stderr
    missing = subprocess.run(cmd[:5] + ["--python", str(tmp_path / "nope")], capture_output=True, text=True)
    assert missing.returncode == 2 and len(missing.stderr.strip().splitlines()) == 1
    assert json.loads(out.stdout)


def test_installed_versions_read_every_metadata_layout(tmp_path):
    """dist-info METADATA as installers write it, with CRLF line ends or a folded header (read by the email parser),
    a develop install's egg-info PKG-INFO; the first of a name on the path wins; other distributions are not read."""
    first, second = tmp_path / "site1", tmp_path / "site2"
    for folder, name, body in [
        (first / "torch-2.4.0.dist-info", "METADATA", "Metadata-Version: 2.1\r\nName: torch\r\nVersion: 2.4.0\r\n"),
        (
            first / "transformers-4.46.0.dist-info",
            "METADATA",
            "Metadata-Version: 2.1\nName: transformers\nSummary: State-of-the-art\n"
            "  Machine Learning\nVersion: 4.46.0\n",
        ),
        (first / "peft.egg-info", "PKG-INFO", "Metadata-Version: 1.0\nName: peft\nVersion: 0.13.0.dev0\n"),
        (first / "not_tracked-1.0.dist-info", "METADATA", "Name: not-tracked\nVersion: 1.0\n"),
        (second / "torch-1.13.0.dist-info", "METADATA", "Name: torch\nVersion: 1.13.0\n"),
        (second / "accelerate-1.0.0.dist-info", "METADATA", "Name: accelerate\nVersion: 1.0.0\n"),
    ]:
        folder.mkdir(parents=True)
        (folder / name).write_bytes(body.encode())
    assert installed_versions((str(first), str(second))) == {
        "torch": "2.4.0",
        "transformers": "4.46.0",
        "peft": "0.13.0.dev0",
        "accelerate": "1.0.0",
    }


@pytest.mark.parametrize(
    "installed,boundary,reached",
    [
        ("2.3.0", "2.3", True),
        ("2.4.0+cu121", "2.3", True),  # a local build is its release
        ("2.8.0a0+5228986c39", "2.8", True),  # NVIDIA's containers: transformers' own gates count it as 2.8
        ("5.0.0rc2", "5.0", True),  # a candidate carries the release's behaviour
        ("4.56.0.dev0", "4.56", True),
        ("2.2.2", "2.3", False),
        ("latest", "2.3", True),  # unreadable: the release the rules were checked against
    ],
)
def test_boundaries_count_a_build_as_its_release(installed, boundary, reached):
    from precision_doctor.knowledge.versions import at_least
    from precision_doctor.model.facts import PackageVersion, StackFacts, VersionSource

    name = "transformers" if boundary.startswith(("4", "5")) else "torch"
    stack = StackFacts(packages={name: PackageVersion(name, installed, VersionSource.INSTALLED)})
    assert at_least(stack, name, boundary) is reached


def test_transformers_counts_a_torch_source_build_as_its_release(monkeypatch):
    """What the boundary semantics mirror, on the installed transformers: its torch gates accept dev builds (the
    2.8 gate, which picks TrainingArguments' default optimizer, among them)."""
    import inspect

    import transformers.pytorch_utils as pytorch_utils
    import transformers.utils.import_utils as import_utils

    assert 'is_torch_greater_or_equal("2.8", accept_dev=True)' in inspect.getsource(pytorch_utils)
    monkeypatch.setattr(import_utils, "get_torch_version", lambda: "2.8.0a0+5228986c39")
    assert import_utils.is_torch_greater_or_equal("2.8", accept_dev=True)
