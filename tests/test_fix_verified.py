"""`fix --yes --unsafe` never makes a script worse: over every rule's firing examples, every seed fixture and a set of
real-looking scripts (shared values, aliases, missing imports, `self.` attributes), the result parses, reads no name
it does not define, and a check with the same machine and launch shows no finding at a severity (warning or above)
more often than before. Undefined names are found here with the standard library's symtable, independently of the
fixer's own libcst scope analysis."""

import builtins
import io
import shutil
import symtable
from pathlib import Path

import pytest

pytest.importorskip("libcst")

from rich.console import Console  # noqa: E402

from precision_doctor.fix.session import run_engine_check, run_fix  # noqa: E402
from precision_doctor.knowledge.versions import CURRENT  # noqa: E402
from precision_doctor.probes.collect import gather  # noqa: E402
from precision_doctor.rules.catalog import rules  # noqa: E402

from .conftest import machine_probes, write_files  # noqa: E402
from .test_seed_fixtures import CASES as SEED_CASES  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
RANK = {"error": 0, "warning": 1}


def undefined(code: str) -> set[str]:
    """Names read in some scope that neither that scope, an enclosing function, the module nor builtins binds."""
    top = symtable.symtable(code, "t.py", "exec")
    module = {s.get_name() for s in top.get_symbols() if s.is_assigned() or s.is_imported()}
    if any(s.get_name() == "*" for s in top.get_symbols()):
        return set()
    found = set()

    def visit(table, enclosing):
        bound = (
            {s.get_name() for s in table.get_symbols() if s.is_assigned() or s.is_imported() or s.is_parameter()}
            if table.get_type() == "function"
            else set()
        )
        for s in table.get_symbols():
            name = s.get_name()
            if not s.is_referenced() or s.is_assigned() or s.is_imported() or s.is_parameter():
                continue
            if s.is_free() and name in enclosing:
                continue
            if name not in module and not hasattr(builtins, name) and name != "__file__":
                found.add(name)
        for child in table.get_children():
            visit(child, enclosing | bound)

    visit(top, set())
    return found


def worse(before, after) -> list[str]:
    """Each rule that fires more often at a severity (or above) than it did, warning and up."""
    out = []
    for rule_id in {f.rule_id for f in after}:
        for sev, rank in RANK.items():
            n_after = sum(1 for f in after if f.rule_id == rule_id and RANK.get(f.severity, 9) <= rank)
            n_before = sum(1 for f in before if f.rule_id == rule_id and RANK.get(f.severity, 9) <= rank)
            if n_after > n_before:
                out.append(f"{rule_id} at {sev}: {n_before} → {n_after}")
    return out


def fix_all(
    files: list[Path],
    script: Path,
    *,
    target=None,
    launcher=None,
    script_args=(),
    versions=None,
    machine=None,
    env=None,
):
    """Run `fix --yes --unsafe` in-process; the findings before and after, the texts before, and the screen."""

    def facts():
        return gather(
            [str(script)],
            target=target,
            launcher=launcher,
            script_args=tuple(script_args),
            stack_overrides={**CURRENT, **(versions or {})},
            **machine_probes(machine, env),
        )

    check = run_engine_check(facts, None)
    before_texts = {p: p.read_text(encoding="utf-8") for p in files}
    before = check()
    screen = io.StringIO()
    run_fix(check, yes=True, diff_only=False, unsafe=True, select=None, console=Console(file=screen, width=300))
    return before, check(), before_texts, screen.getvalue()


def assert_not_worse(files, before, after, before_texts, screen):
    for path in files:
        text = path.read_text(encoding="utf-8")
        if path.suffix != ".py":  # a recipe: fixes to it are display-only, so it must be unchanged
            assert text == before_texts[path], (text, screen)
            continue
        compile(text, str(path), "exec")
        assert undefined(text) <= undefined(before_texts[path]), (undefined(text), text, screen)
    assert not worse(before, after), (worse(before, after), {p.name: p.read_text() for p in files}, screen)
    # a fix that was applied made its finding go; one that could not be verified was named as left, with why
    fixable_left = [f for f in after if f.fix and f.fix.appliable(unsafe=True)]
    for f in fixable_left:
        assert f"left     {f.rule_id}" in screen or f.rule_id not in {b.rule_id for b in before}, (f, screen)


