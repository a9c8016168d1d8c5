"""PD703: LLaMA-Factory's start-up check of the library versions (check_dependencies), judged as it runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from precision_doctor import engine
from precision_doctor.knowledge.versions import requirement_holds, requirement_name
from precision_doctor.probes.collect import gather
from precision_doctor.probes.library_source import read_version_gate

from .conftest import bare_env
from .fake_nvml import NO_NVML

TABLE = Path(__file__).resolve().parents[1] / "precision_doctor" / "knowledge" / "data" / "version_gates.json"
RECIPE = (
    "model_name_or_path: Qwen/Qwen2.5-0.5B\nstage: sft\ndo_train: true\nfinetuning_type: lora\n"
    "dataset: alpaca_en_demo\ntemplate: qwen\noutput_dir: out\n"
)
# check_dependencies() as 0.9.2-0.9.5 write it (extras/misc.py), with 0.9.5's ranges
MISC_095 = """import os
from transformers.utils.versions import require_version


def is_env_enabled(env_var: str, default: str = "0") -> bool:
    return os.getenv(env_var, default).lower() in ["true", "y", "1"]


def check_version(requirement: str, mandatory: bool = False) -> None:
    if is_env_enabled("DISABLE_VERSION_CHECK") and not mandatory:
        return
    require_version(requirement, f"To fix: run `pip install {requirement}`")


def check_dependencies() -> None:
    check_version("transformers>=4.55.0,<=5.6.0")
    check_version("datasets>=2.16.0,<=4.0.0")
    check_version("accelerate>=1.3.0,<=1.15.0")
    check_version("peft>=0.18.0,<=0.20.0")
    check_version("trl>=0.18.0,<=0.24.0")
    if is_env_enabled("SOMETHING"):
        check_version("torch>=9")
"""
# as 0.7-0.9.1 write it
MISC_091 = """import os


def check_dependencies() -> None:
    if os.getenv("DISABLE_VERSION_CHECK", "0").lower() in ["true", "1"]:
        logger.warning_once("Version checking has been disabled, may lead to unexpected behaviors.")
    else:
        require_version("transformers>=4.41.2,<=4.46.1", "To fix: pip install transformers>=4.41.2,<=4.46.1")
        require_version("peft>=0.11.1,<=0.12.0", "To fix: pip install peft>=0.11.1,<=0.12.0")
