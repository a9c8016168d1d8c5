"""A repeated `check` over unchanged inputs prints the answer it gave before without loading the rules
(system/run_answer.py), and any change to what the run read (the script, a module it imports, a config, an
environment variable it read) is judged afresh. Each run is a fresh process, as on the command line."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

HEAD = "import torch\nfrom transformers import AutoModelForCausalLM, Trainer, TrainingArguments\n"
HELPER = "def load():\n    return AutoModelForCausalLM.from_pretrained('gpt2', dtype=torch.{dtype})\n"
TRAIN = (
    HEAD + "from helper import load\n"
    "model = load()\n"
    "Trainer(model=model, args=TrainingArguments(output_dir='o', fp16=True)).train()\n"
)


@pytest.fixture
def project(tmp_path):
    folder = tmp_path / "project"
    folder.mkdir()
    (folder / "helper.py").write_text(HEAD + HELPER.format(dtype="float16"))
    (folder / "train.py").write_text(TRAIN)
    return folder


def check(project: Path, cache: Path, *args: str, env: dict | None = None) -> tuple[int, str, bool]:
    """(exit code, stdout, whether the rules were loaded) of one `check` in a new process."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "precision_doctor", "check", *args, "--cache-dir", str(cache)],
        cwd=project,
        capture_output=True,
        text=True,
        env={**os.environ, "HF_HUB_OFFLINE": "1", **(env or {})},
        timeout=120,
    )
    judged = "precision_doctor.engine" in done.stderr
    return done.returncode, done.stdout, judged


def findings(stdout: str) -> list[str]:
    return sorted(f["id"] for f in json.loads(stdout)["findings"])


def test_an_unchanged_run_prints_the_same_answer_without_judging_again(project, tmp_path):
    cache = tmp_path / "cache"
    first = check(project, cache, "train.py", "--target", "a100")
    second = check(project, cache, "train.py", "--target", "a100")
    assert first[0] == second[0] == 1 and first[1] == second[1] and "PD201" in first[1]
    assert first[2] and not second[2]  # the second run loaded no rule: the answer was the first run's
    third = check(project, cache, "train.py", "--target", "a100", "--format", "json")  # another command line
    assert third[2] and findings(third[1]) == ["PD201"]


def test_an_edit_to_an_imported_module_is_judged_afresh(project, tmp_path):
    cache = tmp_path / "cache"
    args = ("train.py", "--target", "a100", "--format", "json")
    assert findings(check(project, cache, *args)[1]) == ["PD201"]
    (project / "helper.py").write_text(HEAD + HELPER.format(dtype="float32"))
    code, out, judged = check(project, cache, *args)
    assert judged and code == 0 and findings(out) == []
    again = check(project, cache, *args)
    assert not again[2] and again[1] == out and again[0] == 0


def test_a_config_the_launch_reads_and_an_environment_variable_the_run_reads_are_judged_afresh(project, tmp_path):
    cache = tmp_path / "cache"
    (project / "train.py").write_text(
        "import torch\nfrom accelerate import Accelerator\nacc = Accelerator()\nmodel = torch.nn.Linear(8, 8)\n"
        "opt = torch.optim.AdamW(model.parameters())\nmodel, opt = acc.prepare(model, opt)\n"
    )
    config = project / "acc.yaml"
    config.write_text("compute_environment: LOCAL_MACHINE\ndistributed_type: 'NO'\nmixed_precision: 'no'\n")
    args = ("train.py", "--target", "a100", "--launcher", "accelerate launch --config_file acc.yaml train.py")
    before = check(project, cache, *args, "--format", "json")
    assert before[0] == 0 and findings(before[1]) == []
    config.write_text(config.read_text().replace("'no'", "fp16"))
    after = check(project, cache, *args, "--format", "json")
    assert after[2] and findings(after[1]) == ["PD113"]  # Accelerator() takes fp16 from the config it now names
    plain = check(project, cache, *args)
    coloured = check(project, cache, *args, env={"FORCE_COLOR": "1"})  # rich reads it: the report is coloured
    assert coloured[2] and "\x1b[" in coloured[1] and "\x1b[" not in plain[1]


def test_a_run_that_probes_this_machine_is_never_replayed(project, tmp_path):
    cache = tmp_path / "cache"
    check(project, cache, "train.py")
    assert check(project, cache, "train.py")[2]  # GPUs, processes and ports are probed each time


def test_a_run_that_warned_on_stderr_is_not_kept(project, tmp_path):
    cache = tmp_path / "cache"
    command = [sys.executable, "-m", "precision_doctor", "check", "--target", "a100", "--cache-dir", str(cache)]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "CI": "1"}  # with no path in CI the doctor says so on stderr
    first, second = (
        subprocess.run(command, cwd=project, capture_output=True, text=True, env=env, timeout=120) for _ in range(2)
    )
    assert "no path given" in first.stderr
    assert "no path given" in second.stderr and second.stdout == first.stdout


