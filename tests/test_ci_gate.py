"""The CI gate: SARIF valid against the 2.1.0 schema, pyproject configuration, suppressions, walks that
respect .gitignore, the parallel walk, the pre-commit hook."""

import json
import os
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from precision_doctor import engine
from precision_doctor.probes.collect import gather

from .conftest import machine_probes

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = Path(__file__).parent / "data" / "sarif-2.1.0-rtm.5.json"
SEED001 = ROOT / "fixtures/seed001_titan_fp16/buggy"


def doctor(*args, cwd=ROOT):
    return subprocess.run(
        [sys.executable, "-m", "precision_doctor", *args], cwd=cwd, capture_output=True, text=True, timeout=120
    )


def test_sarif_is_valid_2_1_0_with_rule_metadata():
    jsonschema = pytest.importorskip("jsonschema")
    proc = doctor(
        "check",
        "fixtures/seed001_titan_fp16",
        "fixtures/seed004_h100_amp_guide",
        "--target",
        "titan-rtx",
        "--format",
        "sarif",
        "--",
        "--mixed_precision",
        "bf16",
    )
    doc = json.loads(proc.stdout)
    jsonschema.Draft4Validator(json.loads(SCHEMA.read_text())).validate(doc)
    run = doc["runs"][0]
    rules = {r["id"]: r for r in run["tool"]["driver"]["rules"]}
    assert rules["PD201"]["name"] == "fp16-params-with-grad-scaler"
    assert rules["PD201"]["defaultConfiguration"]["level"] == "error"
    assert rules["PD212"]["defaultConfiguration"]["level"] == "note"
    assert "Attempting to unscale FP16 gradients" in rules["PD201"]["help"]["text"]
    results = run["results"]
    pd201 = next(r for r in results if r["ruleId"] == "PD201")
    assert run["tool"]["driver"]["rules"][pd201["ruleIndex"]]["id"] == "PD201"
    region = pd201["locations"][0]["physicalLocation"]
    assert (
        region["artifactLocation"]["uri"].endswith("model_utility_configs.py") and region["region"]["startLine"] == 12
    )
    assert {r["ruleId"] for r in results} >= {"PD201", "PD204", "PD206", "PD207", "PD213"}


def test_sarif_written_to_a_file(tmp_path):
    out = tmp_path / "report.sarif"
    proc = doctor("check", str(SEED001 / "train.py"), "--target", "titan-rtx", "--format", "sarif", "-o", str(out))
    assert proc.returncode == 1 and proc.stdout == ""
    assert json.loads(out.read_text())["version"] == "2.1.0"


def write_project(tmp_path, table: str, files: dict):
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'x'\n\n[tool.precision-doctor]\n" + table)
    for name, text in files.items():
        p = tmp_path / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return tmp_path


BAD = (
    "import torch\nfrom transformers import AutoModelForCausalLM, Trainer, TrainingArguments\n"
    "model = AutoModelForCausalLM.from_pretrained('gpt2', dtype=torch.float16)\n"
    "Trainer(model=model, args=TrainingArguments('out', fp16=True)).train()\n"
)
DEPRECATED = "import torch\nscaler = torch.cuda.amp.GradScaler()\n"


def ids_of(proc):
    return sorted({f["id"] for f in json.loads(proc.stdout)["findings"]})


