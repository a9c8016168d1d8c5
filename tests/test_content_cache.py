"""The content cache: a second run over unchanged files answers from it, and any change to what a file's facts were
read from (the file, a sibling module it imports, a config it reads or looked for, a notebook's pins, an environment
variable) gives the answer a run without the cache gives."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from precision_doctor.cli.app import main
from precision_doctor.system import content_cache

HEAD = "import torch\nfrom transformers import AutoModelForCausalLM, Trainer, TrainingArguments\n"
HELPER_LOAD = "def load():\n    return AutoModelForCausalLM.from_pretrained('gpt2', dtype=torch.{dtype})\n"
TRAIN_WITH_HELPER = (
    HEAD + "from helper import load\n"
    "model = load()\n"
    "args = TrainingArguments(output_dir='o', fp16=True)\n"
    "Trainer(model=model, args=args).train()\n"
)


def run(capsys, *args, cache: Path | None) -> tuple[dict, dict[str, int]]:
    """One `check --format json` in this process: the report and the cache's hits and misses of the scripts'
    probes."""
    before = content_cache.counts("probe")
    options = ["--cache-dir", str(cache)] if cache is not None else ["--no-cache"]
    main(["check", *args, "--format", "json", "--fail-on", "never", "--jobs", "1", *options])
    after = content_cache.counts("probe")
    report = json.loads(capsys.readouterr().out)
    return report, {k: after[k] - before[k] for k in after}


def entries_of(cache: Path) -> list[Path]:
    """The cache's entry files (not its `.pruned` mark)."""
    return sorted(p for p in (cache / content_cache.FORMAT).iterdir() if not p.name.startswith("."))


def rules_at(report: dict) -> set[tuple[str, str]]:
    return {(f["id"], f["path"]) for f in report["findings"]}


def comparable(report: dict) -> str:
    return json.dumps({k: v for k, v in report.items() if k != "timing"}, sort_keys=True)


@pytest.fixture
def project(tmp_path, monkeypatch):
    folder = tmp_path / "project"
    folder.mkdir()
    monkeypatch.chdir(folder)
    return folder


@pytest.fixture
def cache(tmp_path):
    return tmp_path / "cache"


def test_a_second_run_answers_from_the_cache_with_the_same_report(project, cache, capsys):
    (project / "helper.py").write_text(HEAD + HELPER_LOAD.format(dtype="float16"))
    (project / "train.py").write_text(TRAIN_WITH_HELPER)
    (project / "other.py").write_text(
        HEAD + "m = AutoModelForCausalLM.from_pretrained('gpt2', torch_dtype=torch.float32)\n"
    )
    first, cold = run(capsys, ".", "--target", "a100", cache=cache)
    second, warm = run(capsys, ".", "--target", "a100", cache=cache)
    uncached, _ = run(capsys, ".", "--target", "a100", cache=None)
    assert cold["hits"] == 0 and cold["misses"] >= 3
    assert warm == {"hits": 3, "misses": 0}  # the three files
    assert comparable(first) == comparable(second) == comparable(uncached)
    assert ("PD201", "train.py") in rules_at(second)  # fp16 weights (from the helper) under fp16 AMP


def test_an_edited_script_is_read_again_and_only_it(project, cache, capsys):
    (project / "a.py").write_text(HEAD + "m = AutoModelForCausalLM.from_pretrained('gpt2', dtype=torch.float32)\n")
    (project / "b.py").write_text(HEAD + "m = AutoModelForCausalLM.from_pretrained('gpt2', dtype=torch.float32)\n")
    first, _ = run(capsys, ".", "--target", "a100", cache=cache)
    assert ("PD214", "a.py") not in rules_at(first)
    (project / "a.py").write_text(
        HEAD + "m = AutoModelForCausalLM.from_pretrained('gpt2', torch_dtype=torch.float32)\n"
    )
    second, counts = run(capsys, ".", "--target", "a100", cache=cache)
    assert ("PD214", "a.py") in rules_at(second)
    assert counts == {"hits": 1, "misses": 1}