def test_a_cache_folder_inside_a_tree_its_run_checked_is_not_answered_from(project, tmp_path):
    """The kept answer names the trees its run read: one that holds the cache folder is not trusted, even from
    a run that names only a path elsewhere."""
    from precision_doctor.system import content_cache

    cache = tmp_path / "cache"
    check(project, cache, "train.py", "--target", "a100")
    folder = cache / content_cache.FORMAT
    kept = [p for p in folder.iterdir() if p.read_bytes().startswith(b"{")]
    assert len(kept) == 1
    entry = json.loads(kept[0].read_bytes())
    assert entry["doctor"] and str(project.resolve()) in entry["trees"] and entry["exit"] == 1
    entry["trees"].append(str(tmp_path.resolve()))  # as if that run had checked the folder holding the cache
    kept[0].write_text(json.dumps(entry))
    assert check(project, cache, "train.py", "--target", "a100")[2]


def test_probing_this_machine_makes_what_a_run_read_unkeepable():
    """GPUs, processes and ports come from NVML and the OS, not from files a manifest could fingerprint: a run
    that probed them (no --target, no --facts) keeps no answer, even on a machine whose probe reads no file."""
    from precision_doctor.model.facts import LaunchFacts
    from precision_doctor.probes.collect import this_machine
    from precision_doctor.system import reads

    from .fake_nvml import fake_system

    system, env = fake_system("h100_8x")
    with reads.recording() as frame:
        machine = this_machine(env, LaunchFacts(known=False), system)
    assert machine.known and len(machine.gpus) == 8
    assert reads.manifest(frame, None) is None


def test_a_replayed_answer_keeps_the_verdict_when_stdout_closes_or_fills(project, tmp_path):
    """As a fresh run does (cli `deliver`): a reader that stops reading keeps exit 1, a full disk is exit 2."""
    cache = tmp_path / "cache"
    for _ in range(2):
        check(project, cache, "train.py", "--target", "a100")
    assert not check(project, cache, "train.py", "--target", "a100")[2]  # replayed from here on
    command = [sys.executable, "-m", "precision_doctor", "check", "train.py", "--target", "a100"]
    command += ["--cache-dir", str(cache)]
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    piped = subprocess.Popen(command, cwd=project, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    piped.stdout.close()  # `| true`
    assert piped.wait(timeout=120) == 1
    with open("/dev/full", "w") as full:
        done = subprocess.run(command, cwd=project, stdout=full, stderr=subprocess.PIPE, text=True, env=env)
    assert done.returncode == 2 and "cannot write the report to stdout" in done.stderr


def test_a_cache_inside_a_launched_scripts_tree_is_still_refused(tmp_path):
    """The answer is looked up before the run reads its launch line; the cache is opened for the run only once
    every tree it checks is known, so a cache folder in the tree of a script named only on --launcher is refused."""
    proj, work = tmp_path / "proj", tmp_path / "work"
    proj.mkdir()
    work.mkdir()
    (proj / "helper.py").write_text(HEAD + HELPER.format(dtype="float16"))
    (proj / "train.py").write_text(TRAIN)
    planted = proj / ".pdcache" / "facts-1"  # a cache folder that came with the tree
    planted.mkdir(parents=True, mode=0o700)
    (proj / ".pdcache").chmod(0o700)
    done = subprocess.run(
        [sys.executable, "-m", "precision_doctor", "check", "--target", "a100"]
        + ["--launcher", f"torchrun {proj / 'train.py'}", "--cache-dir", str(proj / ".pdcache")],
        cwd=work,
        capture_output=True,
        text=True,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
        timeout=120,
    )
    assert done.returncode == 2 and "inside" in done.stderr
    assert not any(planted.iterdir())  # nothing written to, or read from, a folder in a tree the run checks


def test_a_check_with_no_path_may_keep_its_cache_below_the_working_folder(tmp_path):
    """Only the working folder's repository is someone else's tree, as before: a machine-only check run from a
    home folder that is no repository keeps its cache there."""
    home = tmp_path / "home"
    home.mkdir()
    done = subprocess.run(
        [sys.executable, "-m", "precision_doctor", "check", "--target", "a100", "--cache-dir", str(home / ".cache")],
        cwd=home,
        capture_output=True,
        text=True,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
        timeout=120,
    )
    assert done.returncode == 0 and "cache" not in done.stderr


def test_a_folder_run_computed_in_worker_processes_is_kept_and_an_edit_is_judged_afresh(tmp_path):
    """The workers send back what each script read: the cold run itself is kept (the next run is its answer), and
    an edit to one script that only a worker read is seen."""
    folder = tmp_path / "many"
    folder.mkdir()
    for i in range(34):  # past the worker threshold (collect.PARALLEL_FROM)
        (folder / f"job_{i:02}.py").write_text(
            TRAIN.replace("from helper import load\n", "").replace(
                "model = load()", "model = AutoModelForCausalLM.from_pretrained('gpt2', dtype=torch.float32)"
            )
        )
    cache = tmp_path / "cache"
    cold = check(folder, cache, ".", "--target", "a100", "--jobs", "2")
    again = check(folder, cache, ".", "--target", "a100", "--jobs", "2")
    assert cold[0] == again[0] == 0 and cold[1] == again[1]
    assert cold[2] and not again[2]  # the cold run's answer, kept although workers computed it
    (folder / "job_33.py").write_text(
        TRAIN.replace("from helper import load\n", "").replace(
            "model = load()", "model = AutoModelForCausalLM.from_pretrained('gpt2', dtype=torch.float16)"
        )
    )
    edited = check(folder, cache, ".", "--target", "a100", "--jobs", "2")
    assert edited[2] and edited[0] == 1 and "PD201" in edited[1]
