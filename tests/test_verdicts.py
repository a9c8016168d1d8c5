"""Verdicts a team can trust: an error only where every path to training dies on the script's stack, a helper
module checked through the scripts that train with it, and a file list that survives one bad file."""

import os
import subprocess
import sys

import pytest

from precision_doctor.probes.collect import gather

_T4_BF16 = (
    "import torch\nfrom transformers import AutoModelForCausalLM, Trainer, TrainingArguments\n"
    "model = AutoModelForCausalLM.from_pretrained('gpt2', dtype=torch.float32)\n"
    "Trainer(model=model, args=TrainingArguments('o', bf16=True)).train()\n"
)


def _severity(result, rule_id):
    return sorted(f.severity for f in result.findings if f.rule_id == rule_id)


def test_bf16_on_a_t4_is_an_error_only_where_the_stack_refuses_it(run_check):
    refused, _ = run_check(_T4_BF16, target="t4", versions={"torch": "2.2.2"})
    emulated, _ = run_check(_T4_BF16, target="t4")
    assert _severity(refused, "PD101") == ["error"]
    assert _severity(emulated, "PD101") == ["warning"]
    assert "emulated" in next(f.message for f in emulated.findings if f.rule_id == "PD101")


def test_bf16_on_a_branch_behind_a_flag_is_a_warning_naming_the_flag(run_check):
    code = (
        "import sys, torch\nfrom transformers import AutoModelForCausalLM, Trainer, TrainingArguments\n"
        "model = AutoModelForCausalLM.from_pretrained('gpt2', dtype=torch.float32)\n"
        "if '--pure_bf16' in sys.argv:\n    model.to(torch.bfloat16)\n"
        "Trainer(model=model, args=TrainingArguments('o', fp16=True)).train()\n"
    )
    result, _ = run_check(code, target="t4", versions={"torch": "2.2.2"})
    found = [f for f in result.findings if f.rule_id == "PD101"]
    assert [f.severity for f in found] == ["warning"]
    assert "'--pure_bf16' in sys.argv" in found[0].message


def test_an_emulating_guard_is_a_warning(run_check):
    code = (
        "import torch\nfrom transformers import AutoModelForCausalLM, Trainer, TrainingArguments\n"
        "bf16 = torch.cuda.is_bf16_supported()\n"
        "model = AutoModelForCausalLM.from_pretrained('gpt2', dtype=torch.float32)\n"
        "Trainer(model=model, args=TrainingArguments('o', bf16=bf16, fp16=not bf16)).train()\n"
    )
    result, _ = run_check(code, target="t4")
    assert _severity(result, "PD102") == ["warning"] and not _severity(result, "PD101")


def test_sftconfig_defaults_to_bf16_on_a_t4(run_check):
    code = (
        "import torch\nfrom transformers import AutoModelForCausalLM\nfrom trl import SFTConfig, SFTTrainer\n"
        "model = AutoModelForCausalLM.from_pretrained('gpt2', dtype=torch.float32)\n"
        "SFTTrainer(model=model, args=SFTConfig(output_dir='out'), train_dataset=None).train()\n"
    )
    result, _ = run_check(code, target="t4")
    assert "PD101" in {f.rule_id for f in result.findings}


def test_pd211_is_quiet_for_an_fp32_checkpoint_and_likely_for_an_unknown_one(run_check, tmp_path):
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "ckpt" / "config.json").write_text('{"model_type": "gpt2", "dtype": "float32"}')
    code = (
        "from transformers import AutoModelForCausalLM, Trainer, TrainingArguments\n"
        "model = AutoModelForCausalLM.from_pretrained('{src}')\n"
        "Trainer(model=model, args=TrainingArguments('o', fp16=True)).train()\n"
    )
    local, _ = run_check(code.format(src="./ckpt"))
    hub, _ = run_check(code.format(src="my-org/private-7b"))  # in no local path, cache or shipped table
    assert "PD211" not in {f.rule_id for f in local.findings}
    assert [str(f.confidence) for f in hub.findings if f.rule_id == "PD211"] == ["likely"]