def test_a_sibling_modules_change_reaches_every_script_that_imports_it(project, cache, capsys):
    # two scripts import one helper: the second is served the helper's facts the first read (a memo of the run),
    # and its entry must still hold the helper's content, or it would stay stale after the helper changes
    (project / "helper.py").write_text(HEAD + HELPER_LOAD.format(dtype="float16"))
    (project / "a_train.py").write_text(TRAIN_WITH_HELPER)
    (project / "b_train.py").write_text(TRAIN_WITH_HELPER)
    first, _ = run(capsys, "a_train.py", "b_train.py", "--target", "a100", cache=cache)
    assert {("PD201", "a_train.py"), ("PD201", "b_train.py")} <= rules_at(first)
    (project / "helper.py").write_text(HEAD + HELPER_LOAD.format(dtype="float32"))
    second, _ = run(capsys, "a_train.py", "b_train.py", "--target", "a100", cache=cache)
    assert not {r for r in rules_at(second) if r[0] == "PD201"}
    uncached, _ = run(capsys, "a_train.py", "b_train.py", "--target", "a100", cache=None)
    assert comparable(second) == comparable(uncached)


def test_a_config_created_after_the_first_run_is_read(project, cache, capsys):
    (project / "train.py").write_text(
        HEAD + "import yaml\n"
        "cfg = yaml.safe_load(open('train.yaml'))\n"
        "model = AutoModelForCausalLM.from_pretrained('gpt2')\n"
        "args = TrainingArguments(output_dir='o', bf16=cfg['bf16'])\n"
        "Trainer(model=model, args=args).train()\n"
    )
    first, _ = run(capsys, "train.py", "--target", "t4", cache=cache)  # train.yaml looked for, not found
    assert "PD101" not in {r for r, _ in rules_at(first)}
    (project / "train.yaml").write_text("bf16: true\n")
    second, counts = run(capsys, "train.py", "--target", "t4", cache=cache)
    assert counts["misses"] == 1
    assert "PD101" in {r for r, _ in rules_at(second)}  # bf16 on a T4, from the config now there


def test_a_notebooks_pinned_release_is_read_again_when_the_pin_changes(project, cache, capsys):
    def notebook(pin: str) -> str:
        cells = [
            {
                "cell_type": "code",
                "metadata": {},
                "outputs": [],
                "execution_count": 1,
                "source": [f"!pip install {pin}\n"],
            },
            {
                "cell_type": "code",
                "metadata": {},
                "outputs": [],
                "execution_count": 2,
                "source": [HEAD, "m = AutoModelForCausalLM.from_pretrained('gpt2', torch_dtype=torch.float32)\n"],
            },
        ]
        return json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5})

    (project / "tune.ipynb").write_text(notebook("transformers==4.46.3"))
    first, _ = run(capsys, "tune.ipynb", "--target", "a100", cache=cache)
    assert "PD214" not in {r for r, _ in rules_at(first)}  # torch_dtype= is the name 4.46 knows
    (project / "tune.ipynb").write_text(notebook("transformers==5.2.0"))
    second, _ = run(capsys, "tune.ipynb", "--target", "a100", cache=cache)
    assert "PD214" in {r for r, _ in rules_at(second)}


def test_an_environment_variable_the_script_reads_is_part_of_the_answer(project, cache, capsys, monkeypatch):
    (project / "train.py").write_text(
        HEAD + "import os\n"
        "half = os.environ.get('HALF', '0') == '1'\n"
        "model = AutoModelForCausalLM.from_pretrained('gpt2', dtype=torch.float16 if half else torch.float32)\n"
        "args = TrainingArguments(output_dir='o', fp16=True)\n"
        "Trainer(model=model, args=args).train()\n"
    )
    monkeypatch.setenv("HALF", "1")
    monkeypatch.setenv("UNRELATED", "a")
    first, _ = run(capsys, "train.py", cache=cache)  # this machine: the job sees this environment
    assert "PD201" in {r for r, _ in rules_at(first)}
    monkeypatch.setenv("UNRELATED", "b")  # a variable no probe read: still a hit
    _, counts = run(capsys, "train.py", cache=cache)
    assert counts == {"hits": 1, "misses": 0}
    monkeypatch.setenv("HALF", "0")
    second, counts = run(capsys, "train.py", cache=cache)
    assert counts["misses"] == 1
    assert "PD201" not in {r for r, _ in rules_at(second)}


