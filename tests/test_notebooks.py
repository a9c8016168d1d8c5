"""Jupyter notebooks: their code cells checked as the script they are, findings placed at cell and line, IPython
lines skipped and counted, and `fix` writing only the cells it changes back into the notebook's JSON."""

import json
import subprocess
import sys

import pytest

from precision_doctor import engine
from precision_doctor.knowledge.versions import CURRENT
from precision_doctor.model.errors import InputError
from precision_doctor.probes.collect import gather
from precision_doctor.report.json_report import render

from .conftest import machine_probes

SETUP = [
    "!pip install -q transformers peft\n",
    "%matplotlib inline\n",
    "import torch\n",
    "from transformers import AutoModelForCausalLM, Trainer, TrainingArguments",
]
LOAD = ["model = AutoModelForCausalLM.from_pretrained(\n", "    'gpt2',\n", "    dtype=torch.{dtype},\n", ")"]
TRAIN = [
    "args = TrainingArguments(output_dir='out', fp16=True, per_device_train_batch_size=4)\n",
    "trainer = Trainer(model=model, args=args)\n",
    "trainer.train()",
]


def notebook(dtype="float16", indent=1, markdown_code="model.half()"):
    cells = [
        {"cell_type": "markdown", "metadata": {}, "source": ["# Fine-tune\n", f"    {markdown_code}\n"]},
        {
            "cell_type": "code",
            "execution_count": 1,
            "metadata": {"id": "setup"},
            "outputs": [{"output_type": "stream", "name": "stdout", "text": ["Successfully installed peft\n"]}],
            "source": SETUP,
        },
        {
            "cell_type": "code",
            "execution_count": 2,
            "metadata": {},
            "outputs": [],
            "source": [line.format(dtype=dtype) for line in LOAD],
        },
        {"cell_type": "raw", "metadata": {}, "source": ["model.half()"]},
        {
            "cell_type": "code",
            "execution_count": 3,
            "metadata": {"collapsed": False},
            "outputs": [
                {"output_type": "execute_result", "data": {"text/plain": ["TrainOutput(...)"]}, "metadata": {}}
            ],
            "source": ["%%time\n", "!nvidia-smi"],
        },
        {"cell_type": "code", "execution_count": 4, "metadata": {}, "outputs": [], "source": TRAIN},
    ]
    doc = {"cells": cells, "metadata": {"kernelspec": {"name": "python3"}}, "nbformat": 4, "nbformat_minor": 5}
    return json.dumps(doc, indent=indent, ensure_ascii=False) + "\n"


def check(paths, target="t4"):
    facts = gather([str(p) for p in paths], target=target, stack_overrides=dict(CURRENT), **machine_probes())
    return engine.run(facts), facts


def test_a_buggy_notebooks_error_is_found_at_its_cell_and_line(tmp_path):
    nb = tmp_path / "train.ipynb"
    nb.write_text(notebook("float16"))
    result, facts = check([nb])
    report = json.loads(render(result, facts))
    errors = [f for f in report["findings"] if f["id"] == "PD201"]
    assert errors, report["findings"]
    weights = next(e for e in errors[0]["evidence"] if "float16" in e["note"])
    assert (weights["cell"], weights["line"]) == (3, 3)  # the third cell, its third line: dtype=torch.float16
    skipped = [u for u in report["unknowns"] if u["what"] == "notebook"]
    assert skipped and skipped[0]["reason"].startswith("4 IPython line(s)")  # 2 lines + a %%time cell of 2


def test_its_correct_twin_is_clean(tmp_path):
    nb = tmp_path / "train.ipynb"
    nb.write_text(notebook("float32"))  # fp32 weights under fp16 AMP; markdown and raw cells say model.half()
    result, _ = check([nb])
    assert [f.rule_id for f in result.findings if f.severity == "error"] == []


