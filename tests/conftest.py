import os
import tempfile
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
# the command line keeps a content cache in the user's cache folder: the suite's own, shared by its tests (a hit
# must give what a miss gives) and never the user's
os.environ["XDG_CACHE_HOME"] = tempfile.mkdtemp(prefix="precision-doctor-tests-")
# a `precision-doctor server` the developer runs would answer the suite's checks: each runs in its own process
# (tests/test_server.py starts servers of its own)
os.environ["PRECISION_DOCTOR_NO_SERVER"] = "1"

from precision_doctor import engine  # noqa: E402
from precision_doctor.knowledge.versions import CURRENT  # noqa: E402
from precision_doctor.probes.collect import gather  # noqa: E402

from .fake_nvml import NO_NVML, fake_system  # noqa: E402


def machine_probes(machine=None, environ=None):
    """A machine fixture's fakes (or a machine without NVML), so no test reads the real host."""
    if machine is None:
        return {"environ": environ or {}, "system": NO_NVML}
    system, env = fake_system(machine)
    return {"environ": {**env, **(environ or {})}, "system": system}


def check_code(
    tmp_path,
    code,
    target=None,
    launcher=None,
    script_args=(),
    versions=None,
    name="train.py",
    facts_file=None,
    environ=None,
    machine=None,
    live=None,
    job=None,
    files=None,
):
    """Run the whole static pipeline on `code` against a fixed stack (current releases unless overridden); with
    `job`, the code is the training script a job script beside it (job.sbatch) launches, and the job is checked;
    `files` are written beside it first (relative path -> text)."""
    write_files(tmp_path, files)
    path = tmp_path / name
    path.write_text(code, encoding="utf-8")
    if job is not None:
        path = tmp_path / "job.sbatch"
        path.write_text(job, encoding="utf-8")
    facts = gather(
        [str(path)],
        target=target,
        launcher=launcher,
        script_args=tuple(script_args),
        stack_overrides={**CURRENT, **(versions or {})},
        facts_file=facts_file,
        **machine_probes(machine, environ),
    )
    if live is not None:
        from dataclasses import replace

        from precision_doctor.model.facts import LiveFacts

        facts = replace(facts, live=LiveFacts.from_json(live))
    return engine.run(facts), facts


def write_files(folder: Path, files) -> None:
    """An example's files beside its script (a checkpoint folder with its config.json and modeling code)."""
    for relative, text in (files or {}).items():
        (folder / relative).parent.mkdir(parents=True, exist_ok=True)
        (folder / relative).write_text(text, encoding="utf-8")


ALLOCATIONS = Path(__file__).resolve().parents[1] / "fixtures" / "allocations"


def check_example(run_check, example):
    """A rule's declared example checked with everything it declares: target, launch, versions, machine, live
    facts, the job that launches it and the snapshot it is checked against."""
    return run_check(
        example.code,
        target=example.target,
        launcher=example.launcher,
        script_args=example.script_args,
        versions=example.versions,
        machine=example.machine,
        environ=example.env,
        live=example.live,
        job=example.job,
        files=example.files,
        name=example.name,
        facts_file=str(ALLOCATIONS / f"{example.facts}.json") if example.facts else None,
    )


@pytest.fixture
def run_check(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)

    def _run(code, **kw):
        return check_code(tmp_path, code, **kw)

    return _run


@pytest.fixture(autouse=True)
def own_state_home(tmp_path_factory, monkeypatch):
    """Each test's `fix` undo folders in a state home of its own (XDG_STATE_HOME), never the user's."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path_factory.mktemp("state")))


def pytest_addoption(parser):
    parser.addoption(
        "--update-golden",
        action="store_true",
        help="rewrite golden files (README rule table, golden reports) from the current code",
    )


@pytest.fixture
def update_golden(request):
    return request.config.getoption("--update-golden")


@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory):
    """A one-layer Llama saved locally: real transformers loads without a hub download."""
    transformers = pytest.importorskip("transformers")
    cfg = transformers.LlamaConfig(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
        vocab_size=128,
    )
    path = tmp_path_factory.mktemp("tiny-llama")
    transformers.LlamaForCausalLM(cfg).save_pretrained(path)
    return path


def bare_env(tmp_path) -> Path:
    """A training environment with nothing of the ML stack installed: versions come from the project."""
    site = tmp_path / "bare-env" / "lib" / "python3.11" / "site-packages"
    site.mkdir(parents=True)
    (tmp_path / "bare-env" / "bin").mkdir()
    (tmp_path / "bare-env" / "bin" / "python").write_text("")
    return tmp_path / "bare-env" / "bin" / "python"