def test_pyproject_settings_apply_and_flags_override(tmp_path):
    project = write_project(
        tmp_path,
        'target = "titan-rtx"\nignore = ["PD213"]\nfail-on = "warning"\n'
        'per-file-ignores = { "legacy/*.py" = ["PD2"] }\nexclude = ["vendored"]\n',
        {"train.py": BAD, "amp.py": DEPRECATED, "legacy/old.py": BAD, "vendored/x.py": BAD},
    )
    proc = doctor("check", ".", "--format", "json", "--include-facts", cwd=project)
    doc = json.loads(proc.stdout)
    assert doc["facts"]["machine"]["source"] == "target titan-rtx"
    paths = {Path(f["path"]).as_posix() for f in doc["findings"]}
    assert paths == {"train.py"}  # PD213 ignored, legacy/ per-file-ignored, vendored/ excluded
    assert not any(Path(s["path"]).parts[0] == "vendored" for s in doc["facts"]["scripts"])
    assert proc.returncode == 1
    # flags win: another target, a narrower selection, another gate
    proc = doctor(
        "check",
        ".",
        "--format",
        "json",
        "--include-facts",
        "--target",
        "a100",
        "--select",
        "PD213",
        "--fail-on",
        "never",
        cwd=project,
    )
    assert json.loads(proc.stdout)["facts"]["machine"]["source"] == "target a100-80gb"  # the family default
    assert ids_of(proc) == [] and proc.returncode == 0  # PD213 selected but still ignored by the config
    proc = doctor("check", "amp.py", "--format", "json", "--select", "PD2", cwd=project)
    assert ids_of(proc) == []


@pytest.mark.parametrize(
    "table,fragment",
    [
        ('targt = "t4"\n', "unknown key 'targt'"),
        ('select = ["PD2O1"]\n', "unknown rule id 'PD2O1'"),
        ('per-file-ignores = { "a.py" = ["XX1"] }\n', "unknown rule id 'XX1'"),
        ('fail-on = "fatal"\n', "fail-on"),
        ('select = "PD201"\n', 'select: expected an array of strings, got "PD201"'),
    ],
)
def test_bad_configuration_is_one_line_exit_2(tmp_path, table, fragment):
    project = write_project(tmp_path, table, {"train.py": BAD})
    proc = doctor("check", "train.py", cwd=project)
    assert proc.returncode == 2 and fragment in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_unknown_rule_on_the_command_line(tmp_path):
    proc = doctor("check", str(SEED001 / "train.py"), "--ignore", "PD2O1")
    assert proc.returncode == 2 and "PD2O1" in proc.stderr


def test_inline_suppression_and_unused_suppression(tmp_path):
    code = BAD.replace("fp16=True))", "fp16=True))  # precision-doctor: ignore[PD201]")
    code += "x = 1  # precision-doctor: ignore[PD204]\n"
    (tmp_path / "train.py").write_text(code)
    proc = doctor("check", "train.py", "--format", "json", cwd=tmp_path)
    found = json.loads(proc.stdout)["findings"]
    assert [f["id"] for f in found] == ["PD001"] and found[0]["locations"][0]["line"] == 5
    assert proc.returncode == 0  # info does not fail the default gate
    (tmp_path / "train.py").write_text(BAD.replace("fp16=True))", "fp16=True))  # precision-doctor: ignore"))
    assert ids_of(doctor("check", "train.py", "--format", "json", cwd=tmp_path)) == []
    (tmp_path / "train.py").write_text(BAD + "s = '# precision-doctor: ignore[PD201]'\n")  # a string, not a comment
    assert ids_of(doctor("check", "train.py", "--format", "json", cwd=tmp_path)) == ["PD201"]


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_walk_respects_gitignore_and_skips_venvs(tmp_path):
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / ".gitignore").write_text("generated/\n")
    for rel in ("train.py", "generated/train.py", ".venv/lib/x.py", "sub/ok.py"):
        p = tmp_path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(BAD)
    (tmp_path / "venv").mkdir()
    (tmp_path / "venv" / "pyvenv.cfg").write_text("")
    (tmp_path / "venv" / "x.py").write_text(BAD)
    proc = doctor("check", ".", "--format", "json", "--include-facts", cwd=tmp_path)
    paths = sorted(Path(s["path"]).as_posix() for s in json.loads(proc.stdout)["facts"]["scripts"])
    assert paths == ["sub/ok.py", "train.py"]