EXAMPLES = [(r.id, i, ex) for r in rules() for i, ex in enumerate(r.fires)]


@pytest.mark.parametrize("rule_id,index,example", EXAMPLES, ids=[f"{r}-{i}" for r, i, _ in EXAMPLES])
def test_fixing_a_firing_example_makes_nothing_worse(tmp_path, monkeypatch, rule_id, index, example):
    monkeypatch.chdir(tmp_path)
    write_files(tmp_path, example.files)
    script = tmp_path / example.name
    script.write_text(example.code, encoding="utf-8")
    before, after, texts, screen = fix_all(
        [script],
        script,
        target=example.target,
        launcher=example.launcher,
        script_args=example.script_args,
        versions=example.versions,
        machine=example.machine,
        env=example.env,
    )
    assert_not_worse([script], before, after, texts, screen)


SEEDS = [c for c in SEED_CASES if "fixed" not in c[0]]


@pytest.mark.parametrize("rel,target,args", [c[:3] for c in SEEDS], ids=[f"{c[0]}@{c[1]}" for c in SEEDS])
def test_fixing_a_seed_fixture_makes_nothing_worse(tmp_path, monkeypatch, rel, target, args):
    seed = rel.split("/")[0]
    shutil.copytree(ROOT / "fixtures" / seed, tmp_path / seed)
    monkeypatch.chdir(tmp_path)
    script = tmp_path / rel
    files = sorted(script.parent.glob("*.py"))
    before, after, texts, screen = fix_all(files, script, target=target, script_args=args)
    assert_not_worse(files, before, after, texts, screen)
    assert "applied" in screen


# --- real-looking scripts --------------------------------------------------------------------------------------

ALIASED_TORCH = """\
import torch as T
from transformers import AutoModelForCausalLM, Trainer, TrainingArguments

model = AutoModelForCausalLM.from_pretrained("gpt2", torch_dtype=T.float16)
args = TrainingArguments("out", fp16=True)
Trainer(model=model, args=args).train()
"""

NO_TORCH_IMPORT = """\
from transformers import AutoModelForCausalLM, Trainer, TrainingArguments

model = AutoModelForCausalLM.from_pretrained("gpt2", torch_dtype="float16")
args = TrainingArguments("out", fp16=True)
Trainer(model=model, args=args).train()
"""

SHARED_DTYPE = """\
import argparse
import torch
from transformers import AutoModelForCausalLM, Trainer, TrainingArguments

parser = argparse.ArgumentParser()
parser.add_argument("--dtype", default="float16")
cli = parser.parse_args()
dtype = getattr(torch, cli.dtype)
model = AutoModelForCausalLM.from_pretrained("gpt2", torch_dtype=dtype)
args = TrainingArguments("out", fp16=True)
Trainer(model=model, args=args).train()
"""

SELF_ATTRIBUTES = """\
import torch


class Runner:
    def __init__(self, model):
        self.model = model
        self.optimizer = torch.optim.AdamW(model.parameters())
        self.scaler = torch.amp.GradScaler("cuda")

    def step(self, x):
        with torch.autocast("cuda", dtype=torch.float16):
            loss = self.model(x).sum()
        self.scaler.scale(loss).backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.scaler.step(self.optimizer)
        self.scaler.update()

    def evaluate(self, x):
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        return self.model(x)


Runner(torch.nn.Linear(4, 4)).step(torch.randn(2, 4))
"""

QUANTIZED_NO_IMPORT = """\
import torch
from transformers import AutoModelForCausalLM

model = AutoModelForCausalLM.from_pretrained("gpt2", load_in_4bit=True, torch_dtype=torch.bfloat16)
"""