def test_a_corrupt_or_foreign_entry_is_a_miss(project, cache, capsys):
    (project / "train.py").write_text(TRAIN_WITH_HELPER)
    (project / "helper.py").write_text(HEAD + HELPER_LOAD.format(dtype="float16"))
    first, _ = run(capsys, "train.py", "--target", "a100", cache=cache)
    entries = entries_of(cache)
    assert entries
    for i, entry in enumerate(entries):
        entry.write_bytes(b"\x80\x05garbage" if i % 2 else b"")
    second, counts = run(capsys, "train.py", "--target", "a100", cache=cache)
    assert counts["hits"] == 0
    assert comparable(first) == comparable(second)


def test_no_cache_writes_nothing_and_the_folder_is_the_users_own(project, cache, capsys, tmp_path):
    (project / "train.py").write_text(TRAIN_WITH_HELPER)
    run(capsys, "train.py", "--target", "a100", cache=None)
    assert not cache.exists()
    run(capsys, "train.py", "--target", "a100", cache=cache)
    folder = cache / content_cache.FORMAT
    assert (folder.stat().st_mode & 0o777) == 0o700
    assert all((p.stat().st_mode & 0o777) == 0o600 for p in folder.iterdir())


def test_a_cache_inside_the_checked_repository_is_refused(project, capsys):
    subprocess.run(["git", "init", "-q", str(project)], check=True)
    (project / "train.py").write_text(TRAIN_WITH_HELPER)
    assert main(["check", "train.py", "--target", "a100", "--cache-dir", str(project / ".cache")]) == 2
    err = capsys.readouterr().err
    assert "which this run checks" in err and "--no-cache" in err
    assert not (project / ".cache" / content_cache.FORMAT).exists()


def test_a_link_planted_for_the_cache_folder_is_refused(project, cache, capsys, tmp_path):
    (project / "train.py").write_text(TRAIN_WITH_HELPER)
    cache.mkdir()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    os.symlink(elsewhere, cache / content_cache.FORMAT)
    assert main(["check", "train.py", "--target", "a100", "--cache-dir", str(cache)]) == 2
    assert "link" in capsys.readouterr().err
    assert not list(elsewhere.iterdir())