@pytest.mark.parametrize("machine", [{"target": "t4"}, {}], ids=["target", "unknown-machine"])
def test_parallel_walk_gives_the_same_result_as_one_process(tmp_path, machine):
    """Workers return facts and the engine runs the rules: findings, skipped and crashed rules are the same for
    any --jobs, on a known machine and on one without NVML."""
    sources = [BAD, DEPRECATED, (SEED001.parent / "fixed/train.py").read_text()]
    for i in range(40):
        (tmp_path / f"s{i:02d}.py").write_text(sources[i % 3])
    one = gather([str(tmp_path)], jobs=1, **machine, **machine_probes())
    two = gather([str(tmp_path)], jobs=2, **machine, **machine_probes())
    assert one.scripts == two.scripts
    first, second = engine.run(one), engine.run(two)
    assert first == second and first.findings
    if not machine:  # the machine rules are skipped, once each, with the reason
        assert first.skipped and len({s.rule_id for s in first.skipped}) == len(first.skipped)


@pytest.mark.parametrize("machine", [{"target": "t4"}, {}], ids=["target", "unknown-machine"])
def test_scripts_judged_in_the_workers_give_the_result_of_one_process(tmp_path, machine):
    """With workers, each worker judges the scripts it probed and sends back their facts without calls: the same
    findings, in the same order, with the same skipped, crashed and silenced rules and unknowns, as one process
    that judges every script itself; a rule that crashes in a worker is reported once, as it is there."""
    from precision_doctor.model.findings import Draft
    from precision_doctor.probes.collect import gather_judged
    from precision_doctor.rules.registry import REGISTRY, Example, rule

    @rule(
        "PD997",
        "crashes-on-some",
        severity="warning",
        phase="config",
        summary="s",
        what="w",
        why="y",
        error="e",
        fix="f",
        fires=[Example("x = 1\n")],
        silent=[Example("y = 2\n")],
    )
    def crashes_on_some(script):
        if script.path.endswith("3.py"):
            raise RuntimeError("boom")
        if script.path.endswith("7.py"):
            yield Draft("seven", evidence=())

    unknown_dtype = (
        "import sys, torch\nfrom transformers import AutoModelForCausalLM, Trainer, TrainingArguments\n"
        "m = AutoModelForCausalLM.from_pretrained('gpt2', torch_dtype=getattr(torch, sys.argv[1]))\n"
        "Trainer(model=m, args=TrainingArguments('o', fp16=True)).train()\n"
    )  # silences rules
    sources = [BAD, DEPRECATED, (SEED001.parent / "fixed/train.py").read_text(), unknown_dtype]
    for i in range(40):
        (tmp_path / f"s{i:02d}.py").write_text(sources[i % 4])
    try:
        one = gather([str(tmp_path)], jobs=1, **machine, **machine_probes())
        judged, verdicts = gather_judged(
            [str(tmp_path)], lambda run: engine.Judge(run), jobs=2, **machine, **machine_probes()
        )
        assert verdicts is not None and len(verdicts) == 40 and all(v is not None for v in verdicts)
        assert [s.path for s in judged.scripts] == [s.path for s in one.scripts]
        assert not any(s.calls for s in judged.scripts) and any(s.calls for s in one.scripts)
        assert [s.unknowns for s in judged.scripts] == [s.unknowns for s in one.scripts]
        first, second = engine.run(one), engine.run(judged, verdicts=verdicts)
        assert first.setups and not second.setups  # only a script judged in this process keeps its setup
        first = replace(first, setups={})
        assert first == second and first.findings and first.silenced
        assert [c.rule_id for c in second.crashed] == ["PD997"]
    finally:
        REGISTRY.pop("PD997")