def test_text_and_concise_reports_name_the_cell(tmp_path):
    nb = tmp_path / "train.ipynb"
    nb.write_text(notebook("float16"))
    done = subprocess.run(
        [sys.executable, "-m", "precision_doctor", "check", "--target", "t4", "--format", "concise", str(nb)],
        capture_output=True,
        text=True,
        env={"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 1, done.stderr
    assert f"{nb}:cell 3:3:" in done.stdout


@pytest.mark.parametrize("indent", [1, 2, None])
def test_sarif_and_github_point_at_the_notebooks_own_json_line(tmp_path, monkeypatch, indent):
    """Code scanning and pull-request annotations show the `.ipynb` file itself: the line is the JSON line that
    holds the code (one string per source line as Jupyter saves it, or the one line of a compact file), and the
    cell and its line are named in the message."""
    monkeypatch.chdir(tmp_path)
    nb = tmp_path / "train.ipynb"
    nb.write_text(notebook("float16", indent=indent))
    raw_lines = nb.read_text().splitlines()
    expected = next(i for i, text in enumerate(raw_lines, 1) if "dtype=torch.float16" in text)
    env = {"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin"}
    base = [sys.executable, "-m", "precision_doctor", "check", "--target", "t4", "train.ipynb"]
    sarif = subprocess.run([*base, "--format", "sarif"], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert sarif.returncode == 1, sarif.stderr
    result = next(r for r in json.loads(sarif.stdout)["runs"][0]["results"] if r["ruleId"] == "PD201")
    places = [result["locations"][0], *result.get("relatedLocations", [])]
    weights = next(p for p in places if "cell 3, line 3" in p.get("message", {}).get("text", ""))
    assert weights["physicalLocation"]["region"]["startLine"] == expected
    github = subprocess.run([*base, "--format", "github"], capture_output=True, text=True, env=env, cwd=tmp_path)
    line = next(li for li in github.stdout.splitlines() if "PD201" in li)
    assert f",line={expected}," in line and "::cell 3, line 3: " in line, line


@pytest.mark.parametrize("indent", [1, 2])
def test_fix_round_trips_a_notebook_with_outputs(tmp_path, monkeypatch, indent):
    monkeypatch.chdir(tmp_path)
    nb = tmp_path / "train.ipynb"
    before = notebook("float16", indent=indent).replace("dtype=torch.float16", "torch_dtype=torch.float16")
    nb.write_text(before)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "precision_doctor",
            "fix",
            "--target",
            "t4",
            "--select",
            "PD214",
            "--yes",
            "train.ipynb",
        ],
        capture_output=True,
        text=True,
        env={"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin", "XDG_STATE_HOME": str(tmp_path / "state")},
    )
    assert "applied 1 fix" in done.stdout, (done.stdout, done.stderr)
    after = nb.read_text()
    old, new = json.loads(before), json.loads(after)
    assert [c.get("outputs") for c in new["cells"]] == [c.get("outputs") for c in old["cells"]]
    assert new["metadata"] == old["metadata"]
    assert "".join(new["cells"][2]["source"]).count("dtype=torch.float16") == 1
    assert "torch_dtype" not in after
    changed = [(a, b) for a, b in zip(before.splitlines(), after.splitlines(), strict=True) if a != b]
    assert len(changed) == 1  # every other byte as it was: one source line rewritten in place
    result, _ = check([nb])
    assert "PD214" not in {f.rule_id for f in result.findings}


def test_a_notebook_that_cannot_be_read_is_not_checked_with_its_reason(tmp_path):
    (tmp_path / "broken.ipynb").write_text('{"cells": [')
    (tmp_path / "old.ipynb").write_text('{"worksheets": [], "nbformat": 3}')
    (tmp_path / "train.ipynb").write_text(notebook("float16"))
    result, facts = check([tmp_path])
    reasons = {
        s.path.rsplit("/", 1)[-1]: [u.reason for u in s.unknowns if u.what == "not checked"] for s in facts.scripts
    }
    assert "not valid notebook JSON" in reasons["broken.ipynb"][0]
    assert "nbformat 3" in reasons["old.ipynb"][0]
    assert reasons["train.ipynb"] == []
    with pytest.raises(InputError, match="not valid notebook JSON"):
        check([tmp_path / "broken.ipynb"])


def test_shell_lines_continued_on_indented_lines_are_skipped(tmp_path):
    nb = json.loads(notebook("float16"))
    nb["cells"][1]["source"] = [
        "!torchrun --nproc_per_node 2 train.py \\\n",
        "    --lr 1e-4 \\\n",
        "    --bf16\n",
    ] + SETUP
    path = tmp_path / "train.ipynb"
    path.write_text(json.dumps(nb))
    result, facts = check([path])
    assert "PD201" in {f.rule_id for f in result.findings}  # read, not refused for the continuation's indent
    assert any(u.reason.startswith("7 IPython line(s)") for u in facts.scripts[0].unknowns)


def test_a_syntax_error_names_its_cell(tmp_path):
    nb = json.loads(notebook("float16"))
    nb["cells"][5]["source"] = ["args = TrainingArguments(output_dir='out' fp16=True)\n"]
    path = tmp_path / "train.ipynb"
    path.write_text(json.dumps(nb))
    with pytest.raises(InputError, match=r"train\.ipynb:cell 6:1:\d+: syntax error"):
        check([path])


PINNED = [
    "from transformers import AutoModelForCausalLM, AutoTokenizer, Trainer, TrainingArguments\n",
    "tok = AutoTokenizer.from_pretrained('gpt2')\n",
    "model = AutoModelForCausalLM.from_pretrained('gpt2')\n",
    "Trainer(model=model, args=TrainingArguments('out'), tokenizer=tok).train()",
]


@pytest.mark.parametrize("install,fires", [("transformers==4.11.3", False), ("-U transformers", True)])
def test_a_notebooks_own_pip_pins_are_the_versions_it_runs(tmp_path, install, fires):
    cells = [
        {"cell_type": "code", "metadata": {}, "outputs": [], "source": [f"!pip install -q {install} datasets\n"]},
        {"cell_type": "code", "metadata": {}, "outputs": [], "source": PINNED},
    ]
    path = tmp_path / "train.ipynb"
    path.write_text(json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    facts = gather([str(path)], target="t4", **machine_probes())  # the environment's versions, then the pins
    result = engine.run(facts)
    # Trainer(tokenizer=) is gone in transformers 5; 4.11.3, which the notebook installs, has it
    assert ("PD216" in {f.rule_id for f in result.findings}) is fires
    if not fires:
        assert facts.scripts[0].stack.get("transformers").version == "4.11.3"


@pytest.mark.parametrize("first", [["%%bash\n", "pip install -q torch transformers\n"], ["%pip install -q torch\n"]])
def test_an_import_a_fix_adds_goes_after_the_notebooks_magics(tmp_path, first):
    """`%%bash` must open its cell and `%pip install` must run before the import: the import a fix needs goes into
    the first Python after them, and the notebook still runs and checks."""
    cells = [
        {"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": 1, "source": first},
        {
            "cell_type": "code",
            "metadata": {},
            "outputs": [],
            "execution_count": 2,
            "source": ["from torch.cuda.amp import GradScaler\n", "scaler = GradScaler()\n"],
        },
    ]
    path = tmp_path / "nb.ipynb"
    path.write_text(json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    run = [sys.executable, "-m", "precision_doctor"]
    done = subprocess.run([*run, "fix", str(path), "--target", "a100", "--yes"], capture_output=True, text=True)
    assert "applied" in done.stdout, done.stdout + done.stderr
    written = json.loads(path.read_text())["cells"]
    assert written[0]["source"] == first  # the magic cell as it was
    assert "import torch\n" in written[1]["source"] and "torch.amp.GradScaler('cuda')" in "".join(written[1]["source"])
    again = subprocess.run([*run, "check", str(path), "--target", "a100"], capture_output=True, text=True)
    assert again.returncode == 0, again.stdout + again.stderr
