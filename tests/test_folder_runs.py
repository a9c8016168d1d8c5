"""Folder runs check what a repository trains with: scripts, notebooks, the recipes of the families the doctor
knows and SLURM job scripts, recognised by content; a recipe a script reads is judged with it, once; a job script
is its own run, with its launch."""

import json
import shutil
from pathlib import Path

import pytest

from precision_doctor import engine
from precision_doctor.knowledge.versions import CURRENT
from precision_doctor.probes.collect import gather
from precision_doctor.report.json_report import render

from .conftest import machine_probes
from .test_notebooks import notebook

CONFIGS = Path(__file__).resolve().parents[1] / "fixtures" / "configs"
TRAINER = (
    "import torch\n"
    "from transformers import AutoModelForCausalLM, Trainer, TrainingArguments\n"
    "model = AutoModelForCausalLM.from_pretrained('gpt2', dtype=torch.float32{dm})\n"
    "Trainer(model=model, args=TrainingArguments('out', fp16=True)).train()\n"
)


def check(folder, target="t4"):
    facts = gather([str(folder)], target=target, stack_overrides=dict(CURRENT), **machine_probes())
    result = engine.run(facts)
    return result, facts, json.loads(render(result, facts))


def checked(facts) -> set[str]:
    return {Path(s.path).name for s in facts.all_scripts} | {Path(r.job.path).name for r in facts.jobs}


def test_a_folder_checks_its_notebook_script_and_recipe_and_nothing_else(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text(TRAINER.format(dm=""))
    (tmp_path / "nb.ipynb").write_text(notebook("float16"))
    (tmp_path / "recipes").mkdir()
    shutil.copy(CONFIGS / "axolotl" / "seed001_titan_full_ft.yml", tmp_path / "recipes" / "full.yml")
    (tmp_path / ".github" / "workflows").mkdir(parents=True)
    (tmp_path / ".github" / "workflows" / "ci.yml").write_text("name: ci\non: push\njobs: {}\n")
    (tmp_path / "environment.yml").write_text("name: ml\ndependencies: [python=3.11]\n")
    (tmp_path / "data.json").write_text('[{"text": "hello"}]')
    (tmp_path / "run.sh").write_text("#!/bin/bash\npython train.py\n")  # a launch script, no #SBATCH: not a job
    result, facts, report = check(tmp_path)
    assert checked(facts) == {"train.py", "nb.ipynb", "full.yml"}
    assert report["files"]["checked"] == 3
    assert {Path(f["path"]).name for f in report["findings"]} >= {"nb.ipynb", "full.yml"}


def test_a_folder_of_recipes_alone_is_checked(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for family, name in (("axolotl", "seed001_titan_full_ft.yml"), ("llamafactory", "seed001_titan_bf16_lora.yaml")):
        shutil.copy(CONFIGS / family / name, tmp_path / name)
    _, facts, _ = check(tmp_path, target="titan-rtx")
    assert checked(facts) == {"seed001_titan_full_ft.yml", "seed001_titan_bf16_lora.yaml"}


def test_a_recipe_a_script_reads_is_judged_with_it_once(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    shutil.copy(CONFIGS / "axolotl" / "seed001_titan_full_ft.yml", tmp_path / "ax.yml")
    (tmp_path / "reads.py").write_text(
        "import yaml\nfrom transformers import TrainingArguments\n"
        "cfg = yaml.safe_load(open('ax.yml'))\n"
        "args = TrainingArguments(output_dir='out', learning_rate=cfg['learning_rate'])\n"
    )
    _, facts, _ = check(tmp_path)
    assert checked(facts) == {"reads.py"}
    (tmp_path / "reads.py").write_text("import yaml\nprint(1)\n")  # reads no recipe: the recipe is its own
    _, facts, _ = check(tmp_path)
    assert checked(facts) == {"reads.py", "ax.yml"}


@pytest.mark.parametrize("job", ["job.sbatch", "submit.sh"])  # a SLURM job named .sh: a job by its #SBATCH lines
def test_a_job_script_in_a_folder_is_its_own_run(tmp_path, monkeypatch, job):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text(TRAINER.format(dm=", device_map='auto'"))
    (tmp_path / "other.py").write_text(TRAINER.format(dm=""))
    (tmp_path / "slurm").mkdir()
    (tmp_path / "slurm" / job).write_text(
        "#!/bin/bash\n#SBATCH --gres=gpu:2\ncd ..\nsrun torchrun --nproc_per_node 4 train.py\n"
    )
    result, facts, report = check(tmp_path, target="a100")
    assert checked(facts) == {"train.py", "other.py", job}
    by_path = {}
    for f in result.findings:
        by_path.setdefault(Path(f.path).name, set()).add(f.rule_id)
    assert "PD116" in by_path[job]  # 4 processes, 2 GPUs asked for: reported on the job script
    assert "PD302" in by_path["train.py"]  # device_map="auto" under the job's DDP ranks, judged once
    assert len([f for f in result.findings if f.rule_id == "PD302"]) == 1
    assert "PD302" not in by_path.get("other.py", set())  # the script no job launches: one process


def test_recipes_of_a_format_the_doctor_does_not_model_are_listed_not_hidden(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text(TRAINER.format(dm=""))
    (tmp_path / "v1.yaml").write_text("model: Qwen/Qwen3-0.6B\nmodel_class: llm\ntrainer: {}\n")
    _, facts, report = check(tmp_path)
    reasons = {Path(u["path"]).name: u["reason"] for u in report["unknowns"] if u["what"] == "not checked"}
    assert "LLaMA-Factory v1" in reasons["v1.yaml"]


TRL_RECIPE = (
    "model_name_or_path: Qwen/Qwen2.5-0.5B\ntorch_dtype: bfloat16\nattn_implementation: flash_attention_2\n"
    "dataset_name: trl-lib/Capybara\nbf16: true\nper_device_train_batch_size: 2\noutput_dir: out\n"
)


def test_trl_recipes_are_checked_as_trls_script_reads_them(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "recipes").mkdir()
    (tmp_path / "recipes" / "sft.yaml").write_text(TRL_RECIPE)
    result, facts, _ = check(tmp_path, target="t4")
    assert checked(facts) == {"sft.yaml"}
    found = {f.rule_id for f in result.findings}
    assert "PD106" in found  # FlashAttention-2 needs Ampere: a T4 refuses it
    result, _, _ = check(tmp_path, target="a100")
    assert not {f.rule_id for f in result.findings if f.severity == "error"}