def test_a_script_whose_worker_died_is_reported_and_judged_by_the_doctor(tmp_path, monkeypatch):
    """A worker that dies on a script costs only that script: it is reported not checked (with its project's stack
    and the launch's unknowns, as any other), and the doctor judges it itself; the other scripts keep their
    verdicts."""
    from precision_doctor.probes import collect
    from precision_doctor.probes.collect import gather_judged

    probe = collect._probe

    def dies_on_seven(path, named, args, environ=(None, "")):
        if path.name == "s07.py":
            os._exit(7)  # in the worker process: as a crash in a C extension would end it
        return probe(path, named, args, environ)

    monkeypatch.setattr(collect, "_probe", dies_on_seven)
    for i in range(36):
        (tmp_path / f"s{i:02d}.py").write_text(BAD)
    facts, verdicts = gather_judged(
        [str(tmp_path)], lambda run: engine.Judge(run), jobs=2, target="t4", **machine_probes()
    )
    lost = [i for i, s in enumerate(facts.scripts) if any(u.what == "not checked" for u in s.unknowns)]
    assert lost == [7] and verdicts[7] is None and all(v is not None for i, v in enumerate(verdicts) if i != 7)
    assert "exit code 7" in facts.scripts[7].unknowns[0].reason and facts.scripts[7].stack is not None
    result = engine.run(facts, verdicts=verdicts)
    assert {f.path for f in result.findings if f.rule_id == "PD201"} == {
        s.path for i, s in enumerate(facts.scripts) if i != 7
    }


def test_pre_commit_hook_definition():
    yaml = pytest.importorskip("yaml")
    hooks = yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text())
    hook = next(h for h in hooks if h["id"] == "precision-doctor")
    assert hook["entry"].startswith("precision-doctor check") and hook["language"] == "python"
    assert "python" in hook["types"]


def _workflow_steps():
    yaml = pytest.importorskip("yaml")
    workflow = yaml.safe_load((ROOT / "examples/github-actions.yml").read_text())
    return workflow, workflow["jobs"]["preflight"]["steps"]


def test_github_workflow_structure():
    workflow, steps = _workflow_steps()
    triggers = workflow[True] if True in workflow else workflow["on"]  # YAML 1.1 reads a bare `on` as true
    assert {"push", "pull_request"} <= set(triggers)
    assert workflow["permissions"]["security-events"] == "write"
    for step in steps:
        assert ("uses" in step) != ("run" in step), step
        if "uses" in step:
            assert "@v" in step["uses"], f"pin the action: {step['uses']}"
    install = next(s for s in steps if "pip install" in s.get("run", ""))
    assert "git+https://" in workflow["env"]["DOCTOR"] and "$DOCTOR" in install["run"]  # from the repository
    runs = " ".join(s.get("run", "") for s in steps)
    assert "--format github" in runs and "--format sarif -o precision-doctor.sarif" in runs
    assert "--facts ci/node.json" not in runs  # the snapshot is optional: only behind the file test
    upload = next(s for s in steps if "upload-sarif" in s.get("uses", ""))
    assert upload["with"]["sarif_file"] == "precision-doctor.sarif" and "hashFiles" in upload["if"]
    for step in steps:
        if "run" in step:
            assert subprocess.run(["bash", "-n"], input=step["run"], text=True).returncode == 0, step["run"]


@pytest.mark.parametrize("snapshot", [False, True], ids=["no-snapshot", "snapshot"])
def test_github_workflow_commands_run_as_written(tmp_path, snapshot):
    """The workflow's shell steps, run here in order with `precision-doctor` on the path: the machine step picks
    the snapshot only when it exists, the SARIF step never fails the job, the annotation step gates on errors."""
    workflow, steps = _workflow_steps()
    (tmp_path / "train.py").write_text(BAD)
    if snapshot:
        (tmp_path / "ci").mkdir()
        proc = doctor("snapshot", "--target", "t4", "-o", str(tmp_path / "ci/node.json"))
        assert proc.returncode == 0, proc.stderr
    shim = tmp_path / "bin" / "precision-doctor"
    shim.parent.mkdir()
    shim.write_text(f'#!/bin/sh\nexec {sys.executable} -m precision_doctor "$@"\n')
    shim.chmod(0o755)
    github_env = tmp_path / "github_env"
    github_env.write_text("")
    env = {
        **os.environ,
        **{k: str(v) for k, v in workflow["env"].items()},
        "GITHUB_ENV": str(github_env),
        "PATH": f"{shim.parent}{os.pathsep}{os.environ['PATH']}",
        "PYTHONPATH": str(ROOT),
    }
    codes = {}
    for step in steps:
        if "run" not in step or "pip install" in step["run"]:
            continue
        for line in github_env.read_text().splitlines():
            key, _, value = line.partition("=")
            env[key] = value
        proc = subprocess.run(
            ["bash", "-e", "-c", step["run"]], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
        )
        codes[step["name"]] = proc
    machine = next(line for line in github_env.read_text().splitlines() if line.startswith("MACHINE="))
    assert machine == ("MACHINE=--facts ci/node.json" if snapshot else "MACHINE=--target a100")
    sarif = next(p for name, p in codes.items() if name.startswith("SARIF"))
    assert sarif.returncode == 0 and json.loads((tmp_path / "precision-doctor.sarif").read_text())["runs"]
    gate = next(p for name, p in codes.items() if name.startswith("Check"))
    assert gate.returncode == 1 and gate.stdout.startswith("::error file=train.py,line=3"), gate.stdout + gate.stderr


