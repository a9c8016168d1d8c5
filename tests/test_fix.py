"""Every code fix, applied to the example it fires on: the file parses, the rule stops firing, no error starts
firing, applying again changes nothing, and the rest of the file is untouched. Then the `fix` command itself."""

import difflib
import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("libcst")

from precision_doctor.fix.edits import EditFailed, apply_edits  # noqa: E402
from precision_doctor.rules.catalog import rules  # noqa: E402

from .conftest import check_code  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def _fixable_examples():
    """The firing examples whose finding carries a code edit (the others' fixes are commands or manual)."""
    import tempfile

    out = []
    for r in rules():
        for i, ex in enumerate(r.fires):
            with tempfile.TemporaryDirectory() as d:
                cwd = os.getcwd()
                os.chdir(d)
                try:
                    result, _ = check_code(
                        Path(d),
                        ex.code,
                        name=ex.name,
                        target=ex.target,
                        launcher=ex.launcher,
                        script_args=ex.script_args,
                        versions=ex.versions,
                        machine=ex.machine,
                        environ=ex.env,
                        files=ex.files,
                    )
                finally:
                    os.chdir(cwd)
            if any(f.rule_id == r.id and f.fix and f.fix.edits for f in result.findings):
                out.append((r.id, i, ex))
    return out


FIXABLE = _fixable_examples()


def test_most_rules_carry_a_code_fix():
    assert len({rule_id for rule_id, _, _ in FIXABLE}) >= 25


def _run(tmp_path, ex, code):
    return check_code(
        tmp_path,
        code,
        target=ex.target,
        launcher=ex.launcher,
        script_args=ex.script_args,
        versions=ex.versions,
        machine=ex.machine,
        environ=ex.env,
        files=ex.files,
    )


def _changed_lines(before: str, after: str) -> set[int]:
    lines = set()
    for tag, i1, i2, _, _ in difflib.SequenceMatcher(None, before.splitlines(), after.splitlines()).get_opcodes():
        if tag != "equal":
            lines.update(range(i1 + 1, max(i2, i1 + 1) + 1))
    return lines


@pytest.mark.parametrize("rule_id,index,example", FIXABLE, ids=[f"{r}-{i}" for r, i, _ in FIXABLE])
def test_code_fix_applies_cleanly(tmp_path, monkeypatch, rule_id, index, example):
    monkeypatch.chdir(tmp_path)
    result, _ = _run(tmp_path, example, example.code)
    before_ids = {f.rule_id for f in result.findings}
    finding = next(f for f in result.findings if f.rule_id == rule_id and f.fix and f.fix.edits)
    source = example.code
    edits = [e for e in finding.fix.edits if Path(e.path).name == "train.py"]
    after = apply_edits(source, edits)
    compile(after, "train.py", "exec")  # parses
    # the rest of the file is untouched: only lines at (or next to) an edit change
    near = {line + d for e in edits for line in (e.line,) for d in (-1, 0, 1, 2)} | {1, 2, 3}
    assert _changed_lines(source, after) <= near, (source, after)
    fixed, _ = _run(tmp_path, example, after)
    still = [f for f in fixed.findings if f.rule_id == rule_id and f.message == finding.message]
    assert not still, f"{rule_id} still fires after its fix:\n{after}"
    new_errors = {f.rule_id for f in fixed.findings if f.severity == "error"} - before_ids
    assert not new_errors, f"the fix for {rule_id} makes {new_errors} fire:\n{after}"
    try:
        again = apply_edits(after, edits)
    except EditFailed:
        again = after  # the old value is gone: nothing to do twice
    assert again == after


