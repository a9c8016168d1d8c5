"""Reports at repository scale and the one-line formats: the folder summary, files grouped most severe first,
clean files counted (listed with -v), unknowns folded unless asked for and naming the rules they silenced,
--statistics, --format concise / github, `rules --format json`, JSON without the fact record unless asked,
SARIF fingerprints that survive moved code, and "did you mean" for typos."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = Path(__file__).parent / "data" / "sarif-2.1.0-rtm.5.json"

BAD = (
    "import torch\nfrom transformers import AutoModelForCausalLM, Trainer, TrainingArguments\n"
    "model = AutoModelForCausalLM.from_pretrained('gpt2', dtype=torch.float16)\n"
    "Trainer(model=model, args=TrainingArguments('out', fp16=True, per_device_train_batch_size=2)).train()\n"
)
DEPRECATED = "import torch\nscaler = torch.cuda.amp.GradScaler()\n"
CLEAN = "import json\nprint(json.dumps({}))\n"
RUNTIME = (
    "import os, torch\nfrom transformers import AutoModelForCausalLM, Trainer, TrainingArguments\n"
    "model = AutoModelForCausalLM.from_pretrained('gpt2', dtype=getattr(torch, os.environ['DTYPE']))\n"
    "Trainer(model=model, args=TrainingArguments('out', fp16=True, per_device_train_batch_size=2)).train()\n"
)


def doctor(*args, cwd=ROOT):
    return subprocess.run(
        [sys.executable, "-m", "precision_doctor", *args], cwd=cwd, capture_output=True, text=True, timeout=120
    )


@pytest.fixture
def tree(tmp_path):
    files = {
        "a_deprecated.py": DEPRECATED,
        "b_bad.py": BAD,
        "c_clean.py": CLEAN,
        "d_clean.py": CLEAN,
        "e_runtime.py": RUNTIME,
    }
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    return tmp_path


def test_folder_report_opens_with_a_summary_and_lists_files_most_severe_first(tree):
    out = doctor("check", ".", "--target", "t4", "--no-color", cwd=tree).stdout
    summary = out[out.index("summary") : out.index("\nmachine  ")]
    assert "5 files checked: 2 with findings, 3 with no problems" in summary
    assert "PD201" in summary and "PD213" in summary  # per rule
    assert out.index("b_bad.py") < out.index("a_deprecated.py")  # the error file before the warning file
    assert "c_clean.py" not in out  # counted, not listed
    # ... and closes with it: at 300 files the top has scrolled away
    tail = out[out.rindex("summary") :]
    assert "5 files checked: 2 with findings" in tail and out.index("skipped") < out.rindex("summary")
    verbose = doctor("check", ".", "--target", "t4", "-v", cwd=tree).stdout
    assert "c_clean.py  no problems found" in verbose


def test_a_folders_job_scripts_are_counted_as_files_checked_as_json_counts_them(tree):
    (tree / "job.sh").write_text("#!/bin/bash\n#SBATCH --gres=gpu:2\nsrun torchrun --nproc_per_node 4 c_clean.py\n")
    out = doctor("check", ".", "--target", "t4", "--no-color", cwd=tree).stdout
    report = json.loads(doctor("check", ".", "--target", "t4", "--format", "json", cwd=tree).stdout)
    checked = report["files"]["checked"]
    assert checked == 6 and f"{checked} files checked: 3 with findings" in out  # job.sh: PD116


def test_folder_unknowns_are_folded_and_name_the_rules_they_silenced(tree):
    out = doctor("check", ".", "--target", "t4", cwd=tree).stdout
    folded = next(line for line in out.splitlines() if line.startswith("unknown"))
    assert "--show-unknowns" in folded and "e_runtime.py:3" not in out
    listed = doctor("check", ".", "--target", "t4", "--show-unknowns", cwd=tree).stdout
    line = next(x for x in listed.splitlines() if "dtype= of from_pretrained()" in x)
    silenced = line[line.index("(silences ") + 10 : line.rindex(")")].split(", ")
    assert "e_runtime.py:3" in line and "PD215" in silenced  # FlashAttention with fp32 weights needs the dtype
    assert f"they kept {', '.join(silenced)} silent" in folded
    # with the dtype written out, the same rules speak or are satisfied: nothing is left unknown
    (tree / "e_runtime.py").write_text(RUNTIME.replace("getattr(torch, os.environ['DTYPE'])", "torch.float32"))
    assert "unknown" not in doctor("check", ".", "--target", "t4", cwd=tree).stdout


def test_unknowns_are_listed_once_even_when_many_scripts_import_the_module(tmp_path):
    (tmp_path / "helpers.py").write_text(
        "import os, torch\nfrom transformers import AutoModelForCausalLM\n"
        "def load():\n    return AutoModelForCausalLM.from_pretrained("
        "'gpt2', dtype=getattr(torch, os.environ['DTYPE']))\n"
    )
    for i in range(3):
        (tmp_path / f"train{i}.py").write_text("from helpers import load\nmodel = load()\n")
    doc = json.loads(doctor("check", ".", "--target", "t4", "--format", "json", cwd=tmp_path).stdout)
    dtype = [u for u in doc["unknowns"] if u["what"].startswith("dtype=")]
    assert len(dtype) == 1 and Path(dtype[0]["path"]).name == "helpers.py"


def test_statistics_concise_and_github(tree):
    stats = doctor("check", ".", "--target", "t4", "--statistics", cwd=tree)
    rows = [line.split("\t") for line in stats.stdout.splitlines() if "\t" in line]
    assert {r[1] for r in rows} >= {"PD201", "PD213"} and all(r[0].strip().isdigit() for r in rows)
    assert stats.returncode == 1  # still a gate
    concise = doctor("check", ".", "--target", "t4", "--format", "concise", cwd=tree).stdout.splitlines()
    pd213 = next(line for line in concise if " PD213 " in line)
    assert pd213.startswith("a_deprecated.py:2:") and "PD213 [warning] " in pd213
    github = doctor("check", ".", "--target", "t4", "--format", "github", cwd=tree).stdout.splitlines()
    error = next(line for line in github if "PD201" in line)
    assert error.startswith("::error file=b_bad.py,line=") and ",title=PD201 fp16-params-with-grad-scaler::" in error
    assert "\n" not in error and "%0A" in error  # multi-line messages stay one command


def test_github_escaping():
    from precision_doctor.report.lines import _escape_data, _escape_property

    assert _escape_data("50% done\r\nnext") == "50%25 done%0D%0Anext"
    assert _escape_property("a:b,c%") == "a%3Ab%2Cc%25"


def test_rules_json_lists_every_rule_with_its_doc():
    from precision_doctor.rules.catalog import rules

    doc = json.loads(doctor("rules", "--format", "json").stdout)
    assert [r["id"] for r in doc] == [r.id for r in rules()]
    pd201 = next(r for r in doc if r["id"] == "PD201")
    assert pd201["severity"] == "error" and pd201["help_uri"].endswith("docs/rules/PD201.md")
    assert (ROOT / "docs/rules/PD201.md").is_file()


def test_json_has_no_fact_record_unless_asked(tree):
    lean = json.loads(doctor("check", ".", "--target", "t4", "--format", "json", cwd=tree).stdout)
    assert "facts" not in lean and lean["files"]["checked"] == 5 and lean["summary"]["error"] >= 1
    full = json.loads(doctor("check", ".", "--target", "t4", "--format", "json", "--include-facts", cwd=tree).stdout)
    assert {Path(s["path"]).name for s in full["facts"]["scripts"]} >= {"b_bad.py"}
    assert full["setups"]["b_bad.py"]["weights"]["value"] == "float16"


def test_sarif_fingerprints_survive_moved_code_and_paths_are_relative(tree):
    jsonschema = pytest.importorskip("jsonschema")

    def results():
        proc = doctor("check", "b_bad.py", "--target", "t4", "--format", "sarif", cwd=tree)
        doc = json.loads(proc.stdout)
        jsonschema.Draft4Validator(json.loads(SCHEMA.read_text())).validate(doc)
        run = doc["runs"][0]
        assert run["invocations"][0]["exitCode"] == proc.returncode == 1
        assert all(r["helpUri"].endswith(f"{r['id']}.md") for r in run["tool"]["driver"]["rules"])
        return {r["ruleId"]: r for r in run["results"]}

    before = results()
    (tree / "b_bad.py").write_text("# a comment\n\n" + BAD)  # the code moves two lines down
    after = results()
    pd201 = after["PD201"]["locations"][0]["physicalLocation"]
    assert pd201["artifactLocation"] == {"uri": "b_bad.py", "uriBaseId": "%SRCROOT%"}
    assert (
        pd201["region"]["startLine"] == before["PD201"]["locations"][0]["physicalLocation"]["region"]["startLine"] + 2
    )
    assert after["PD201"]["partialFingerprints"] == before["PD201"]["partialFingerprints"]


@pytest.mark.parametrize(
    "args,hint",
    [
        (["chek", "x.py"], "did you mean 'check'?"),
        (["check", "--fail_on", "error"], "did you mean '--fail-on'?"),
        (["check", "--format", "sarf"], "did you mean 'sarif'?"),
        (["check", "--target", "a1000"], "did you mean 'a100'?"),
        (["check", "--select", "PD2O1"], "did you mean 'PD201'?"),
        (["rule", "fp16-params-with-grad-scalar"], "did you mean 'fp16-params-with-grad-scaler'?"),
        (["fix", "x.py", "--no-cache"], "--no-cache is an option of `check` only"),  # not "did you mean --no-cache"
        (["rules", "--target", "a100"], "--target is an option of `check`, `fix`, `explain`, `memory`, `snapshot`"),
        (["--no-cache", "check", "x.py"], "--no-cache goes after the command: `precision-doctor check --no-cache"),
    ],
)
def test_did_you_mean(args, hint):
    proc = doctor(*args)
    assert proc.returncode == 2 and hint in proc.stderr and len(proc.stderr.splitlines()) == 1, proc.stderr


def test_config_keys_take_either_spelling_and_suggest_on_typos(tmp_path):
    (tmp_path / "train.py").write_text(DEPRECATED)
    (tmp_path / "pyproject.toml").write_text('[tool.precision-doctor]\nfail_on = "warning"\n')
    assert doctor("check", "train.py", "--target", "t4", cwd=tmp_path).returncode == 1  # PD213 fails the gate
    (tmp_path / "pyproject.toml").write_text('[tool.precision-doctor]\nfail-onn = "warning"\n')
    proc = doctor("check", "train.py", "--target", "t4", cwd=tmp_path)
    assert proc.returncode == 2 and "did you mean 'fail-on'?" in proc.stderr


def test_the_per_rule_counts_say_each_severity_as_reported():
    """A rule's severity depends on the case (a version range, an assumed value): `PD216 8 1 error, 7 warnings`,
    never the worst alone (issue 32)."""
    from types import SimpleNamespace

    from precision_doctor.report.text import rule_counts

    found = [SimpleNamespace(rule_id="PD216", severity="warning", name="keyword-removed")] * 7 + [
        SimpleNamespace(rule_id="PD216", severity="error", name="keyword-removed"),
        SimpleNamespace(rule_id="PD201", severity="error", name="fp16-params-with-grad-scaler"),
    ]
    assert rule_counts(found) == [
        ("PD216", 8, "error", "1 error, 7 warnings", "keyword-removed"),
        ("PD201", 1, "error", "error", "fp16-params-with-grad-scaler"),
    ]


def test_a_misspelt_option_is_matched_against_the_commands_own():
    proc = doctor("fix", "x.py", "--no-cahce")  # check's --no-cache is no option of fix: suggesting it misleads
    assert proc.returncode == 2 and "--no-cache" not in proc.stderr.split("unrecognized arguments: --no-cahce")[1]
    proc = doctor("check", "x.py", "--no-cahce")
    assert "did you mean '--no-cache'?" in proc.stderr