def test_parallel_text_report_matches_one_process(tmp_path):
    sources = [BAD, DEPRECATED, (SEED001.parent / "fixed/train.py").read_text()]
    for i in range(36):
        (tmp_path / f"s{i:02d}.py").write_text(sources[i % 3])
    one = doctor("check", ".", "--target", "t4", "--jobs", "1", cwd=tmp_path)
    two = doctor("check", ".", "--target", "t4", "--jobs", "2", cwd=tmp_path)
    assert one.returncode == two.returncode == 1
    assert one.stdout == two.stdout and "PD201" in two.stdout


def test_noqa_with_the_doctors_codes_silences_a_bare_noqa_does_not(tmp_path):
    (tmp_path / "train.py").write_text(BAD.replace("fp16=True))", "fp16=True))  # noqa: PD201"))
    assert ids_of(doctor("check", "train.py", "--format", "json", cwd=tmp_path)) == []
    (tmp_path / "train.py").write_text(BAD.replace("fp16=True))", "fp16=True))  # noqa: E501, pd201"))
    assert ids_of(doctor("check", "train.py", "--format", "json", cwd=tmp_path)) == []
    for comment in ("# noqa", "# noqa: E501", "# noqa: PD204"):  # no code of this rule: the finding stays
        (tmp_path / "train.py").write_text(BAD.replace("fp16=True))", f"fp16=True))  {comment}"))
        assert "PD201" in ids_of(doctor("check", "train.py", "--format", "json", cwd=tmp_path)), comment


@pytest.mark.parametrize("warnings_filter", ["default", "error::DeprecationWarning,error::SyntaxWarning"])
def test_python_warnings_about_the_checked_code_never_reach_stderr_or_the_verdict(tmp_path, warnings_filter):
    """An invalid escape (`"\\d"`) in a project's setup.py or in a helper module: Python warns when it parses them.
    Those warnings are about code the doctor reads, not its own: stderr stays empty however the files are shared
    among workers (each worker used to print them once), and under `-W error` the files are still checked."""
    (tmp_path / "setup.py").write_text(
        'from setuptools import setup\nPATTERN = "\\d+"\nsetup(name="p", install_requires=["transformers>=4.40"])\n'
    )
    (tmp_path / "helper.py").write_text('import re\nWORD = re.compile("\\w+\\s")\n')
    for i in range(40):
        (tmp_path / f"s{i:02d}.py").write_text("import helper\n" + BAD + "# padding\n" * (2000 if i < 8 else 0))
    env = {**os.environ, "PYTHONWARNINGS": warnings_filter}
    runs = [
        subprocess.run(
            [
                sys.executable,
                "-m",
                "precision_doctor",
                "check",
                ".",
                "--target",
                "t4",
                "-v",
                "--show-unknowns",
                "--jobs",
                jobs,
            ],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
        )
        for jobs in ("1", "2")
    ]
    for proc in runs:
        assert proc.stderr == "" and proc.returncode == 1, proc.stderr
        assert "not checked" not in proc.stdout and "syntax error" not in proc.stdout
        assert proc.stdout.count("error PD201") == 40
    assert runs[0].stdout == runs[1].stdout