UNSLOTH = """\
from unsloth import FastLanguageModel

model, tokenizer = FastLanguageModel.from_pretrained("unsloth/llama-3-8b", load_in_4bit=True, dtype=None)
"""

SCRIPTS = {
    "aliased-torch": (ALIASED_TORCH, "titan-rtx"),
    "no-torch-import": (NO_TORCH_IMPORT, "titan-rtx"),
    "shared-dtype": (SHARED_DTYPE, "titan-rtx"),
    "self-attributes": (SELF_ATTRIBUTES, "a100"),
    "quantized-no-import": (QUANTIZED_NO_IMPORT, "a100"),
    "unsloth": (UNSLOTH, "a100"),
}


@pytest.mark.parametrize("name", SCRIPTS)
def test_fixing_real_looking_scripts_makes_nothing_worse(tmp_path, monkeypatch, name):
    code, target = SCRIPTS[name]
    monkeypatch.chdir(tmp_path)
    script = tmp_path / "train.py"
    script.write_text(code, encoding="utf-8")
    before, after, texts, screen = fix_all([script], script, target=target)
    assert_not_worse([script], before, after, texts, screen)


def _fixed(tmp_path, monkeypatch, code, target):
    monkeypatch.chdir(tmp_path)
    script = tmp_path / "train.py"
    script.write_text(code, encoding="utf-8")
    fix_all([script], script, target=target)
    return script.read_text(encoding="utf-8")


def test_an_aliased_torch_is_written_with_its_alias(tmp_path, monkeypatch):
    text = _fixed(tmp_path, monkeypatch, ALIASED_TORCH, "titan-rtx")
    assert "torch_dtype=T.float32" in text or "dtype=T.float32" in text
    assert "import torch\n" not in text


def test_a_string_dtype_is_edited_as_a_string(tmp_path, monkeypatch):
    text = _fixed(tmp_path, monkeypatch, NO_TORCH_IMPORT, "titan-rtx")
    assert 'dtype="float32"' in text and "float16" not in text


def test_a_missing_import_is_added_in_the_import_block(tmp_path, monkeypatch):
    text = _fixed(tmp_path, monkeypatch, QUANTIZED_NO_IMPORT, "a100")
    lines = text.splitlines()
    assert "quantization_config=BitsAndBytesConfig(load_in_4bit=True)" in text
    imports = [i for i, line in enumerate(lines) if line.startswith(("import ", "from "))]
    assert imports == list(range(len(imports)))  # one block, at the top
    assert any("BitsAndBytesConfig" in lines[i] for i in imports)


def test_unscale_goes_where_the_scaler_is_with_the_names_as_written(tmp_path, monkeypatch):
    text = _fixed(tmp_path, monkeypatch, SELF_ATTRIBUTES, "a100")
    step = text[text.index("def step") : text.index("def evaluate")]
    evaluate = text[text.index("def evaluate") :]
    assert "self.scaler.unscale_(self.optimizer)\n        torch.nn.utils.clip_grad_norm_" in step
    assert "unscale_" not in evaluate


def test_unsloth_load_is_never_rewritten_into_transformers_form(tmp_path, monkeypatch):
    assert _fixed(tmp_path, monkeypatch, UNSLOTH, "a100") == UNSLOTH


def test_diff_and_yes_propose_the_same_change(tmp_path, monkeypatch, capsys):
    """--diff is what --yes writes: the same steps, each file as one change."""
    for name, (code, target) in SCRIPTS.items():
        folder = tmp_path / name
        folder.mkdir()
        monkeypatch.chdir(folder)
        script = folder / "train.py"
        script.write_text(code, encoding="utf-8")
        check = run_engine_check(
            lambda target=target: gather(["train.py"], target=target, stack_overrides=CURRENT, **machine_probes()), None
        )
        capsys.readouterr()
        run_fix(check, yes=False, diff_only=True, unsafe=False, select=None, console=Console(file=io.StringIO()))
        patch = capsys.readouterr().out
        run_fix(check, yes=True, diff_only=False, unsafe=False, select=None, console=Console(file=io.StringIO()))
        from precision_doctor.fix.edits import FileChange

        assert patch == FileChange("train.py", code, script.read_text(encoding="utf-8")).diff(), name