def _doctor(*args, cwd, env=None):
    return subprocess.run(
        [sys.executable, "-m", "precision_doctor", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={**os.environ, **(env or {})},
        stdin=subprocess.DEVNULL,
    )


def test_a_file_list_with_bad_files_goes_on(tmp_path):
    (tmp_path / "empty.py").write_text("")
    (tmp_path / "__init__.py").write_text("")
    (tmp_path / "broken.py").write_text("def f(:\n")
    (tmp_path / "train.py").write_text(_T4_BF16)
    out = _doctor(
        "check", "empty.py", "__init__.py", "broken.py", "train.py", "--target", "t4", "--format", "json", cwd=tmp_path
    )
    assert out.returncode == 0, out.stderr
    assert "PD101" in out.stdout and "broken.py" in out.stdout
    nothing = _doctor("check", "empty.py", "broken.py", cwd=tmp_path)
    assert nothing.returncode == 2 and len(nothing.stderr.strip().splitlines()) == 1


@pytest.fixture
def helper_project(tmp_path):
    """A repository whose train.py imports a helper module that loads the model in fp16 (PD201 at its line 6)."""
    (tmp_path / ".git").mkdir()
    (tmp_path / "model_utils.py").write_text(
        "import torch\nfrom transformers import AutoModelForCausalLM\n\n\ndef load():\n"
        "    return AutoModelForCausalLM.from_pretrained('gpt2', dtype=torch.float16)\n"
    )
    (tmp_path / "train.py").write_text(
        "from transformers import Trainer, TrainingArguments\nfrom model_utils import load\n"
        "model = load()\nTrainer(model=model, args=TrainingArguments('o', fp16=True)).train()\n"
    )
    return tmp_path


def test_a_helper_module_alone_is_checked_through_the_scripts_that_import_it(helper_project):
    tmp_path = helper_project
    facts = gather([str(tmp_path / "model_utils.py")], target="a100", environ={})
    assert {os.path.basename(s.path) for s in facts.scripts} == {"model_utils.py", "train.py"}
    out = _doctor("check", "model_utils.py", "--target", "a100", cwd=tmp_path)
    assert out.returncode == 1 and "model_utils.py:6" in out.stdout


def test_a_helper_named_alone_is_not_blamed_for_its_importer_s_own_finding(helper_project):
    """Issue 32: a per-file gate on the helper fails for the helper's finding (its fp16 load, seen through the
    importer that trains with it), never for one that lies wholly in the importer (its deprecated GradScaler)."""
    tmp_path = helper_project
    train = tmp_path / "train.py"
    train.write_text("import torch\nscaler = torch.cuda.amp.GradScaler()\n" + train.read_text())
    alone = _doctor("check", "model_utils.py", "--target", "a100", "--format", "concise", cwd=tmp_path)
    assert alone.returncode == 1 and "model_utils.py:6:" in alone.stdout and "PD201" in alone.stdout
    assert "PD213" not in alone.stdout and "train.py:2" not in alone.stdout
    importer = _doctor("check", "train.py", "--target", "a100", "--format", "concise", cwd=tmp_path)
    assert "train.py:2:" in importer.stdout and "PD213" in importer.stdout  # checked as itself, it has both
    assert "model_utils.py:6:" in importer.stdout


def test_a_helper_named_beside_its_importer_checks_that_importer_once(helper_project):
    """`check model_utils.py train.py` (a pre-commit hook staging both): train.py is named, so it is not added
    again as an importer of the helper (named relative, found under the repository root absolute)."""
    tmp_path = helper_project
    concise = _doctor("check", "model_utils.py", "train.py", "--target", "a100", "--format", "concise", cwd=tmp_path)
    assert concise.returncode == 1, concise.stderr
    lines = concise.stdout.splitlines()
    assert len(lines) == 1 and lines[0].startswith("model_utils.py:6:") and "PD201" in lines[0], lines
    text = _doctor("check", "model_utils.py", "train.py", "--target", "a100", "-v", cwd=tmp_path).stdout
    assert "2 files checked" in text and text.count("\ntrain.py ") == 1, text


def test_a_file_named_and_found_again_in_a_named_folder_is_checked_once(helper_project):
    """`check model_utils.py .`, `check ./train.py /abs/path/to/train.py`: each file is checked and listed once."""
    tmp_path = helper_project
    for args in (["model_utils.py", "."], [".", "./train.py", str(tmp_path / "model_utils.py")]):
        out = _doctor("check", *args, "--target", "a100", "-v", cwd=tmp_path)
        assert out.returncode == 1, out.stderr
        assert "2 files checked" in out.stdout, out.stdout
        listed = [
            line.split()[0]
            for line in out.stdout.splitlines()
            if line.endswith(("finding", "found")) and line.split()[0].endswith(".py")
        ]
        assert sorted(listed) == ["model_utils.py", "train.py"], out.stdout


def test_a_path_through_a_folder_link_and_dot_dot_is_not_merged_with_another_file(tmp_path):
    """`sub/deep/../x.py` where `sub/deep` links to `other/inner` is other/x.py, not sub/x.py: both are checked
    and shown where they are, and sub/x.py's error is not dropped as a duplicate (a false pass)."""
    (tmp_path / ".git").mkdir()
    (tmp_path / "sub").mkdir()
    (tmp_path / "other" / "inner").mkdir(parents=True)
    (tmp_path / "sub" / "deep").symlink_to(tmp_path / "other" / "inner")
    (tmp_path / "sub" / "x.py").write_text(
        "import torch\nfrom transformers import AutoModelForCausalLM, Trainer, TrainingArguments\n"
        "model = AutoModelForCausalLM.from_pretrained('gpt2', dtype=torch.float16)\n"
        "Trainer(model=model, args=TrainingArguments('o', fp16=True)).train()\n"
    )
    (tmp_path / "other" / "x.py").write_text("print('no training')\n")
    for args in (["sub/deep/../x.py", "sub/x.py"], ["sub/x.py", "sub/deep/../x.py"]):
        out = _doctor("check", *args, "--target", "a100", "-v", cwd=tmp_path)
        assert out.returncode == 1 and "PD201" in out.stdout and "2 files checked" in out.stdout, out.stdout
        # each shown where it is: other/x.py is clean (it was shown as a second sub/x.py, with sub/x.py's findings)
        assert "\nsub/x.py  1 finding" in out.stdout and "\nother/x.py  no problems found" in out.stdout, out.stdout
    outside = _doctor("check", "../x.py", "--target", "a100", "--format", "concise", cwd=tmp_path / "sub" / "deep")
    assert outside.stdout == "" and outside.returncode == 0  # ../x.py from inside the link: other/x.py, clean


def test_nothing_checkable_is_exit_2_however_many_files_unless_the_run_goes_on(tmp_path):
    """Two staged empty `__init__.py` files pass a pre-commit hook (`--keep-going`) as one does; a folder whose only
    script cannot be parsed is bad input (exit 2, one line) as two such files are."""
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "__init__.py").write_text("")
    hook = _doctor("check", "--keep-going", "a/__init__.py", "b/__init__.py", "--target", "a100", cwd=tmp_path)
    assert hook.returncode == 0 and "0 with findings" in hook.stdout, hook.stdout + hook.stderr
    alone = _doctor("check", "a/__init__.py", "b/__init__.py", "--target", "a100", cwd=tmp_path)
    assert alone.returncode == 0, alone.stderr  # empty files are nothing to check, never bad input
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "train.py").write_text("def f(:\n")
    folder = _doctor("check", "broken", "--target", "a100", cwd=tmp_path)
    assert folder.returncode == 2 and len(folder.stderr.strip().splitlines()) == 1, folder.stderr
    going_on = _doctor("check", "--keep-going", "broken", "--target", "a100", cwd=tmp_path)
    assert going_on.returncode == 0 and "not checked" in going_on.stdout, going_on.stdout + going_on.stderr