def doctor(*args, cwd, stdin=""):
    return subprocess.run(
        [sys.executable, "-m", "precision_doctor", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        input=stdin,
    )


@pytest.fixture
def project(tmp_path):
    src = ROOT / "fixtures/seed001_titan_fp16/buggy"
    for name in ("train.py", "model_utility_configs.py"):
        (tmp_path / name).write_text((src / name).read_text())
    os.chmod(tmp_path / "model_utility_configs.py", 0o640)
    return tmp_path


def test_diff_prints_a_valid_patch_and_changes_nothing(project):
    before = (project / "model_utility_configs.py").read_text()
    proc = doctor("fix", "train.py", "--target", "a100", "--diff", "--unsafe", cwd=project)
    assert proc.returncode == 1 and proc.stdout.startswith("--- ")
    assert (project / "model_utility_configs.py").read_text() == before
    (project / "fix.patch").write_text(proc.stdout)
    if subprocess.run(["which", "patch"], capture_output=True).returncode == 0:
        check = subprocess.run(["patch", "-p0", "--dry-run", "-i", "fix.patch"], cwd=project, capture_output=True)
        assert check.returncode == 0, check.stdout
    clean = doctor("fix", "train.py", "--target", "a100", "--diff", cwd=project)  # only safe fixes
    assert "-        torch_dtype=torch.float16" in clean.stdout and "torch.bfloat16" not in clean.stdout
    assert "needs review" in clean.stderr


def test_without_a_terminal_fix_behaves_as_diff(project):
    before = (project / "train.py").read_text()
    proc = doctor("fix", "train.py", "--target", "titan-rtx", cwd=project, stdin="y\n")
    assert proc.stdout.startswith("--- ") and (project / "train.py").read_text() == before


def test_yes_applies_safe_fixes_rechecks_and_keeps_the_mode(project):
    proc = doctor("fix", "train.py", "--target", "titan-rtx", "--yes", cwd=project)
    text = (project / "model_utility_configs.py").read_text()
    assert "dtype=torch.float16,  # BF16 incompatibility" in text  # PD214's rename: safe, comment kept
    assert "torch_dtype" not in text
    assert stat.S_IMODE(os.stat(project / "model_utility_configs.py").st_mode) == 0o640
    assert "applied 1 fix" in proc.stdout and "→" in proc.stdout and "undo: precision-doctor fix --undo " in proc.stdout
    assert proc.returncode == 1  # PD201 (needs review) is still there
    proc = doctor("fix", "train.py", "--target", "titan-rtx", "--yes", "--unsafe", cwd=project)
    assert "dtype=torch.float32" in (project / "model_utility_configs.py").read_text()
    after = json.loads(doctor("check", "train.py", "--target", "titan-rtx", "--format", "json", cwd=project).stdout)
    assert not [f for f in after["findings"] if f["severity"] == "error"]


def _fix_answering(folder, target, answers, monkeypatch) -> tuple[list[str], int]:
    """`fix train.py` in a terminal, answered in turn; the questions asked and the exit code."""
    from rich.console import Console

    from precision_doctor.fix.session import run_engine_check, run_fix
    from precision_doctor.probes.collect import gather

    from .conftest import machine_probes

    monkeypatch.chdir(folder)
    check = run_engine_check(lambda: gather(["train.py"], target=target, **machine_probes()), None)
    replies, asked = iter(answers), []

    def ask(question):
        asked.append(question)
        return next(replies)

    with open(os.devnull, "w") as devnull:
        code = run_fix(
            check, yes=False, diff_only=False, unsafe=False, select=None, console=Console(file=devnull), ask=ask
        )
    return asked, code


def test_interactive_answers(project, monkeypatch):
    asked, code = _fix_answering(project, "titan-rtx", ["n", "y"], monkeypatch)
    text = (project / "model_utility_configs.py").read_text()
    assert len(asked) == 2 and "[y]es / [n]o / [a]ll / [q]uit" in asked[0]
    assert "torch.float16" in text and "torch_dtype" not in text  # first (PD201) declined, second (PD214) taken
    assert code == 1


def test_refuses_a_file_changed_since_the_check(project):
    from precision_doctor.fix.edits import FileChange, write_change
    from precision_doctor.model.errors import InputError

    path = project / "train.py"
    seen = path.read_text()
    path.write_text(path.read_text() + "# edited meanwhile\n")
    with pytest.raises(InputError, match="changed since it was checked"):
        write_change(FileChange(str(path), seen, "x = 1\n"))
    assert path.read_text().endswith("# edited meanwhile\n")


def test_an_edit_that_would_not_parse_is_refused():
    from precision_doctor.model.findings import Edit

    with pytest.raises(EditFailed, match="would not parse"):
        apply_edits("x = f(a=1)\n", [Edit("set_kwarg", "t.py", 1, call="f", name="a", new="1 +")])


def test_fix_is_not_changed_by_python_warnings_about_the_file(tmp_path):
    """An invalid escape (`"\\d+"`) on a line the fix reads: Python's warning about it is not printed, and under
    `-W error` the import already on that line is still recognised (no second `import BitsAndBytesConfig`)."""
    (tmp_path / "train.py").write_text(
        'from transformers import AutoModelForCausalLM, BitsAndBytesConfig; PAT = "\\d+"\n'
        'model = AutoModelForCausalLM.from_pretrained("gpt2", load_in_4bit=True)\n'
    )
    diffs = []
    for warnings_filter in ("default", "error::DeprecationWarning,error::SyntaxWarning"):
        out = subprocess.run(
            [sys.executable, "-m", "precision_doctor", "fix", "train.py", "--diff"],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, "PYTHONWARNINGS": warnings_filter},
        )
        assert out.returncode == 1 and out.stderr == "", out.stderr
        diffs.append(out.stdout)
    assert diffs[0] == diffs[1] and "quantization_config=BitsAndBytesConfig(load_in_4bit=True)" in diffs[0]
    assert "+from transformers import BitsAndBytesConfig" not in diffs[0]