"""
FITS_095 = {"transformers": "5.6.0", "datasets": "4.0.0", "accelerate": "1.15.0", "peft": "0.20.0", "trl": "0.24.0"}


def lf_env(tmp_path: Path, misc: str, installed: dict[str, str], llamafactory: str = "0.9.6.dev0") -> Path:
    """A training environment with LLaMA-Factory (its extras/misc.py) and these libraries installed."""
    env = tmp_path / "lf-env"
    site = env / "lib" / "python3.11" / "site-packages"
    (site / "llamafactory" / "extras").mkdir(parents=True)
    (site / "llamafactory" / "extras" / "misc.py").write_text(misc)
    for dist, v in {"llamafactory": llamafactory, **installed}.items():
        (site / f"{dist}-{v}.dist-info").mkdir()
        (site / f"{dist}-{v}.dist-info" / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {v}\n")
    (env / "bin").mkdir()
    (env / "bin" / "python").write_text("")
    return env / "bin" / "python"


def check(
    tmp_path: Path,
    python: Path,
    recipe: str = RECIPE,
    launcher=None,
    requirements: str = "",
    name="train.yaml",
    environ: dict[str, str] | None = None,
):
    project = tmp_path / "project"
    project.mkdir(exist_ok=True)
    (project / name).write_text(recipe)
    if requirements:
        (project / "requirements.txt").write_text(requirements)
    facts = gather([str(project / name)], environ=environ or {}, system=NO_NVML, python=str(python), launcher=launcher)
    return [f for f in engine.run(facts).findings if f.rule_id == "PD703"]


def test_the_doctors_reading_of_a_requirement_is_transformers_own(monkeypatch):
    """Every requirement of every release in the table, against versions on and around its bounds, judged by the
    doctor and by transformers' own require_version (the function LLaMA-Factory calls) with that version installed:
    one clause per operator (0.9.2's seven `!=` clauses keep only the last), packaging's order of `.dev0`."""
    from transformers.utils import versions as hf_versions

    installed: dict[str, str] = {}
    monkeypatch.setattr(hf_versions.importlib.metadata, "version", lambda name: installed[name])
    releases = json.loads(TABLE.read_text())["frameworks"]["llamafactory"]["releases"]
    assert len(releases) == 11 and "0.9.5" in releases and "0.7.1" in releases
    compared = 0
    for row in releases.values():
        for requirement, _line, _mandatory in row["requirements"]:
            name = requirement_name(requirement)
            bounds = [c.lstrip("!=<> ") for c in requirement[len(name) :].split(",")]
            for bound in bounds:
                major, minor, *_ = (bound + ".0.0").split(".")
                for version in (bound, f"{bound}.dev0", f"{major}.{int(minor) + 1}.0", f"{major}.{minor}.99"):
                    installed[name] = version
                    try:
                        hf_versions.require_version(requirement)
                        theirs = True
                    except ImportError:
                        theirs = False
                    assert requirement_holds(requirement, version) is theirs, (requirement, version)
                    compared += 1
    assert compared >= 400


def test_both_ways_of_writing_the_check_are_read():
    """0.9.2 on: `check_version` calls, skipped where `is_env_enabled` says so; a check under another condition is
    no refusal. Before: `require_version` in the else of the DISABLE_VERSION_CHECK test."""
    found, disable = read_version_gate(MISC_095)
    assert [r.requirement for r in found][:2] == ["transformers>=4.55.0,<=5.6.0", "datasets>=2.16.0,<=4.0.0"]
    assert len(found) == 5 and disable == ("true", "y", "1") and not any(r.mandatory for r in found)
    found, disable = read_version_gate(MISC_091)
    assert [r.requirement for r in found] == ["transformers>=4.41.2,<=4.46.1", "peft>=0.11.1,<=0.12.0"]
    assert disable == ("true", "1")
    assert read_version_gate("def other():\n    pass\n") == ([], ())


def test_an_installed_llamafactory_refuses_an_upgraded_transformers(tmp_path):
    """The common case: LLaMA-Factory installed, then `pip install -U transformers`. Every library outside its range
    is named; the error is the first the check raises, word for word."""
    python = lf_env(tmp_path, MISC_095, {**FITS_095, "transformers": "5.24.0", "peft": "0.21.0"})
    [finding] = check(tmp_path, python)
    assert finding.severity == "error"
    assert "transformers 5.24.0 is outside >=4.55.0,<=5.6.0" in finding.message
    assert "peft 0.21.0 is outside >=0.18.0,<=0.20.0" in finding.message
    assert finding.error == (
        "ImportError: transformers>=4.55.0,<=5.6.0 is required for a normal functioning of this module, but found "
        "transformers==5.24.0."
    )
    assert "pip install 'transformers>=4.55.0,<=5.6.0' 'peft>=0.18.0,<=0.20.0'" in finding.fix.description
    assert any("llamafactory/extras/misc.py:16" in e.note for e in finding.evidence)


def test_versions_inside_every_range_pass(tmp_path):
    assert not check(tmp_path, lf_env(tmp_path, MISC_095, FITS_095))


def test_a_library_missing_beside_it_is_left_to_the_import_that_fails(tmp_path):
    """A library the check ranges but the environment lacks: most releases import it before the check runs
    (`ModuleNotFoundError: No module named 'datasets'` on 0.9.5), others die in the check; not PD703's to word."""
    python = lf_env(tmp_path, MISC_095, {k: v for k, v in FITS_095.items() if k != "datasets"})
    assert not check(tmp_path, python)


def test_an_environment_without_the_framework_is_not_the_jobs(tmp_path):
    """transformers installed where the doctor looks, LLaMA-Factory only pinned: that environment is not the one
    LLaMA-Factory runs in, so its transformers is not judged against the pin's check; the pins are."""
    env = tmp_path / "other-env"
    site = env / "lib" / "python3.11" / "site-packages"
    (site / "transformers-5.24.0.dist-info").mkdir(parents=True)
    (site / "transformers-5.24.0.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: transformers\nVersion: 5.24.0\n"
    )
    (env / "bin").mkdir()
    (env / "bin" / "python").write_text("")
    assert not check(tmp_path, env / "bin" / "python", requirements="llamafactory==0.9.2\ntransformers==4.47.1\n")
    found = check(tmp_path, env / "bin" / "python", requirements="llamafactory==0.9.2\npeft==0.13.0\n")
    assert found and "peft 0.13.0 is outside" in found[0].message
    assert "the checks of transformers, datasets, accelerate, whose versions are not pinned here" in found[0].message


@pytest.mark.parametrize(
    "launcher,fires",
    [
        ("DISABLE_VERSION_CHECK=1 llamafactory-cli train train.yaml", False),
        ("DISABLE_VERSION_CHECK=y llamafactory-cli train train.yaml", False),
        ("DISABLE_VERSION_CHECK=0 llamafactory-cli train train.yaml", True),
        ("llamafactory-cli train train.yaml", True),
        ("export DISABLE_VERSION_CHECK=1; llamafactory-cli train train.yaml", False),
        ("cd /work && export DISABLE_VERSION_CHECK=true && llamafactory-cli train train.yaml", False),
        ("DISABLE_VERSION_CHECK=1 && llamafactory-cli train train.yaml", True),  # a shell variable, not exported
    ],
)
def test_disable_version_check_skips_it(tmp_path, launcher, fires):
    python = lf_env(tmp_path, MISC_095, {**FITS_095, "transformers": "5.24.0"})
    assert bool(check(tmp_path, python, launcher=launcher)) is fires


@pytest.mark.parametrize(
    "launcher,fires",
    [
        ("llamafactory-cli train train.yaml", False),  # this shell's DISABLE_VERSION_CHECK=1 reaches the job
        ("env -u DISABLE_VERSION_CHECK llamafactory-cli train train.yaml", True),
        ("env --unset=DISABLE_VERSION_CHECK llamafactory-cli train train.yaml", True),
        ("unset DISABLE_VERSION_CHECK; llamafactory-cli train train.yaml", True),
        ("env -i PATH=/usr/bin llamafactory-cli train train.yaml", True),  # nothing inherited
        ("env -uDISABLE_VERSION_CHECK llamafactory-cli train train.yaml", True),  # GNU env's attached form
        ("env -u DISABLE_VERSION_CHECK DISABLE_VERSION_CHECK=1 llamafactory-cli train train.yaml", False),
    ],
)
def test_a_launch_that_removes_the_variable_runs_the_check(tmp_path, launcher, fires):
    python = lf_env(tmp_path, MISC_095, {**FITS_095, "transformers": "5.24.0"})
    environ = {"DISABLE_VERSION_CHECK": "1"}
    assert bool(check(tmp_path, python, launcher=launcher, environ=environ)) is fires


def test_a_launch_the_doctor_cannot_read_may_set_the_variable(tmp_path):
    python = lf_env(tmp_path, MISC_095, {**FITS_095, "transformers": "5.24.0"})
    [finding] = check(tmp_path, python, launcher="./run_train.sh train.yaml")
    assert finding.severity == "warning"


def test_y_does_not_skip_the_check_before_0_9_2(tmp_path):
    """0.7-0.9.1 compare with ["true", "1"]: `DISABLE_VERSION_CHECK=y` still runs the check."""
    python = lf_env(tmp_path, MISC_091, {"transformers": "4.47.0", "peft": "0.12.0"}, llamafactory="0.9.1")
    assert check(tmp_path, python, launcher="DISABLE_VERSION_CHECK=y llamafactory-cli train train.yaml")
    assert not check(tmp_path, python, launcher="DISABLE_VERSION_CHECK=true llamafactory-cli train train.yaml")


@pytest.mark.parametrize(
    "requirements,fires",
    [
        ("llamafactory==0.9.3\ntransformers==4.57.1\n", True),  # 0.9.3 checks transformers<=4.52.4
        ("llamafactory==0.9.3\ntransformers==4.52.4\n", False),
        ("llamafactory==0.9.3\ntransformers>=4.45\n", False),  # a range: a fresh install resolves it with LF's own
        ("llamafactory>=0.9.3\ntransformers==4.57.1\n", False),  # which release is not known
    ],
)
def test_pinned_releases_are_judged_by_the_doctors_table(tmp_path, requirements, fires):
    found = check(tmp_path, bare_env(tmp_path), requirements=requirements)
    assert bool(found) is fires
    if fires:
        assert "LLaMA-Factory 0.9.3 refuses" in found[0].message
        assert "the doctor's table of its releases" in found[0].evidence[0].note
        assert (
            "or LLaMA-Factory 0.9.5, the newest release whose check accepts transformers 4.57.1"
            in found[0].fix.description
        )


@pytest.mark.parametrize(
    "code,fires",
    [
        ("from llamafactory.train.tuner import run_exp\n\nrun_exp()\n", True),
        ("import llamafactory.cli\n", True),
        ("from llamafactory.chat import ChatModel\n", True),
        ("from llamafactory.data import get_dataset\n", False),  # 0.9.x: the data module does not import the parser
        ("from transformers import Trainer\n", False),
    ],
)
def test_a_script_that_starts_llamafactory_is_judged_too(tmp_path, code, fires):
    python = lf_env(tmp_path, MISC_095, {**FITS_095, "transformers": "5.24.0"}, llamafactory="0.9.5")
    assert bool(check(tmp_path, python, recipe=code, name="train.py")) is fires


def test_an_axolotl_recipe_is_not_llamafactorys(tmp_path):
    python = lf_env(tmp_path, MISC_095, {**FITS_095, "transformers": "5.24.0"})
    axolotl = "base_model: Qwen/Qwen2.5-0.5B\nadapter: lora\nmicro_batch_size: 1\nsequence_len: 512\n"
    assert not check(tmp_path, python, recipe=axolotl, name="config.yml")


def test_the_table_holds_what_each_wheel_checks():
    """Spot values from the wheels (tools/gen_version_gates.py): 0.9.5 checks peft<=0.20.0 at misc.py:100; 0.9.2
    writes seven `!=` clauses; 0.9.0 and 0.9.1 skip on ["true", "1"] only."""
    releases = json.loads(TABLE.read_text())["frameworks"]["llamafactory"]["releases"]
    assert ["peft>=0.18.0,<=0.20.0", 100, False] in releases["0.9.5"]["requirements"]
    assert releases["0.9.2"]["requirements"][0][0].count("!=") == 7
    assert releases["0.9.1"]["disable_values"] == ["true", "1"]
    assert releases["0.9.2"]["disable_values"] == ["true", "y", "1"]


def test_before_0_9_any_import_of_the_package_runs_the_check(tmp_path):
    """0.7-0.8's llamafactory/__init__.py imports its cli, which imports the parser."""
    python = lf_env(tmp_path, MISC_091, {"transformers": "4.37.1", "peft": "0.12.0"}, llamafactory="0.8.3")
    assert check(tmp_path, python, recipe="from llamafactory.data import get_dataset\n", name="train.py")


@pytest.mark.parametrize(
    "requirements,reason",
    [
        ("", "the release the job runs is not known"),
        ("llamafactory>=0.9\n", "the release the job runs is not known"),
        ("llamafactory==0.9.6.dev0\n", "neither installed where the doctor looks nor a release in its table"),
        ("llamafactory==0.9.5\n", None),
    ],
)
def test_a_check_it_cannot_read_is_an_unknown_with_its_reason(tmp_path, requirements, reason):
    """Never a silent "no problems": where the release (or its check) is not known, the report says so."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "train.yaml").write_text(RECIPE)
    if requirements:
        (project / "requirements.txt").write_text(requirements)
    facts = gather([str(project / "train.yaml")], environ={}, system=NO_NVML, python=str(bare_env(tmp_path)))
    said = [u.reason for u in facts.scripts[0].unknowns if u.what == "LLaMA-Factory's start-up version check"]
    if reason is None:
        assert not said
    else:
        assert len(said) == 1 and reason in said[0]