def test_a_finding_in_a_module_of_a_subfolder_names_that_module_where_it_is(tmp_path):
    (tmp_path / "recipes" / "utils").mkdir(parents=True)
    (tmp_path / "recipes" / "utils" / "loading.py").write_text(
        "import torch\nfrom transformers import AutoModelForCausalLM\n\n\ndef load():\n"
        "    return AutoModelForCausalLM.from_pretrained('gpt2', dtype=torch.float16)\n"
    )
    (tmp_path / "recipes" / "train.py").write_text(
        "from transformers import Trainer, TrainingArguments\nfrom utils.loading import load\n"
        "model = load()\nTrainer(model=model, args=TrainingArguments('o', fp16=True)).train()\n"
    )
    alone = _doctor("check", "recipes/train.py", "--target", "a100", "--format", "concise", cwd=tmp_path)
    folder = _doctor("check", "recipes", "--target", "a100", "--format", "concise", cwd=tmp_path)
    for out in (alone, folder):
        assert out.returncode == 1, out.stderr
        assert os.path.join("recipes", "utils", "loading.py") + ":6:" in out.stdout
        assert os.path.join("recipes", "loading.py") not in out.stdout  # a path that does not exist


def test_check_without_a_path_in_ci_says_only_the_machine_was_checked(tmp_path):
    out = _doctor("check", "--target", "a100", cwd=tmp_path, env={"CI": "true"})
    assert out.returncode == 0
    assert out.stderr.count("\n") == 1 and "only the machine was checked" in out.stderr