LOAD_TWICE = (
    "import torch\nfrom transformers import AutoModelForCausalLM\n"
    "def load(model_id):\n"
    "    return AutoModelForCausalLM.from_pretrained(model_id, torch_dtype=torch.bfloat16)\n"
    "def load_again(model_id):\n"
    "    return AutoModelForCausalLM.from_pretrained(model_id, torch_dtype=torch.bfloat16)\n"
    "a, b = load('gpt2'), load_again('gpt2')\n"
)


def test_yes_fixes_the_same_call_written_twice(tmp_path):
    """Two findings alike in rule, message and line text (one call copied into two functions): both are fixed, as
    `check` labelled both safe (the second was taken for the first, already decided)."""
    (tmp_path / "train.py").write_text(LOAD_TWICE)
    proc = doctor("fix", "train.py", "--target", "a100", "--yes", cwd=tmp_path)
    assert "applied 2 fixes" in proc.stdout, proc.stdout + proc.stderr
    assert "torch_dtype" not in (tmp_path / "train.py").read_text()
    assert proc.returncode == 0


TWINS_ON_ONE_LINE = (
    "import torch\nfrom transformers import AutoModelForCausalLM\n"
    "a = AutoModelForCausalLM.from_pretrained('gpt2', torch_dtype=torch.bfloat16); "
    "b = AutoModelForCausalLM.from_pretrained('gpt2', torch_dtype=torch.bfloat16)\n"
)


def test_yes_fixes_twin_calls_on_one_line(tmp_path):
    """Two calls alike on one line: each fix edits the call it is for (the first one the edit still changes), so
    both safe fixes `check` showed are applied and the line keeps its other text."""
    (tmp_path / "train.py").write_text(TWINS_ON_ONE_LINE)
    proc = doctor("fix", "train.py", "--target", "a100", "--yes", cwd=tmp_path)
    assert "applied 2 fixes" in proc.stdout, proc.stdout + proc.stderr
    assert (tmp_path / "train.py").read_text() == TWINS_ON_ONE_LINE.replace("torch_dtype=", "dtype=")


def test_no_to_the_first_twin_still_offers_the_second(tmp_path, monkeypatch):
    """Twins share how a finding is recognised across re-checks; declining one must not decline the other."""
    (tmp_path / "train.py").write_text(TWINS_ON_ONE_LINE)
    asked, _ = _fix_answering(tmp_path, "a100", ["n", "y"], monkeypatch)
    line = (tmp_path / "train.py").read_text().splitlines()[2]
    assert len(asked) == 2  # both twins offered
    assert line.count("torch_dtype=") == 1 and line.count("dtype=") == 2  # one declined, one applied


def test_yes_applies_several_fixes_to_one_notebook_and_undo_restores_it(tmp_path):
    cells = [
        {"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": i, "source": src}
        for i, src in enumerate(
            [
                ["import torch\n", "from transformers import AutoModelForCausalLM"],
                ["a = AutoModelForCausalLM.from_pretrained('gpt2', torch_dtype=torch.bfloat16)"],
                ["b = AutoModelForCausalLM.from_pretrained('gpt2', torch_dtype=torch.bfloat16)"],
            ]
        )
    ]
    notebook = json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}, indent=1)
    (tmp_path / "nb.ipynb").write_text(notebook)
    proc = doctor("fix", "nb.ipynb", "--target", "a100", "--yes", cwd=tmp_path)
    assert "applied 2 fixes" in proc.stdout and "changed since it was checked" not in proc.stderr, proc.stderr
    written = json.loads((tmp_path / "nb.ipynb").read_text())
    assert "torch_dtype" not in json.dumps(written) and len(written["cells"]) == 3
    assert doctor("fix", "--undo", cwd=tmp_path).returncode == 0
    assert (tmp_path / "nb.ipynb").read_text() == notebook


def test_diff_of_a_path_with_spaces_applies_with_patch_and_git(tmp_path):
    folder = tmp_path / "my dir"
    folder.mkdir()
    (folder / "t x.py").write_text(LOAD_TWICE)
    patch_text = doctor("fix", ".", "--target", "a100", "--diff", cwd=tmp_path).stdout
    assert patch_text.startswith("--- my dir/t x.py\t\n")
    (tmp_path / "fix.patch").write_text(patch_text)
    if shutil.which("git"):
        subprocess.run(["git", "init", "-q", "."], cwd=tmp_path, check=True)
        check = subprocess.run(["git", "apply", "--check", "-p0", "fix.patch"], cwd=tmp_path, capture_output=True)
        assert check.returncode == 0, check.stderr
    if shutil.which("patch"):
        applied = subprocess.run(["patch", "-p0", "-i", "fix.patch"], cwd=tmp_path, capture_output=True, text=True)
        assert applied.returncode == 0, applied.stdout
        assert "torch_dtype" not in (folder / "t x.py").read_text()