def test_the_default_cache_is_the_users_cache_folder(project, tmp_path):
    (project / "train.py").write_text(TRAIN_WITH_HELPER)
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "xdg")}
    done = subprocess.run(
        [sys.executable, "-m", "precision_doctor", "check", "train.py", "--target", "a100", "--fail-on", "never"],
        env=env,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    assert list((tmp_path / "xdg" / "precision-doctor" / content_cache.FORMAT).iterdir())
    assert not any(p.name.startswith(".") for p in project.iterdir())  # nothing written in the checked tree


def test_every_read_a_probe_makes_is_in_its_entry(project, cache, capsys):
    """Completeness: each file, listing and stat made while probing (memo tables warm or cold) is fingerprinted,
    so an entry can only be served while all of them are unchanged."""
    from precision_doctor.system import reads

    (project / "helper.py").write_text(HEAD + HELPER_LOAD.format(dtype="float16"))
    (project / "a_train.py").write_text(TRAIN_WITH_HELPER)
    (project / "b_train.py").write_text(TRAIN_WITH_HELPER)
    run(capsys, "a_train.py", "b_train.py", "--target", "a100", cache=cache)
    import pickle

    manifests = [pickle.loads(p.read_bytes())[2] for p in entries_of(cache)]
    probed = [m for m in manifests if any(key.endswith("_train.py") and kind == "open" for kind, key, _ in m)]
    assert len(probed) == 2
    for m in probed:  # both scripts' entries hold the helper they import, the first to read it and the second
        read = {(kind, key) for kind, key, _ in m}
        assert ("open", str(project / "helper.py")) in read
        assert ("list", str(project)) in read
    assert not reads.recording_now()  # and nothing stays interposed after a run
    assert os.stat is reads._real.get("stat", os.stat)


def test_the_hugging_face_cache_the_environment_names_is_part_of_the_answer(
    project, cache, capsys, monkeypatch, tmp_path
):
    """A checkpoint found in the HF cache ($HF_HOME): another HF_HOME, or another config there, is another answer."""

    def hub(name: str, dtype: str) -> Path:
        snapshot = tmp_path / name / "hub" / "models--acme--tiny" / "snapshots" / "abc123"
        snapshot.mkdir(parents=True)
        config = {"model_type": "llama", "torch_dtype": dtype, "hidden_size": 64, "num_hidden_layers": 2}
        (snapshot / "config.json").write_text(json.dumps(config))
        return tmp_path / name

    (project / "train.py").write_text(
        HEAD + "model = AutoModelForCausalLM.from_pretrained('acme/tiny', dtype='auto')\n"
        "args = TrainingArguments(output_dir='o', fp16=True)\n"
        "Trainer(model=model, args=args).train()\n"
    )
    monkeypatch.setenv("HF_HOME", str(hub("half", "float16")))
    first, _ = run(capsys, "train.py", "--target", "a100", cache=cache)
    assert "PD201" in {r for r, _ in rules_at(first)}  # fp16 weights, as the cached checkpoint stores them
    monkeypatch.setenv("HF_HOME", str(hub("full", "float32")))
    second, counts = run(capsys, "train.py", "--target", "a100", cache=cache)
    assert counts["misses"] == 1
    assert "PD201" not in {r for r, _ in rules_at(second)}


def test_a_yaml_file_that_becomes_a_recipe_is_checked(project, cache, capsys):
    """Whether a folder's YAML is a recipe is decided from its content, cached with it."""
    (project / "train.py").write_text(TRAIN_WITH_HELPER)
    (project / "helper.py").write_text(HEAD + HELPER_LOAD.format(dtype="float32"))
    (project / "settings.yml").write_text("name: demo\nsteps: 10\n")
    first, _ = run(capsys, ".", "--target", "t4", cache=cache)
    assert not any(path == "settings.yml" for _, path in rules_at(first))
    (project / "settings.yml").write_text("base_model: NousResearch/Llama-2-7b-hf\nbf16: true\nadapter: lora\n")
    second, _ = run(capsys, ".", "--target", "t4", cache=cache)
    uncached, _ = run(capsys, ".", "--target", "t4", cache=None)
    assert comparable(second) == comparable(uncached)
    assert any(path == "settings.yml" for _, path in rules_at(second))  # an Axolotl recipe now, bf16 on a T4


def test_the_newest_hf_snapshot_is_chosen_again_when_their_times_change(project, cache, capsys, monkeypatch, tmp_path):
    """transformers loads the newest snapshot: a download into an older one makes it the one the doctor reads."""
    snapshots = tmp_path / "hf" / "hub" / "models--acme--tiny" / "snapshots"
    for name, dtype, when in (("aaaa", "float16", 1_700_000_000), ("bbbb", "float32", 1_710_000_000)):
        (snapshots / name).mkdir(parents=True)
        config = {"model_type": "llama", "torch_dtype": dtype, "hidden_size": 64, "num_hidden_layers": 2}
        (snapshots / name / "config.json").write_text(json.dumps(config))
        os.utime(snapshots / name, (when, when))
    (project / "train.py").write_text(
        HEAD + "model = AutoModelForCausalLM.from_pretrained('acme/tiny', dtype='auto')\n"
        "Trainer(model=model, args=TrainingArguments(output_dir='o', fp16=True)).train()\n"
    )
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    first, _ = run(capsys, "train.py", "--target", "a100", cache=cache)
    assert "PD201" not in {r for r, _ in rules_at(first)}  # bbbb, float32
    os.utime(snapshots / "aaaa", (1_720_000_000, 1_720_000_000))
    second, _ = run(capsys, "train.py", "--target", "a100", cache=cache)
    assert "PD201" in {r for r, _ in rules_at(second)}  # aaaa is the newest now: float16


def test_a_file_edited_while_it_is_probed_is_not_cached_with_the_old_facts(project, cache, capsys, monkeypatch):
    from precision_doctor.system import reads

    old = HEAD + "m = AutoModelForCausalLM.from_pretrained('gpt2', dtype=torch.float32)\n"
    new = HEAD + "m = AutoModelForCausalLM.from_pretrained('gpt2', torch_dtype=torch.float32)\n"
    (project / "train.py").write_text(old)
    take = reads.manifest

    def saved_meanwhile(frame, job_env):  # the editor saves after the probe read the file, before the entry is made
        (project / "train.py").write_text(new)
        return take(frame, job_env)

    monkeypatch.setattr(reads, "manifest", saved_meanwhile)
    run(capsys, "train.py", "--target", "a100", cache=cache)
    monkeypatch.setattr(reads, "manifest", take)
    cached, _ = run(capsys, "train.py", "--target", "a100", cache=cache)
    assert "PD214" in {r for r, _ in rules_at(cached)}  # the file as it is now, not the facts of the old text


def test_a_large_file_edited_in_place_with_its_time_set_back_is_read_again(project, cache, capsys, monkeypatch):
    """Files past the hashing limit are known by size, times and inode; the change time moves on any write."""
    from precision_doctor.system import reads

    monkeypatch.setattr(reads, "MAX_HASHED_BYTES", 64)
    script = HEAD + "m = AutoModelForCausalLM.from_pretrained('gpt2', {}\n"
    current, renamed = "dtype=torch.float32)  #pad", "torch_dtype=torch.float32)"  # the same length
    (project / "train.py").write_text(script.format(current))
    first, _ = run(capsys, "train.py", "--target", "a100", cache=cache)
    assert "PD214" not in {r for r, _ in rules_at(first)}
    before = (project / "train.py").stat()
    time.sleep(0.02)
    (project / "train.py").write_text(script.format(renamed))
    os.utime(project / "train.py", ns=(before.st_atime_ns, before.st_mtime_ns))
    assert (project / "train.py").stat().st_size == before.st_size
    second, counts = run(capsys, "train.py", "--target", "a100", cache=cache)
    assert counts["misses"] == 1
    assert "PD214" in {r for r, _ in rules_at(second)}


@pytest.mark.parametrize("entry", [(5, "x"), (None, None), ((("open", "/etc/passwd"),), "x"), ((), "not facts"), "x"])
def test_an_entry_of_another_shape_is_a_miss_never_a_crash(project, cache, capsys, entry):
    import pickle

    (project / "train.py").write_text(TRAIN_WITH_HELPER)
    (project / "helper.py").write_text(HEAD + HELPER_LOAD.format(dtype="float16"))
    first, _ = run(capsys, "train.py", "--target", "a100", cache=cache)
    for path in entries_of(cache):
        path.write_bytes(pickle.dumps(entry))
    second, counts = run(capsys, "train.py", "--target", "a100", cache=cache)
    assert counts["hits"] == 0
    assert comparable(first) == comparable(second)


def test_an_entry_others_may_write_is_not_loaded_and_a_shared_folder_is_refused(project, cache, capsys):
    (project / "train.py").write_text(TRAIN_WITH_HELPER)
    (project / "helper.py").write_text(HEAD + HELPER_LOAD.format(dtype="float16"))
    run(capsys, "train.py", "--target", "a100", cache=cache)
    folder = cache / content_cache.FORMAT
    for path in entries_of(cache):
        path.chmod(0o666)
    _, counts = run(capsys, "train.py", "--target", "a100", cache=cache)
    assert counts["hits"] == 0
    assert all((p.stat().st_mode & 0o777) == 0o600 for p in entries_of(cache))  # replaced by the user's own
    folder.chmod(0o777)
    assert main(["check", "train.py", "--target", "a100", "--cache-dir", str(cache)]) == 2
    assert "writable by other users" in capsys.readouterr().err


def test_a_script_named_on_the_launch_line_counts_as_checked_for_the_cache(project, capsys):
    repo = project / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (repo / "train.py").write_text(TRAIN_WITH_HELPER)
    launch = "torchrun --nproc_per_node 2 repo/train.py"
    assert main(["check", "--target", "a100", "--launcher", launch, "--cache-dir", str(repo / ".cache")]) == 2
    assert "which this run checks" in capsys.readouterr().err
    assert not (repo / ".cache" / content_cache.FORMAT).exists()


def test_an_unusable_default_cache_folder_leaves_the_run_uncached(project, tmp_path):
    """Only a folder the user named is an error; the default one is skipped with one line on stderr."""
    (project / "train.py").write_text(TRAIN_WITH_HELPER)
    (project / "helper.py").write_text(HEAD + HELPER_LOAD.format(dtype="float16"))
    blocked = tmp_path / "not-a-folder"
    blocked.write_text("")
    env = {**os.environ, "XDG_CACHE_HOME": str(blocked)}
    done = subprocess.run(
        [sys.executable, "-m", "precision_doctor", "check", "train.py", "--target", "a100", "--format", "json"],
        env=env,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 1, done.stderr  # the verdict: PD201
    assert "running without the content cache" in done.stderr
    assert "PD201" in {f["id"] for f in json.loads(done.stdout)["findings"]}


# A folder of at least PARALLEL_FROM scripts is judged where each script is probed: with the cache, each script's
# whole answer (facts, stack, verdict) is one entry, and a second run starts no worker for what it can answer.
MANY = 34


def run_folder(capsys, *args, cache: Path | None) -> tuple[dict, dict[str, int]]:
    before = content_cache.counts("judged")
    options = ["--cache-dir", str(cache)] if cache is not None else ["--no-cache"]
    main(["check", ".", *args, "--format", "json", "--fail-on", "never", "--jobs", "2", *options])
    after = content_cache.counts("judged")
    return json.loads(capsys.readouterr().out), {k: after[k] - before[k] for k in after}


def test_an_unchanged_folder_is_answered_whole_from_the_cache(project, cache, capsys):
    for n in range(MANY):
        (project / f"s{n:02}.py").write_text(
            HEAD + f"m = AutoModelForCausalLM.from_pretrained('gpt2', torch_dtype=torch.float{16 if n % 2 else 32})\n"
        )
    first, _ = run_folder(capsys, "--target", "a100", cache=cache)
    second, warm = run_folder(capsys, "--target", "a100", cache=cache)
    uncached, _ = run_folder(capsys, "--target", "a100", cache=None)
    assert warm == {"hits": MANY, "misses": 0}  # all answered here: no worker probed or judged anything
    assert comparable(first) == comparable(second) == comparable(uncached)
    other, _ = run_folder(capsys, "--target", "t4", cache=cache)  # another machine: judged again
    assert comparable(other) == comparable(run_folder(capsys, "--target", "t4", cache=None)[0])
    assert comparable(other) != comparable(second)


def test_a_requirements_pin_reaches_every_script_of_its_folder_through_the_cache(project, cache, capsys, tmp_path):
    """The folder's declared stack is read once a run and served to each of its scripts: each cached answer still
    holds the requirements file, so a changed pin changes every script's verdict, not only the first one's."""
    from .test_versions import _fake_env

    python = _fake_env(tmp_path / "bare", {})  # nothing installed: the project's pins decide
    for n in range(MANY):
        (project / f"s{n:02}.py").write_text(
            HEAD + "m = AutoModelForCausalLM.from_pretrained('gpt2', torch_dtype=torch.float32)\n"
        )
    (project / "requirements.txt").write_text("transformers==4.46.3\n")
    args = ("--target", "a100", "--python", str(python))
    first, _ = run_folder(capsys, *args, cache=cache)
    assert not [f for f in first["findings"] if f["id"] == "PD214"]  # torch_dtype= is the name 4.46 knows
    (project / "requirements.txt").write_text("transformers==5.2.0\n")
    second, _ = run_folder(capsys, *args, cache=cache)
    assert len({f["path"] for f in second["findings"] if f["id"] == "PD214"}) == MANY
    assert comparable(second) == comparable(run_folder(capsys, *args, cache=None)[0])


def test_an_edited_script_in_a_cached_folder_is_judged_again_alone(project, cache, capsys):
    for n in range(MANY):
        (project / f"s{n:02}.py").write_text(
            HEAD + "m = AutoModelForCausalLM.from_pretrained('gpt2', dtype=torch.float32)\n"
        )
    run_folder(capsys, "--target", "a100", cache=cache)
    (project / "s07.py").write_text(
        HEAD + "m = AutoModelForCausalLM.from_pretrained('gpt2', torch_dtype=torch.float32)\n"
    )
    second, counts = run_folder(capsys, "--target", "a100", cache=cache)
    assert [f["path"] for f in second["findings"] if f["id"] == "PD214"] == ["s07.py"]
    assert counts == {"hits": MANY - 1, "misses": 1}  # the edited one, judged here


# What an independent review found making a cached folder run disagree with an uncached one: each is a case here.
def _trainers(project: Path, body: str) -> None:
    for n in range(MANY):
        (project / f"s{n:02}.py").write_text(body)


def test_two_environments_sharing_their_packages_are_two_answers(project, cache, capsys, tmp_path):
    """The stack names the environment its versions were read from: a run with another --python whose package
    folders are the same is judged again, not told the first environment's name."""
    for name in ("A", "B"):
        (tmp_path / name / "bin").mkdir(parents=True)
        (tmp_path / name / "bin" / "python").write_text("")
        (tmp_path / name / "pyvenv.cfg").write_text(
            f"home = {Path(sys.executable).parent}\ninclude-system-site-packages = true\n"
        )
    _trainers(project, TRAIN_WITH_HELPER.replace("fp16=True", "bogus_flag=1"))
    (project / "helper.py").write_text(HEAD + HELPER_LOAD.format(dtype="float32"))

    def named(python: Path, cache_dir: Path | None) -> set[str]:
        report, _ = run_folder(capsys, "--target", "a100", "--python", str(python), cache=cache_dir)
        return {
            m.split("installed, ", 1)[1].split(")")[0]
            for f in report["findings"]
            for m in [f["message"]]
            if "installed, " in m
        }

    named(tmp_path / "A" / "bin" / "python", cache)
    assert named(tmp_path / "B" / "bin" / "python", cache) == named(tmp_path / "B" / "bin" / "python", None)


def test_a_link_and_a_file_named_with_its_marker_list_differently(project, cache, capsys):
    (project / "real").mkdir()
    (project / "real" / "h.py").write_text(HEAD + HELPER_LOAD.format(dtype="bfloat16"))
    (project / "helper.py@").write_text("junk\n")
    _trainers(project, TRAIN_WITH_HELPER)
    run_folder(capsys, "--target", "t4", cache=cache)
    (project / "helper.py@").unlink()
    (project / "helper.py").symlink_to(project / "real" / "h.py")
    cached, _ = run_folder(capsys, "--target", "t4", cache=cache)
    assert comparable(cached) == comparable(run_folder(capsys, "--target", "t4", cache=None)[0])


def test_an_entry_under_another_entrys_name_is_a_miss(project, cache, capsys):
    for n in range(MANY):
        (project / f"s{n:02}.py").write_text(
            HEAD + f"m = AutoModelForCausalLM.from_pretrained('gpt2', torch_dtype=torch.float{16 if n % 2 else 32})\n"
        )
    run_folder(capsys, "--target", "t4", cache=cache)
    names = entries_of(cache)
    contents = [p.read_bytes() for p in names]
    for path, data in zip(names, contents[1:] + contents[:1], strict=True):
        path.write_bytes(data)  # each entry renamed into its neighbour's place
    cached, counts = run_folder(capsys, "--target", "t4", cache=cache)
    assert counts["hits"] == 0
    assert comparable(cached) == comparable(run_folder(capsys, "--target", "t4", cache=None)[0])


def test_a_module_created_while_the_folder_is_probed_is_not_cached_as_missing(project, cache, capsys, monkeypatch):
    """A helper that appears after the folder was listed and before the answers are stored: the answers that saw
    it missing are not kept, so the next run (the tree now still) agrees with an uncached one."""
    from precision_doctor.probes import script

    listed = script._listing

    def listing_then_an_editor_saves(folder):
        found = listed(folder)
        helper = project / "helper.py"
        if os.path.realpath(folder) == os.path.realpath(project) and not helper.exists():
            helper.write_text(HEAD + HELPER_LOAD.format(dtype="bfloat16"))
        return found

    _trainers(project, TRAIN_WITH_HELPER)
    monkeypatch.setattr(script, "_listing", listing_then_an_editor_saves)
    run_folder(capsys, "--target", "t4", cache=cache)
    monkeypatch.setattr(script, "_listing", listed)
    cached, _ = run_folder(capsys, "--target", "t4", cache=cache)
    assert comparable(cached) == comparable(run_folder(capsys, "--target", "t4", cache=None)[0])


def test_a_rule_selection_digests_alike_in_every_process():
    """Sets pickle in an order that follows the string hash seed: a digest of `--ignore PD101,PD201` must not, or
    a folder run with two ignored rules never finds its answers again."""
    code = (
        "from precision_doctor.system import content_cache as c\n"
        "from precision_doctor.settings import Policy\n"
        "print(c.digest(Policy(ignore=frozenset({'PD101', 'PD201', 'PD303', 'PD404'}))))\n"
    )
    digests = {
        subprocess.run(
            [sys.executable, "-c", code], env={**os.environ, "PYTHONHASHSEED": seed}, capture_output=True, text=True
        ).stdout
        for seed in ("1", "2", "3")
    }
    assert len(digests) == 1 and "None" not in digests.pop()


def test_a_killed_writers_temp_in_the_cache_goes_with_the_next_run_that_writes(project, cache, capsys):
    from precision_doctor.system import safe_io

    (project / "train.py").write_text(
        TRAIN_WITH_HELPER.replace("from helper import load\nmodel = load()\n", "model = 1\n")
    )
    run(capsys, "train.py", "--target", "a100", cache=cache)
    folder = cache / content_cache.FORMAT
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = folder / f".entry.{safe_io.TEMP_TAG}-{dead.pid}-abc123.tmp"
    stale.write_bytes(b"half an entry")
    run(capsys, "train.py", "--target", "a100", cache=cache)  # every answer cached: nothing written, nothing swept
    assert stale.exists()
    (project / "train.py").write_text(
        TRAIN_WITH_HELPER.replace("from helper import load\nmodel = load()\n", "model = 2\n")
    )
    run(capsys, "train.py", "--target", "a100", cache=cache)
    assert not stale.exists()


def test_entries_not_written_for_a_month_go_at_most_once_a_day(project, cache, capsys):
    plain = TRAIN_WITH_HELPER.replace("from helper import load\nmodel = load()\n", "model = {}\n")
    (project / "train.py").write_text(plain.format(1))
    run(capsys, "train.py", "--target", "a100", cache=cache)
    folder = cache / content_cache.FORMAT
    old, recent = folder / ("0" * 64), folder / ("f" * 64)  # entries of other files, which these runs do not use
    for entry in (old, recent):
        entry.write_bytes(b"an entry")
        entry.chmod(0o600)
    month_ago = time.time() - (content_cache.UNUSED_DAYS + 1) * 86400
    os.utime(old, (month_ago, month_ago))
    (project / "train.py").write_text(plain.format(2))
    run(capsys, "train.py", "--target", "a100", cache=cache)  # pruned the day of the first run: not again
    assert old.exists()
    day_ago = time.time() - 2 * 86400
    os.utime(folder / ".pruned", (day_ago, day_ago))
    (project / "train.py").write_text(plain.format(3))
    run(capsys, "train.py", "--target", "a100", cache=cache)
    assert not old.exists() and recent.exists()


def test_a_link_is_recorded_as_it_was_when_read(tmp_path):
    """A link retargeted after the probe looked at it (and before its entry is written) must not be recorded with
    the new target beside what the probe made of the old one."""
    from precision_doctor.system import reads

    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    link = tmp_path / "deep"
    link.symlink_to("a")
    with reads.recording() as frame:
        os.path.realpath(link)  # lstat + readlink, as resolving a shown path does
        link.unlink()
        link.symlink_to("b")
    manifest = reads.manifest(frame, None)
    assert ("lstat", str(link), ("link", "a")) in manifest
    assert not reads.unchanged(manifest, None)


def test_a_planted_or_future_prune_mark_neither_stops_pruning_nor_writing(project, cache, capsys):
    plain = TRAIN_WITH_HELPER.replace("from helper import load\nmodel = load()\n", "model = {}\n")
    (project / "train.py").write_text(plain.format(1))
    run(capsys, "train.py", "--target", "a100", cache=cache)
    folder = cache / content_cache.FORMAT
    old = folder / ("0" * 64)
    old.write_bytes(b"an entry")
    old.chmod(0o600)
    month_ago = time.time() - (content_cache.UNUSED_DAYS + 1) * 86400
    os.utime(old, (month_ago, month_ago))
    future = time.time() + 5 * 365 * 86400  # a cache restored from a machine whose clock was ahead
    os.utime(folder / ".pruned", (future, future))
    (project / "train.py").write_text(plain.format(2))
    run(capsys, "train.py", "--target", "a100", cache=cache)
    assert not old.exists()  # pruned despite the mark
    (folder / ".pruned").unlink()
    (folder / ".pruned").mkdir()  # planted as a folder
    for entry in entries_of(cache):
        os.utime(entry, (month_ago + 86400, month_ago + 86400))  # old, but not old enough to go
    (project / "train.py").write_text(plain.format(3))
    run(capsys, "train.py", "--target", "a100", cache=cache)
    assert not (folder / ".pruned").is_dir()
    assert max(e.stat().st_mtime for e in entries_of(cache)) > time.time() - 3600  # the run's answers written