# --- the words ---------------------------------------------------------------------------------------------------

USE_INSTEAD = [(r.id, r.silent[0]) for r in rules() if r.silent]


@pytest.mark.parametrize("rule_id,example", USE_INSTEAD, ids=[r for r, _ in USE_INSTEAD])
def test_a_rules_use_instead_example_checks_clean(run_check, rule_id, example):
    """What `precision-doctor rule ID` shows as "use instead" raises no warning or error of any rule about its code
    (a machine fixture's other processes are the machine's, not the example's)."""
    result, _ = run_check(
        example.code,
        name=example.name,
        target=example.target,
        launcher=example.launcher,
        script_args=example.script_args,
        versions=example.versions,
        machine=example.machine,
        environ=example.env,
        live=example.live,
        files=example.files,
    )
    assert not [
        (f.rule_id, f.message)
        for f in result.findings
        if f.severity in ("error", "warning") and (f.locations or not example.machine)
    ]


def test_a_finding_that_raises_nothing_is_not_said_to_kill_the_job(run_check):
    from precision_doctor.report.text import render

    code = (
        "import torch\nfrom transformers import AutoModelForCausalLM\n"
        "model = AutoModelForCausalLM.from_pretrained('gpt2').half().cuda()\n"
        "opt = torch.optim.SGD(model.parameters(), lr=1e-4)\n"
        "for batch in loader:\n    model(**batch).loss.backward()\n    opt.step()\n"
    )
    result, facts = run_check(code, target="titan-rtx")
    pd204 = next(f for f in result.findings if f.rule_id == "PD204")
    assert "Adam" not in pd204.message and "SGD" in pd204.message
    assert pd204.error.startswith("no exception")
    screen = io.StringIO()
    render(result, facts, Console(file=screen, width=300, no_color=True))
    shown = screen.getvalue().split("PD204")[1]
    assert "what the job shows after some steps" in shown and "the job dies" not in shown.split("\n  ")[0]


def test_a_fix_with_nothing_to_write_is_never_labelled_safe(tmp_path):
    """A recipe's or a DeepSpeed JSON's change is a step to take, not an edit `fix` writes: `check` labels it display
    only, so every fix it calls safe is one `fix --yes` applies (fix_promise.py found 11 such labels on the
    shipped fixtures, all recipe or DeepSpeed-config fixes)."""
    import json
    import subprocess
    import sys

    recipe = ROOT / "fixtures/configs/axolotl/seed003_qwen2vl_4bit.yml"
    cmd = [sys.executable, "-m", "precision_doctor", "check", str(recipe), "--target", "t4", "--no-cache"]
    report = json.loads(subprocess.run([*cmd, "--format", "json"], capture_output=True, text=True).stdout)
    pd107 = next(f for f in report["findings"] if f["id"] == "PD107")
    assert pd107["fix"]["applicability"] == "display" and pd107["fix"]["safe"] is False
    text = subprocess.run(cmd, capture_output=True, text=True).stdout
    assert "fix  bnb_4bit_compute_dtype=torch.float16  [display only]" in " ".join(text.split("\n"))
    for path in ("fixtures/placement/train_deepspeed_fp16.py", "fixtures/seed001_titan_fp16/buggy/train.py"):
        done = subprocess.run(
            [sys.executable, "-m", "precision_doctor", "check", path, "--target", "t4", "--format", "json"],
            capture_output=True,
            text=True,
            cwd=ROOT,
        )
        assert all(f["fix"]["edits"] for f in json.loads(done.stdout)["findings"] if f["fix"] and f["fix"]["safe"])
